"""launcher/naming.py: a name derived from a cluster name is valid for the cloud's rule, and
two different cluster names never give the same name, under any rule."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.naming import NameRule, derive, name_hash
from launcher.providers.aws.names import AWS_EC2, AWS_IAM
from launcher.providers.gcp.names import GCE_NAME, GCP_ACCOUNT, GCP_ROLE
from launcher.providers.kubernetes.names import KUBE_NAME

# (prefix, rule, suffix) as the providers use them.
USES = [
    ("launcher-", GCE_NAME, "-node"),
    ("launcher-", GCP_ACCOUNT, ""),
    ("launcher_head.", GCP_ROLE, ""),
    ("launcher-head-", AWS_IAM, ""),
    ("launcher-", AWS_EC2, "-us-west-2"),
    ("launcher-autoscaler-", KUBE_NAME, ""),
    ("", KUBE_NAME, "-head"),
]
# What the cluster_name schema allows: 1 to 63 of [A-Za-z0-9_.-], starting with a letter or digit.
# Short names over a few characters collide after lowercasing or replacing punctuation;
# long ones after cutting to a length cap.
CLUSTER = st.one_of(
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z"),
    st.from_regex(r"\A[mM][lL._-]{0,5}\Z"),
    st.from_regex(r"\Aa{55,60}[aAb._-]{0,3}\Z"),
)


def _key(rule: NameRule, name: str) -> str:
    return name.lower() if rule.ignores_case else name


@pytest.mark.parametrize(("prefix", "rule", "suffix"), USES)
def test_the_plain_form_is_kept_where_the_rule_allows_it(
    prefix: str, rule: NameRule, suffix: str
) -> None:
    assert derive(prefix, "demo", rule, suffix) == f"{prefix}demo{suffix}"


@pytest.mark.parametrize(("prefix", "rule", "suffix"), USES)
@settings(max_examples=150, deadline=None)
@given(names=st.lists(CLUSTER, min_size=2, max_size=6, unique=True))
def test_derived_names_are_valid_and_never_shared(
    prefix: str, rule: NameRule, suffix: str, names: list[str]
) -> None:
    derived = {name: derive(prefix, name, rule, suffix) for name in names}
    for name, result in derived.items():
        assert rule.valid(result), (name, result)
        assert derive(prefix, name, rule, suffix) == result  # pure
    keys = [_key(rule, result) for result in derived.values()]
    assert len(set(keys)) == len(keys), derived


@pytest.mark.parametrize(("prefix", "rule", "suffix"), USES)
def test_a_name_made_to_look_like_anothers_changed_name_gets_its_own(
    prefix: str, rule: NameRule, suffix: str
) -> None:
    changed = derive(prefix, "ML-prod", rule, suffix)
    mimic = f"ml-prod-{name_hash('ML-prod')}"
    assert derive(prefix, mimic, rule, suffix) != changed
    assert _key(rule, derive(prefix, mimic, rule, suffix)) != _key(rule, changed)


def test_colliding_names_of_the_issue() -> None:
    accounts = {derive("launcher-", n, GCP_ACCOUNT) for n in ("ml.prod", "ml_prod", "ML-prod")}
    assert len(accounts) == 3
    long_a, long_b = "a" * 60 + "xyz", "a" * 60 + "xyw"
    roles = {derive("launcher-head-", n, AWS_IAM) for n in (long_a, long_b)}
    assert len(roles) == 2 and all(len(r) <= 64 for r in roles)
    assert re.fullmatch(r"launcher-head-a+-[0-9a-f]{8}", min(roles))
