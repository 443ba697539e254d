"""Pods as nodes, and the pod bodies the launcher creates. Pure: no API calls.

Tags are pod labels where Kubernetes allows the value (63 characters at most, letters,
digits, `-`, `_` and `.`, starting and ending with a letter or digit; empty allowed).
A value it does not allow (a node type named `GPU workers`) is kept in an annotation
`launcher.tags/KEY` instead, and read back from there; the cluster's own label, which
`nodes()` selects on, must be a valid value (`names.label_problem` says why not).

A pod being deleted (`deletionTimestamp` set) is no longer a node. A pod that ended
(phase Succeeded or Failed: its Ray is gone with its container) is DEAD, so the
autoscaler removes and replaces it; one the scheduler cannot place stays PENDING and is
reported by `unschedulable`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from launcher.config.frozen import thaw
from launcher.providers.base import TAG_CLUSTER, TAG_KIND, TAG_TYPE, Node, NodeKind, NodeState
from launcher.providers.kubernetes.names import is_label_value, pod_name_prefix

ANNOTATION_PREFIX = "launcher.tags/"
_PHASES = {
    "Pending": NodeState.PENDING,
    "Running": NodeState.RUNNING,
    "Succeeded": NodeState.DEAD,
    "Failed": NodeState.DEAD,
    "Unknown": NodeState.PENDING,
}


def split_tags(tags: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) holding `tags`: each value where Kubernetes allows it."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for key, value in tags.items():
        if is_label_value(value):
            labels[key] = value
        else:
            annotations[ANNOTATION_PREFIX + key] = value
    return labels, annotations


def tag_patch(tags: Mapping[str, str]) -> dict[str, Any]:
    """A merge patch writing `tags`; a key moving between a label and an annotation is
    removed from the other (null)."""
    labels, annotations = split_tags(tags)
    all_labels: dict[str, str | None] = {**labels}
    all_annotations: dict[str, str | None] = {**annotations}
    for key in tags:
        if key not in labels:
            all_labels[key] = None
        if ANNOTATION_PREFIX + key not in annotations:
            all_annotations[ANNOTATION_PREFIX + key] = None
    return {"metadata": {"labels": all_labels, "annotations": all_annotations}}


def tags_of(pod: Mapping[str, Any]) -> dict[str, str]:
    metadata = pod.get("metadata") or {}
    tags = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    for key, value in (metadata.get("annotations") or {}).items():
        if str(key).startswith(ANNOTATION_PREFIX):
            tags[str(key)[len(ANNOTATION_PREFIX) :]] = str(value)
    return tags


def unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's reason when it could not place the pod (PodScheduled False,
    Unschedulable), else None."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return None


def scheduled(pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler has placed the pod on a node."""
    return bool((pod.get("spec") or {}).get("nodeName"))


def to_node(pod: Mapping[str, Any]) -> Node | None:
    """The node a pod is, or None when it is not one of the cluster's live nodes."""
    metadata = pod.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return None
    tags = tags_of(pod)
    kind_tag = tags.get(TAG_KIND)
    if kind_tag not in (NodeKind.HEAD.value, NodeKind.WORKER.value):
        return None
    status = pod.get("status") or {}
    created = metadata.get("creationTimestamp")
    return Node(
        id=str(metadata.get("name", "")),
        kind=NodeKind(kind_tag),
        node_type=tags.get(TAG_TYPE, ""),
        ip=status.get("podIP") or None,
        state=_PHASES.get(str(status.get("phase", "Pending")), NodeState.PENDING),
        tags=tags,
        created_at=_timestamp(created),
    )


class NodeMemo:
    """The nodes of the last listing by pod uid and resourceVersion: a pod the API server
    did not change since (its resourceVersion changes on every write) is the same node,
    so a listing of a thousand unchanged pods builds no node again and hands the autoscaler
    the very objects it compared the last tick with. Not thread-safe: one lister."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], Node | None] = {}

    def nodes(self, pods: Iterable[Mapping[str, Any]]) -> list[Node]:
        known: dict[tuple[str, str], Node | None] = {}
        out = []
        for pod in pods:
            metadata = pod.get("metadata") or {}
            key = (str(metadata.get("uid") or ""), str(metadata.get("resourceVersion") or ""))
            if not all(key):
                node = to_node(pod)  # no identity to remember it by
            elif key in self._known:
                node = known[key] = self._known[key]
            else:
                node = known[key] = to_node(pod)
            if node is not None:
                out.append(node)
        self._known = known
        return out


def _timestamp(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return 0.0


def name_prefix(cluster_name: str, kind: NodeKind) -> str:
    """A `generateName` for the cluster's pods of `kind`: valid, and never the same for
    two cluster names (see names.py)."""
    return pod_name_prefix(cluster_name, kind.value)


def pod_body(
    node_config: Mapping[str, Any],
    *,
    cluster_name: str,
    kind: NodeKind,
    tags: Mapping[str, str],
    service_account: str | None = None,
) -> dict[str, Any]:
    """The pod to create for a node: the node type's pod manifest (Ray's format), with the
    node's tags as labels (or annotations), a generated name unless it names one, and the
    head's service account when its manifest names none."""
    body: dict[str, Any] = copy.deepcopy(thaw(node_config))
    body.setdefault("apiVersion", "v1")
    body.setdefault("kind", "Pod")
    metadata = body.setdefault("metadata", {})
    metadata.pop("name", None)  # many pods of a type: their names are generated
    metadata.setdefault("generateName", name_prefix(cluster_name, kind))
    labels, annotations = split_tags(tags)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    spec = body.setdefault("spec", {})
    if service_account and kind is NodeKind.HEAD and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = service_account
    return body


def cluster_selector(cluster_name: str) -> str:
    return f"{TAG_CLUSTER}={cluster_name}"
