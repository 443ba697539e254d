"""Azure VMs as nodes. Pure: reads the SDK's VirtualMachine models, makes no calls.

A VM is listed with its instance view (`$expand=instanceView`: one call per tick for the
whole resource group), so its power state comes with it. Its addresses are its NIC's and
public IP's, which the provider knows from the deployment that made it (or from one
listing of the group's NICs and public IPs) and passes in as `Addresses`; VMs made by
earlier versions carry them in their tags (`TAG_PRIVATE_IP`, `TAG_PUBLIC_IP`).

States: provisioning or starting is PENDING, running is RUNNING. A spot worker Azure
evicted (deallocated, not by the launcher) is PREEMPTED until the autoscaler has answered
it (the provider then deletes it, never keeps it for reuse); a VM the launcher stopped
(`STOPPED_TAG`) is only in `stopped_nodes`; a deleting or failed VM is no node.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from launcher.providers.nodes import TAG_KIND, TAG_TYPE, Node, NodeKind, NodeState

TAG_PRIVATE_IP = "launcher-private-ip"
TAG_PUBLIC_IP = "launcher-public-ip"
STOPPED_TAG = "launcher-stopped"  # set on VMs the launcher deallocated itself
_INTERNAL_TAGS = (TAG_PRIVATE_IP, TAG_PUBLIC_IP, STOPPED_TAG)
_OFF = {"stopped", "stopping", "deallocated", "deallocating"}
Addresses = tuple[str | None, str | None]  # (private IP, public IP)


def _text(value: Any) -> str:
    """A model field as text, lower case: the SDK's enums are `str` enums, whose `str()` is
    their class and member name, not their value."""
    return str(getattr(value, "value", value) or "").lower()


def statuses(vm: Any) -> dict[str, str]:
    """The instance view's statuses by kind: {"PowerState": "running",
    "ProvisioningState": "succeeded"}."""
    view = getattr(vm, "instance_view", None)
    found = {}
    for status in getattr(view, "statuses", None) or ():
        kind, _, value = str(getattr(status, "code", "") or "").partition("/")
        if value:
            found[kind] = value.lower()
    return found


def power_state(vm: Any) -> str:
    """`running`, `starting`, `deallocated` ... ("" while Azure has not said)."""
    return statuses(vm).get("PowerState", "")


def provisioning_state(vm: Any) -> str:
    """The VM's provisioning state, lower case (`creating`, `succeeded`, `failed` ...)."""
    return _text(getattr(vm, "provisioning_state", ""))


def is_spot_vm(vm: Any) -> bool:
    return _text(getattr(vm, "priority", "")) == "spot"


def zone_of(vm: Any) -> str:
    zones = getattr(vm, "zones", None) or ()
    return str(zones[0]) if zones else ""


def created_at(vm: Any) -> float:
    made = getattr(vm, "time_created", None)
    return made.timestamp() if made is not None else 0.0


def launcher_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """A node's tags as callers see them: without the provider's own bookkeeping."""
    return {k: v for k, v in tags.items() if k not in _INTERNAL_TAGS}


def evicted(vm: Any) -> bool:
    """A spot worker Azure evicted: off, and not deallocated by the launcher."""
    tags: Mapping[str, str] = getattr(vm, "tags", None) or {}
    return (
        tags.get(TAG_KIND) == NodeKind.WORKER.value
        and is_spot_vm(vm)
        and STOPPED_TAG not in tags
        and power_state(vm) in _OFF
    )


def tagged_addresses(vm: Any) -> Addresses | None:
    """The addresses an earlier version wrote into the VM's tags, if it did."""
    tags: Mapping[str, str] = getattr(vm, "tags", None) or {}
    if TAG_PRIVATE_IP not in tags:
        return None
    return tags.get(TAG_PRIVATE_IP), tags.get(TAG_PUBLIC_IP)


def _ip(addresses: Addresses | None, internal: bool) -> str | None:
    private, public = addresses or (None, None)
    return (private if internal else public or private) or None


def to_node(
    vm: Any,
    internal: bool,
    answered: Collection[str] = (),
    addresses: Addresses | None = None,
) -> Node | None:
    """The node `vm` is, or None when it is not one of the cluster's live nodes (see the
    module docstring). `internal`: address it by its private IP; `addresses`: its IPs
    (else those of its tags)."""
    tags: Mapping[str, str] = getattr(vm, "tags", None) or {}
    kind_tag = tags.get(TAG_KIND)
    if kind_tag not in (NodeKind.HEAD.value, NodeKind.WORKER.value):
        return None
    kind = NodeKind(kind_tag)
    name = str(vm.name)
    provisioning, power = provisioning_state(vm), power_state(vm)
    if provisioning in ("deleting", "failed"):
        return None
    if power in _OFF:
        if not evicted(vm) or name in answered:
            return None
        state = NodeState.PREEMPTED
    elif power == "running" and provisioning == "succeeded":
        state = NodeState.RUNNING
    else:
        state = NodeState.PENDING
    return Node(
        id=name,
        kind=kind,
        node_type=tags.get(TAG_TYPE, ""),
        ip=_ip(addresses or tagged_addresses(vm), internal),
        state=state,
        tags=launcher_tags(tags),
        created_at=created_at(vm),
        zone=zone_of(vm),
    )


def made_node(
    name: str,
    kind: NodeKind,
    tags: Mapping[str, str],
    zone: str,
    addresses: Addresses | None,
    internal: bool,
) -> Node:
    """A VM a deployment has just made, as a PENDING node (running once a listing's
    instance view says so)."""
    return Node(
        id=name,
        kind=kind,
        node_type=tags.get(TAG_TYPE, ""),
        ip=_ip(addresses, internal),
        state=NodeState.PENDING,
        tags=launcher_tags(tags),
        created_at=time.time(),
        zone=zone,
    )


def stopped_node(vm: Any, internal: bool, addresses: Addresses | None = None) -> Node | None:
    """A VM the launcher deallocated itself, as a STOPPED node (None for any other VM)."""
    tags: Mapping[str, str] = getattr(vm, "tags", None) or {}
    if STOPPED_TAG not in tags or power_state(vm) not in _OFF:
        return None
    if tags.get(TAG_KIND) not in (NodeKind.HEAD.value, NodeKind.WORKER.value):
        return None
    return Node(
        id=str(vm.name),
        kind=NodeKind(tags[TAG_KIND]),
        node_type=tags.get(TAG_TYPE, ""),
        ip=_ip(addresses or tagged_addresses(vm), internal),
        state=NodeState.STOPPED,
        tags=launcher_tags(tags),
        created_at=created_at(vm),
        zone=zone_of(vm),
    )


def identity_client_id(vm: Any) -> str | None:
    """The client id of the first user-assigned managed identity `vm` runs as (the head's),
    as ARM lists it with the VM; None when it has none."""
    identity = getattr(vm, "identity", None)
    assigned = getattr(identity, "user_assigned_identities", None) or {}
    for value in assigned.values():
        client_id = getattr(value, "client_id", None)
        if client_id:
            return str(client_id)
    return None
