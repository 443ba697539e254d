"""What the head's service account is granted on the project, and the edits of an IAM
policy that grant and revoke it. Pure: no API calls.

The autoscaler on the head lists the project's instances (every zone), inserts, labels,
stops, starts and deletes its cluster's workers, and waits on zone operations. So the head
gets `roles/compute.instanceAdmin.v1` on the project under an IAM condition (policy
version 3): on instances and disks only those whose names begin with the cluster's instance
prefix (a boot disk is named as its instance); no image, snapshot, instance template,
instance group or machine image at all; the rest of the role (listing, operations, zones,
machine types, subnetworks and networks an insert uses) as the role has it.
`roles/compute.imageUser` (read and use images, nothing else) lets it boot workers from the
project's own images. Each cluster's conditional binding is its own (titled with the
cluster's prefix); `down --purge` removes the account from every binding it is in, and the
bindings it leaves empty, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from launcher.providers.gcp import names

INSTANCE_ADMIN = "roles/compute.instanceAdmin.v1"
IMAGE_USER = "roles/compute.imageUser"
POLICY_VERSION = 3  # the version that carries conditions
_TYPE = "compute.googleapis.com/"
# Resource types the head never needs to touch.
_NEVER = ("Image", "Snapshot", "InstanceTemplate", "InstanceGroup", "InstanceGroupManager")
_NEVER_TOO = (
    "MachineImage",
    "RegionInstanceGroupManager",
    "RegionInstanceTemplate",
    "RegionDisk",
    "Autoscaler",
    "NetworkEndpointGroup",
    "ResourcePolicy",
)


def condition(cluster: str) -> dict[str, str]:
    """The IAM condition scoping the head's instance admin role to its cluster."""
    prefix = f"{names.instance_prefix(cluster)}-"
    own = " || ".join(
        f'(resource.type == "{_TYPE}{kind}" && '
        f'resource.name.extract("/{plural}/{{name}}").startsWith("{prefix}"))'
        for kind, plural in (("Instance", "instances"), ("Disk", "disks"))
    )
    others = " && ".join(
        f'resource.type != "{_TYPE}{kind}"' for kind in ("Instance", "Disk", *_NEVER, *_NEVER_TOO)
    )
    return {
        "title": names.grant_title(cluster),
        "description": f"instances and disks of launcher cluster {cluster}",
        "expression": f"{own} || ({others})",
    }


def wanted(cluster: str) -> list[dict[str, Any]]:
    """The project bindings the head's account is to be in (without members)."""
    return [{"role": INSTANCE_ADMIN, "condition": condition(cluster)}, {"role": IMAGE_USER}]


def grant(policy: dict[str, Any], cluster: str, member: str) -> bool:
    """Put `member` in the cluster's bindings of `policy`, and out of an unconditioned
    instance admin binding (what earlier versions granted). Whether anything changed."""
    bindings: list[dict[str, Any]] = policy.setdefault("bindings", [])
    changed = _leave(bindings, member, lambda b: _same(b, {"role": INSTANCE_ADMIN}))
    for want in wanted(cluster):
        binding = next((b for b in bindings if _same(b, want)), None)
        if binding is None:
            bindings.append({**want, "members": [member]})
            changed = True
            continue
        if want.get("condition") and binding.get("condition") != want["condition"]:
            binding["condition"] = want["condition"]  # as this version writes it
            changed = True
        if member not in binding.setdefault("members", []):
            binding["members"].append(member)
            changed = True
    if changed and any(b.get("condition") for b in bindings):
        policy["version"] = POLICY_VERSION
    return changed


def revoke(policy: dict[str, Any], member: str) -> bool:
    """Take `member` out of every binding of `policy` (and drop the bindings it leaves
    empty). Whether anything changed."""
    bindings: list[dict[str, Any]] = policy.setdefault("bindings", [])
    changed = _leave(bindings, member, lambda b: True)
    if changed and any(b.get("condition") for b in bindings):
        policy["version"] = POLICY_VERSION
    return changed


def _same(binding: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether `binding` is the binding `want` names: its role, and its condition's title
    (the cluster's), or no condition."""
    title = (want.get("condition") or {}).get("title")
    return bool(
        binding.get("role") == want["role"]
        and (binding.get("condition") or {}).get("title") == title
    )


def _leave(
    bindings: list[dict[str, Any]], member: str, which: Callable[[Mapping[str, Any]], bool]
) -> bool:
    changed = False
    for binding in list(bindings):
        members = binding.get("members") or []
        if member in members and which(binding):
            members.remove(member)
            changed = True
            if not members:
                bindings.remove(binding)
    return changed
