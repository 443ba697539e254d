"""Names the Kubernetes provider derives from a cluster name. Pure; imports no client.

Object names must be DNS-1123 labels (lowercase letters, digits and `-`), so a cluster name
such as `ml.prod`, `ml_prod` or `ML-prod` cannot be used as it is; `launcher.naming.derive`
changes it and adds a hash of the exact name, so those clusters never share an object.
Labels keep the exact cluster name (label values allow it), so selectors stay exact.

The provider (what `up` creates) and the spec (what `plan` prints) both call these.
"""

from __future__ import annotations

import re

from launcher.naming import NameRule, derive

# The objects the launcher makes for a cluster's head pod when the config names none.
AUTOSCALER_PREFIX = "launcher-autoscaler-"
# Kubernetes cuts a `generateName` to 58 characters before adding 5 random ones; a prefix
# may end with `-`.
GENERATE_NAME = NameRule(58, r"[^a-z0-9-]+", lowercase=True, start="[a-z0-9]", end="[a-z0-9-]")
# A label value: 63 characters at most, letters, digits, `-`, `_` and `.`, starting and
# ending with a letter or digit (or empty).
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

# Kubernetes object names (DNS-1123 labels, which every object kind accepts).
KUBE_NAME = NameRule(63, r"[^a-z0-9-]+", lowercase=True, start="[a-z0-9]", end="[a-z0-9]")


def autoscaler_name(cluster_name: str) -> str:
    """The name of the ServiceAccount, Role and RoleBinding the launcher makes for the
    cluster's head pod (one of each, all three with this name)."""
    return derive(AUTOSCALER_PREFIX, cluster_name, KUBE_NAME)


def pod_name_prefix(cluster_name: str, kind: str) -> str:
    """The `generateName` of the cluster's pods of `kind` ("head" or "worker") whose
    manifest gives none."""
    return derive("", cluster_name, GENERATE_NAME, f"-{kind}-")


def is_label_value(text: str) -> bool:
    return bool(_LABEL_VALUE.match(text))


def label_problem(cluster_name: str) -> str | None:
    """What is wrong with `cluster_name` as the label of the cluster's pods, or None; the
    fix is to rename the cluster."""
    if is_label_value(cluster_name):
        return None
    return (
        f"{cluster_name!r} cannot be a Kubernetes label value (63 characters at most: "
        "letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
    )
