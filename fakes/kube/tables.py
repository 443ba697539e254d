"""Server-side printing: the `Table` (meta.k8s.io/v1) kubectl asks for in `kubectl get`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]  # name, type, priority, cell


def age(timestamp: str | None) -> str:
    """kubectl's short human duration since `timestamp` ("5s", "3m", "2d")."""
    if not timestamp:
        return "<unknown>"
    then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = max(0, int((datetime.now(UTC) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _age(obj: Obj) -> str:
    return age(obj["metadata"].get("creationTimestamp"))


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    reason = status.get("reason") or status.get("phase") or "Pending"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        terminated = state.get("terminated") or {}
        if waiting:
            reason = waiting
        elif terminated.get("reason") and reason == "Running":
            reason = terminated["reason"]
    return str(reason)


def _ready(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def _node_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    text = "Ready" if ready else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _service_ports(service: Obj) -> str:
    ports = (service.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return "<none>"


COLUMNS: dict[str, list[Column]] = {
    "Pod": [
        ("Name", "string", 0, _name),
        ("Ready", "string", 0, _ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, _restarts),
        ("Age", "string", 0, _age),
        ("IP", "string", 1, lambda p: (p.get("status") or {}).get("podIP") or "<none>"),
        ("Node", "string", 1, lambda p: p["spec"].get("nodeName") or "<none>"),
    ],
    "Node": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, lambda n: "<none>"),
        ("Age", "string", 0, _age),
        ("Version", "string", 0, lambda n: n["status"]["nodeInfo"]["kubeletVersion"]),
        ("Internal-IP", "string", 1, _internal_ip),
    ],
    "Namespace": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, lambda n: (n.get("status") or {}).get("phase", "")),
        ("Age", "string", 0, _age),
    ],
    "Service": [
        ("Name", "string", 0, _name),
        ("Type", "string", 0, lambda s: s["spec"].get("type", "ClusterIP")),
        ("Cluster-IP", "string", 0, lambda s: s["spec"].get("clusterIP", "<none>")),
        ("External-IP", "string", 0, lambda s: "<none>"),
        ("Port(s)", "string", 0, _service_ports),
        ("Age", "string", 0, _age),
    ],
    "Secret": [
        ("Name", "string", 0, _name),
        ("Type", "string", 0, lambda s: s.get("type", "Opaque")),
        ("Data", "string", 0, lambda s: len(s.get("data") or {})),
        ("Age", "string", 0, _age),
    ],
    "ConfigMap": [
        ("Name", "string", 0, _name),
        ("Data", "string", 0, lambda c: len(c.get("data") or {}) + len(c.get("binaryData") or {})),
        ("Age", "string", 0, _age),
    ],
    "ServiceAccount": [
        ("Name", "string", 0, _name),
        ("Secrets", "string", 0, lambda s: len(s.get("secrets") or [])),
        ("Age", "string", 0, _age),
    ],
}
COLUMNS["Event"] = [
    ("Last Seen", "string", 0, lambda e: age(e.get("lastTimestamp"))),
    ("Type", "string", 0, lambda e: e.get("type", "")),
    ("Reason", "string", 0, lambda e: e.get("reason", "")),
    (
        "Object",
        "string",
        0,
        lambda e: (
            f"{e['involvedObject'].get('kind', '').lower()}/{e['involvedObject'].get('name', '')}"
        ),
    ),
    ("Message", "string", 0, lambda e: e.get("message", "")),
]
DEFAULT: list[Column] = [("Name", "string", 0, _name), ("Age", "string", 0, _age)]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def table(kind: str, objects: list[Obj], resource_version: str, include: str) -> Obj:
    """A Table of `objects`; each row carries the object itself (`include` "Object") or its
    metadata only (the default, "Metadata"), or nothing ("None")."""
    columns = COLUMNS.get(kind, DEFAULT)
    rows = []
    for obj in objects:
        row: Obj = {"cells": [cell(obj) for _, _, _, cell in columns]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {
                "name": name,
                "type": type_,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": priority,
            }
            for name, type_, priority, _ in columns
        ],
        "rows": rows,
    }
