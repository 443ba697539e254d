"""Every name the Azure provider derives from a cluster name. Pure; the provider and `plan`
(AzureSpec) call the same functions, so `plan` prints the names `up` creates.

Azure Resource Manager compares resource names without case, and each kind has its own
characters and length (launcher/naming.py keeps the result unique per exact cluster name):
`ml.prod`, `ml_prod` and `ML-prod` get three networks, security groups and identities, so
two clusters in one resource group never share, or delete, each other's.

`unique_id` (Ray's `provider.unique_id`) is appended where Ray appends it (the network,
subnet, security group and identity), so two clusters of one name in two resource groups
can be told apart in the portal as Ray's are.

VM names begin with `vm_prefix`, `launcher-HASH-STEM`: the hash of the exact cluster name
comes first, so no cluster's prefix begins another cluster's VM names.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.naming import NameRule, derive, name_hash
from launcher.providers.keyfiles import key_path

if TYPE_CHECKING:
    from launcher.providers.base import NodeKind

# Virtual machines: 1-64 of letters, digits and `-` (the Linux host name it also becomes).
AZURE_VM = NameRule(64, r"[^A-Za-z0-9-]+", ignores_case=True, start="[A-Za-z0-9]")
# Network resources (virtual networks 2-64, subnets, security groups, NICs, public IPs
# 1-80): letters, digits, `_`, `.` and `-`; begin with a letter or digit, end with one or `_`.
AZURE_NETWORK = NameRule(
    64, r"[^A-Za-z0-9_.-]+", ignores_case=True, start="[A-Za-z0-9]", end="[A-Za-z0-9_]"
)
# User-assigned managed identities: 3-128 of letters, digits, `-` and `_`.
AZURE_IDENTITY = NameRule(128, r"[^A-Za-z0-9_-]+", ignores_case=True, start="[A-Za-z0-9]")
# Resource groups: 1-90 of letters, digits, `_`, `(`, `)`, `.` and `-`, not ending in `.`.
AZURE_GROUP = NameRule(90, r"[^A-Za-z0-9_().-]+", ignores_case=True, start=".", end="[^.]")

_STEM_MAX = 30  # of the cluster name in VM names: 9 + 9 + 30 + 3 + 10 <= 64
# Contributor, a built-in role: the same id in every tenant.
CONTRIBUTOR_ROLE = "b24988ac-6180-42a0-ab88-20f7382dd24c"
_ASSIGNMENT_NAMESPACE = uuid.UUID("5c1f4c53-93a5-4c39-9d0e-4fd2a8f3a9e1")


def _suffix(unique_id: str | None) -> str:
    return f"-{re.sub(r'[^A-Za-z0-9_-]+', '-', unique_id)}" if unique_id else ""


def vnet(cluster: str, unique_id: str | None = None) -> str:
    """The cluster's virtual network (when node_config names no subnet of the user's)."""
    return derive("launcher-", cluster, AZURE_NETWORK, f"-vnet{_suffix(unique_id)}")


def subnet(cluster: str, unique_id: str | None = None) -> str:
    return derive("launcher-", cluster, AZURE_NETWORK, f"-subnet{_suffix(unique_id)}")


def security_group(cluster: str, unique_id: str | None = None) -> str:
    """The network security group on the cluster's subnet: SSH from the caller only."""
    return derive("launcher-", cluster, AZURE_NETWORK, f"-nsg{_suffix(unique_id)}")


def identity(cluster: str, unique_id: str | None = None) -> str:
    """The head's user-assigned managed identity (unless `msi_name` names the user's)."""
    return derive("launcher-", cluster, AZURE_IDENTITY, f"-head{_suffix(unique_id)}")


def vm_prefix(cluster: str) -> str:
    """`launcher-HASH-STEM`: what every VM name of the cluster begins with (then `-`)."""
    stem = re.sub(AZURE_VM.invalid, "-", cluster.lower()).strip("-")[:_STEM_MAX].rstrip("-")
    return f"launcher-{name_hash(cluster)}-{stem}" if stem else f"launcher-{name_hash(cluster)}"


def vm_name(cluster: str, kind: NodeKind, seed: str) -> str:
    """`PREFIX-h|w-DIGEST`: a valid VM name, the same for the same seed (a launch's request
    id and index), so a repeated launch finds the VM it made."""
    digest = hashlib.sha256(seed.encode()).hexdigest()[:10]
    return f"{vm_prefix(cluster)}-{kind.value[0]}-{digest}"


def nic_name(vm: str) -> str:
    return f"{vm}-nic"


def public_ip_name(vm: str) -> str:
    return f"{vm}-ip"


def os_disk_name(vm: str) -> str:
    return f"{vm}-osdisk"


def role_assignment(scope: str, principal_id: str, role: str = CONTRIBUTOR_ROLE) -> str:
    """The role assignment's name (a GUID): the same for the same scope, principal and role,
    so a second `up` finds the one the first made instead of adding another."""
    return str(uuid.uuid5(_ASSIGNMENT_NAMESPACE, f"{scope.lower()}|{principal_id}|{role}"))


def key_file(cluster: str) -> Path:
    """The SSH key the launcher makes for the cluster under `$LAUNCHER_HOME/keys/` when
    auth names none."""
    return key_path(derive("launcher-azure-", cluster, AZURE_IDENTITY))


def derived_names(cluster: str, unique_id: str | None = None) -> dict[str, str]:
    """Kind of resource -> the name `up` gives it."""
    return {
        "virtual network": vnet(cluster, unique_id),
        "subnet": subnet(cluster, unique_id),
        "network security group": security_group(cluster, unique_id),
        "head managed identity": identity(cluster, unique_id),
        "VM name prefix": vm_prefix(cluster),
        "SSH key file": key_file(cluster).stem,
    }
