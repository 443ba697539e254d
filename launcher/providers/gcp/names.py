"""Every name the GCE provider derives from a cluster name. Pure; the provider and `plan`
(GcpSpec) call the same functions, so `plan` prints the names `up` creates.

Each is unique per exact cluster name and valid for GCE (launcher/naming.py): `ml.prod`,
`ml_prod` and `ML-prod` get three service accounts, network tags and firewall rules.

Instance names begin with `instance_prefix`, `launcher-HASH-STEM`: the hash of the exact
cluster name comes first, so no cluster's prefix begins another cluster's instance names
(`launcher-ml-` would begin `launcher-ml-prod-...`, and a cluster may even be named after
another's hashed form): the head's IAM grant is scoped by that prefix.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.naming import NameRule, derive, name_hash
from launcher.providers.keyfiles import key_path

if TYPE_CHECKING:
    from launcher.providers.base import NodeKind

_STEM_MAX = 30  # of the cluster name in instance names: 9 + 9 + 30 + 3 + 10 <= 63

# GCE resource names (instances, firewall rules, network tags): RFC 1035 labels.
GCE_NAME = NameRule(63, r"[^a-z0-9-]+", lowercase=True, start="[a-z]", end="[a-z0-9]")
# GCP service account ids: 6-30 characters, otherwise as GCE names.
GCP_ACCOUNT = NameRule(30, r"[^a-z0-9-]+", lowercase=True, start="[a-z]", end="[a-z0-9]")
# GCP custom role ids: letters, digits, `_` and `.`, up to 64.
GCP_ROLE = NameRule(64, r"[^A-Za-z0-9_.]+", start="[A-Za-z]", end="[A-Za-z0-9_]")


def account_id(cluster: str) -> str:
    """The head's service account id (6-30 characters)."""
    return derive("launcher-", cluster, GCP_ACCOUNT)


def network_tag(cluster: str) -> str:
    """The network tag on the cluster's instances, which its firewall rules target."""
    return derive("launcher-", cluster, GCE_NAME, "-node")


def ssh_rule(cluster: str) -> str:
    """The firewall rule letting SSH in to the cluster's nodes."""
    return derive("launcher-", cluster, GCE_NAME, "-node-ssh")


def internal_rule(cluster: str) -> str:
    """The firewall rule letting the cluster's nodes reach each other."""
    return derive("launcher-", cluster, GCE_NAME, "-node-internal")


def instance_prefix(cluster: str) -> str:
    """`launcher-HASH-STEM`: what every instance name of the cluster begins with (then `-`)."""
    stem = re.sub(GCE_NAME.invalid, "-", cluster.lower()).strip("-")[:_STEM_MAX].rstrip("-")
    return f"launcher-{name_hash(cluster)}-{stem}" if stem else f"launcher-{name_hash(cluster)}"


def instance_name(cluster: str, kind: NodeKind, seed: str) -> str:
    """`PREFIX-h|w-DIGEST`: a valid instance name, the same for the same seed."""
    digest = hashlib.sha256(seed.encode()).hexdigest()[:10]
    return f"{instance_prefix(cluster)}-{kind.value[0]}-{digest}"


def grant_title(cluster: str) -> str:
    """The title of the condition that scopes the head's grant to the cluster's instances."""
    return f"launcher cluster {instance_prefix(cluster)}"


def key_file(cluster: str) -> Path:
    """The SSH key the launcher makes for the cluster under `$LAUNCHER_HOME/keys/`. One
    made by an earlier version under the cluster's exact name is used while it exists and
    the derived one does not, so a running cluster stays reachable."""
    derived = key_path(derive("launcher-gcp-", cluster, GCE_NAME))
    legacy = key_path(f"launcher-gcp-{cluster}")
    if "/" in cluster or derived.exists() or not legacy.parent.is_dir():
        return derived
    # By its exact name: on a case-blind file system `ML-prod`'s would be `ml-prod`'s key.
    return legacy if legacy.name in {p.name for p in legacy.parent.iterdir()} else derived


def derived_names(cluster: str) -> dict[str, str]:
    """Kind of resource -> the name `up` gives it."""
    return {
        "head service account": account_id(cluster),
        "network tag": network_tag(cluster),
        "SSH firewall rule": ssh_rule(cluster),
        "internal firewall rule": internal_rule(cluster),
        "instance name prefix": instance_prefix(cluster),
        "SSH key file": key_file(cluster).stem,
    }
