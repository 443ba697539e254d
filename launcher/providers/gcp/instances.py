"""GCE instances as nodes, and the instance bodies the launcher inserts. Pure: no API calls.

Tags are GCE labels. Labels allow only `[a-z0-9_-]` and 63 characters, so a value with
other characters (a node type `ray.head.default`, a cluster `Team-A`) is written escaped:
each byte outside `[a-z0-9-]`, `_` included, as `_` and two hex digits; values are read back
the same way. Keys are the launcher's own (`launcher-...`) or the user's, already valid.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from launcher.config.frozen import thaw
from launcher.errors import ProviderError
from launcher.providers.base import TAG_KIND, TAG_TYPE, Node, NodeKind, NodeState

_PLAIN = re.compile(r"[a-z0-9-]")
_ESCAPED = re.compile(r"^(?:[a-z0-9-]|_[0-9a-f]{2})*$")
_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_MAX = 63
STOPPED_LABEL = "launcher-stopped"  # set on instances the launcher stopped itself
_STATES = {
    "PROVISIONING": NodeState.PENDING,
    "STAGING": NodeState.PENDING,
    "RUNNING": NodeState.RUNNING,
    "REPAIRING": NodeState.PENDING,
}
CAPACITY_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "UNSUPPORTED_OPERATION",
        "RESOURCE_NOT_AVAILABLE",
        "resourceExhausted",
        "QUOTA_EXCEEDED",
        "quotaExceeded",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})


def encode_value(text: str) -> str:
    out = []
    for char in text:
        if _PLAIN.fullmatch(char):
            out.append(char)
        else:
            out += [f"_{byte:02x}" for byte in char.encode()]
    encoded = "".join(out)
    if len(encoded) > LABEL_MAX:
        raise ProviderError(
            f"{text!r} is too long for a GCE label ({len(encoded)} characters written as a "
            f"label, {LABEL_MAX} at most); use a shorter, lowercase name"
        )
    return encoded


def decode_value(label: str) -> str:
    if "_" not in label or not _ESCAPED.match(label):
        return label
    data = bytearray()
    index = 0
    while index < len(label):
        if label[index] == "_":
            data.append(int(label[index + 1 : index + 3], 16))
            index += 3
        else:
            data += label[index].encode()
            index += 1
    try:
        return data.decode()
    except UnicodeDecodeError:
        return label


def labels_of(tags: Mapping[str, str]) -> dict[str, str]:
    labels = {}
    for key, value in tags.items():
        if not _KEY.match(key):
            raise ProviderError(
                f"tag {key!r} cannot be a GCE label key (lowercase letters, digits, _ and -, "
                "starting with a letter, 63 at most)"
            )
        labels[key] = encode_value(value)
    return labels


def tags_of(instance: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): decode_value(str(v)) for k, v in (instance.get("labels") or {}).items()}


def zone_of(instance: Mapping[str, Any]) -> str:
    return str(instance.get("zone", "")).rsplit("/", 1)[-1]


def _address(instance: Mapping[str, Any], internal: bool) -> str | None:
    interfaces = instance.get("networkInterfaces") or [{}]
    first = interfaces[0]
    if internal:
        found = first.get("networkIP")
    else:
        found = (first.get("accessConfigs") or [{}])[0].get("natIP")
    return str(found) if found else None


def is_spot(instance: Mapping[str, Any]) -> bool:
    scheduling = instance.get("scheduling") or {}
    return bool(scheduling.get("preemptible")) or scheduling.get("provisioningModel") == "SPOT"


def to_node(instance: Mapping[str, Any], internal: bool, answered: Collection[str]) -> Node | None:
    """The node an instance is, or None when it is not one of the cluster's live nodes. A
    spot worker GCE stopped (status TERMINATED, not stopped by the launcher) is PREEMPTED
    until the autoscaler has answered it (`answered`)."""
    tags = tags_of(instance)
    kind_tag = tags.get(TAG_KIND)
    if kind_tag not in (NodeKind.HEAD.value, NodeKind.WORKER.value):
        return None
    kind = NodeKind(kind_tag)
    status = str(instance.get("status", ""))
    name = str(instance.get("name", ""))
    state = _STATES.get(status)
    if state is None:
        reclaimed = (
            status in ("TERMINATED", "STOPPING")
            and kind is NodeKind.WORKER
            and is_spot(instance)
            and STOPPED_LABEL not in tags
        )
        if not reclaimed or name in answered:
            return None
        state = NodeState.PREEMPTED
    created = instance.get("creationTimestamp")
    return Node(
        id=name,
        kind=kind,
        node_type=tags.get(TAG_TYPE, ""),
        ip=_address(instance, internal),
        state=state,
        tags={k: v for k, v in tags.items() if k != STOPPED_LABEL},
        created_at=datetime.fromisoformat(created).timestamp() if isinstance(created, str) else 0.0,
        zone=zone_of(instance),
    )


def instance_body(
    node_config: Mapping[str, Any],
    *,
    name: str,
    zone: str,
    project: str,
    labels: Mapping[str, str],
    ssh_key: str,
    network_tag: str,
    internal: bool,
) -> dict[str, Any]:
    """The `instances.insert` body: the node type's node_config as written, plus what the
    launcher needs (name, labels, the SSH key in `ssh-keys` metadata, the firewall's network
    tag, an external address unless `internal`). Short names become the zone's URLs."""
    body: dict[str, Any] = thaw(node_config)
    body["name"] = name
    machine = str(body.get("machineType", "n1-standard-2"))
    if "/" not in machine:
        body["machineType"] = f"zones/{zone}/machineTypes/{machine}"
    for accelerator in body.get("guestAccelerators") or ():
        kind = str(accelerator.get("acceleratorType", ""))
        if kind and "/" not in kind:
            accelerator["acceleratorType"] = (
                f"projects/{project}/zones/{zone}/acceleratorTypes/{kind}"
            )
    if isinstance(body.get("scheduling"), list):  # Ray's older examples write a list
        merged: dict[str, Any] = {}
        for entry in body["scheduling"]:
            merged.update(entry)
        body["scheduling"] = merged
    if body.get("guestAccelerators"):
        body.setdefault("scheduling", {}).setdefault("onHostMaintenance", "TERMINATE")
    body["labels"] = {**(body.get("labels") or {}), **labels}
    metadata = body.setdefault("metadata", {})
    items = [dict(i) for i in metadata.get("items") or ()]
    keys = next((i for i in items if i.get("key") == "ssh-keys"), None)
    if keys is None:
        items.append({"key": "ssh-keys", "value": ssh_key})
    elif ssh_key not in str(keys.get("value", "")).splitlines():
        keys["value"] = f"{keys.get('value', '')}\n{ssh_key}".strip()
    metadata["items"] = items
    tags = body.setdefault("tags", {})
    tags["items"] = sorted({*(tags.get("items") or ()), network_tag})
    if not body.get("networkInterfaces"):
        interface: dict[str, Any] = {"network": "global/networks/default"}
        if not internal:
            interface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
        body["networkInterfaces"] = [interface]
    return body


def operation_error(operation: Mapping[str, Any]) -> tuple[str, str] | None:
    """(code, message) of a finished operation that failed, else None."""
    errors = (operation.get("error") or {}).get("errors") or []
    if not errors:
        return None
    first = errors[0]
    return str(first.get("code", "")), str(first.get("message", "") or first)
