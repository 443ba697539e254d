"""Where a pod fits: the simulated nodes and the scheduler's filter, as pure functions.

`place(pod, nodes, pods)` picks the node for a pending pod (the feasible node with the
largest share of its cpu and memory left, as the default LeastAllocated score prefers), or
says why none fits in the words of the real scheduler's FailedScheduling message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from . import quantity
from .selectors import Requirement

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeSpec:
    """A simulated node: cpu and memory as quantities ("4", "16Gi"), `extra` extended
    resources ({"nvidia.com/gpu": "1"}), labels and taints ({"key", "value", "effect"})."""

    name: str
    cpu: str = "4"
    memory: str = "16Gi"
    extra: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    max_pods: int = 110


def node_object(spec: NodeSpec, index: int) -> Obj:
    """The Node object of a simulated node (status Ready, an InternalIP on loopback)."""
    capacity = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.max_pods)}
    capacity.update(spec.extra)
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **spec.labels,
    }
    node: Obj = {
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {"taints": [dict(t) for t in spec.taints]} if spec.taints else {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"127.17.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": spec.name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.32.0-fake",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "fake://1",
            },
        },
    }
    return node


def occupies(pod: Obj) -> bool:
    """Whether a pod holds its node's resources (bound and not finished)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in TERMINAL
    )


def used_by_node(pods: Iterable[Obj]) -> dict[str, quantity.Resources]:
    used: dict[str, quantity.Resources] = {}
    for pod in pods:
        if occupies(pod):
            quantity.add(used.setdefault(pod["spec"]["nodeName"], {}), quantity.pod_requests(pod))
    return used


def _tolerated(taint: Mapping[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint["key"]):
            return True
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _affinity_ok(pod_spec: Obj, labels: Mapping[str, str]) -> bool:
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not affinity:
        return True
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for term in affinity.get("nodeSelectorTerms") or []:
        reqs = [
            Requirement(e["key"], ops.get(e["operator"], "in"), frozenset(e.get("values") or []))
            for e in term.get("matchExpressions") or []
        ]
        if all(r.matches(labels) for r in reqs):
            return True
    return False


def misfits(pod: Obj, node: Obj, used: quantity.Resources) -> list[str]:
    """Why `pod` cannot go on `node` (the real scheduler's phrases); empty if it fits."""
    spec = pod.get("spec") or {}
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable"):
        return ["node(s) were unschedulable"]
    if not _affinity_ok(spec, node["metadata"].get("labels") or {}):
        return ["node(s) didn't match Pod's node affinity/selector"]
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(
            taint, spec.get("tolerations") or []
        ):
            value = taint.get("value", "")
            return [f"node(s) had untolerated taint {{{taint['key']}: {value}}}"]
    allocatable = quantity.parse_map(node["status"].get("allocatable"))
    reasons = []
    for name, wanted in sorted(quantity.pod_requests(pod).items()):
        if wanted <= 0:
            continue
        free = allocatable.get(name, Fraction(0)) - used.get(name, Fraction(0))
        if wanted > free:
            reasons.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    return reasons


def _free_share(node: Obj, used: quantity.Resources) -> Fraction:
    allocatable = quantity.parse_map(node["status"].get("allocatable"))
    share = Fraction(0)
    for name in ("cpu", "memory"):
        total = allocatable.get(name, Fraction(0))
        if total > 0:
            share += (total - used.get(name, Fraction(0))) / total
    return share


def place(pod: Obj, nodes: Sequence[Obj], used: Mapping[str, quantity.Resources]) -> str | Obj:
    """The node (object) for `pod`, or the FailedScheduling message when none fits."""
    fitting: list[Obj] = []
    reasons: Counter[str] = Counter()
    for node in nodes:
        why = misfits(pod, node, used.get(node["metadata"]["name"], {}))
        if why:
            reasons.update(why)
        else:
            fitting.append(node)
    if fitting:
        return max(
            fitting,
            key=lambda n: (
                _free_share(n, used.get(n["metadata"]["name"], {})),
                [-ord(c) for c in n["metadata"]["name"]],
            ),
        )
    return unschedulable_message(len(nodes), reasons)


def unschedulable_message(count: int, reasons: Counter[str]) -> str:
    if count == 0:
        return "no nodes available to schedule pods"
    parts = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
    return (
        f"0/{count} nodes are available: {parts}. preemption: 0/{count} nodes are available: "
        f"{count} No preemption victims found for incoming pod."
    )
