"""Every name a provider derives from a cluster name is the cluster's own: two clusters whose
names differ only in what a cloud's rules change (case, punctuation, length) never share a
role, account, firewall tag, security group or object, and `plan` prints the names `up` uses.

Runs over every registered provider type (providers/registry.py), from its example config;
a provider passes by what its spec's `derived_names` returns, not by being special-cased here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.providers.registry import SPECS
from launcher.providers.spec import ProviderSpec
from tests.conftest import RAY_EXAMPLES, REPO

EXAMPLES = {
    "localhost": REPO / "example-configs" / "local.yaml",
    "local": REPO / "example-configs" / "onprem.yaml",
    "aws": REPO / "example-configs" / "aws-minimal.yaml",
    "gcp": REPO / "example-configs" / "gcp-minimal.yaml",
    "kubernetes": REPO / "example-configs" / "kubernetes-minimal.yaml",
    "fake_multinode": RAY_EXAMPLES / "fake_multi_node" / "example.yaml",
}

# Names that collide once lowercased, stripped of punctuation or cut to a length cap (and
# one named as another's changed name: `ML-prod` becomes `ml-prod-00696b36` where a rule
# forces a change).
LONG = "a" * 60
COLLIDING = (
    ("ml.prod", "ml_prod", "ML-prod", "ml-prod", "ml--prod", "Ml.Prod", "ml-prod-00696b36"),
    (LONG + "xyz", LONG + "xyw", LONG + "XYZ", LONG),
)


def _config(path: Path, cluster: str) -> ClusterConfig:
    text = re.sub(r"(?m)^cluster_name:.*$", "", path.read_text())
    return parse_config(f"cluster_name: {cluster}\n{text}", str(path), Overrides())


def test_every_provider_type_has_an_example_here() -> None:
    assert set(SPECS) <= set(EXAMPLES), set(SPECS) - set(EXAMPLES)


@pytest.mark.parametrize("provider_type", sorted(EXAMPLES))
@pytest.mark.parametrize("names", COLLIDING, ids=["punctuation-and-case", "length"])
def test_names_derived_from_colliding_cluster_names_stay_apart(
    provider_type: str, names: tuple[str, ...]
) -> None:
    spec: ProviderSpec = SPECS[provider_type]
    by_kind: dict[str, dict[str, str]] = {}
    for cluster in names:
        config = _config(EXAMPLES[provider_type], cluster)
        derived = spec.derived_names(config)
        assert derived == spec.derived_names(config)  # a pure function of the config
        for kind, name in derived.items():
            assert name and name == name.strip() and len(name) <= 255, (kind, name)
            by_kind.setdefault(kind, {})[cluster] = name
    # Every provider creates something named after the cluster (a role, an account, an
    # object, a directory): a spec that derives no name has not been asked.
    assert by_kind, f"{provider_type}: derived_names is empty"
    for kind, given in by_kind.items():
        assert set(given) == set(names), f"{kind} is derived for some names only: {given}"
        clashes = {n for n in given.values() if list(given.values()).count(n) > 1}
        assert not clashes, f"{provider_type}: {kind} shared by clusters: {given}"
    # Names the cloud compares without case must differ without case too.
    for kind, given in by_kind.items():
        folded = [n.lower() for n in given.values()]
        if any(word in kind.lower() for word in ("role", "iam", "group", "profile")):
            assert len(set(folded)) == len(folded), (kind, given)


@pytest.mark.parametrize("provider_type", sorted(EXAMPLES))
def test_plan_prints_the_names_up_creates(provider_type: str) -> None:
    spec = SPECS[provider_type]
    for cluster in ("ml.prod", LONG + "xyz"):
        config = _config(EXAMPLES[provider_type], cluster)
        shown = " ".join(f"{r.name} {r.detail}" for r in spec.bootstrap_plan(config))
        for kind, name in spec.derived_names(config).items():
            assert name in shown, f"{provider_type}: plan does not show the {kind} {name!r}"
