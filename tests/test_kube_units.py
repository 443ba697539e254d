"""The Kubernetes provider's pure parts: pods as nodes, tags as labels, pod bodies, and the
autoscaler's RBAC objects."""

from __future__ import annotations

from typing import Any

import pytest

import launcher.config  # noqa: F401  (the config package first: it imports the providers)
from launcher.naming import name_hash
from launcher.providers.base import (
    TAG_CLUSTER,
    TAG_KIND,
    TAG_STATUS,
    TAG_TYPE,
    NodeKind,
    NodeState,
    NodeStatus,
)
from launcher.providers.kubernetes.names import autoscaler_name, is_label_value, label_problem
from launcher.providers.kubernetes.objects import (
    AUTOSCALER_RULES,
    autoscaler_objects,
    name_of,
)
from launcher.providers.kubernetes.pods import (
    ANNOTATION_PREFIX,
    NodeMemo,
    name_prefix,
    pod_body,
    split_tags,
    tag_patch,
    tags_of,
    to_node,
    unschedulable,
)
from launcher.providers.kubernetes.spec import KubernetesProviderConfig


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "c-worker-abcde",
            "labels": {TAG_CLUSTER: "c", TAG_KIND: "worker", TAG_TYPE: "cpu"},
            "annotations": {ANNOTATION_PREFIX + "note": "two words"},
            "creationTimestamp": "2026-11-25T10:00:00Z",
        },
        "status": status,
    }


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("up-to-date", True),
        ("ray.head.default", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("GPU workers", False),
        ("-leading", False),
        ("trailing.", False),
    ],
)
def test_label_values_as_kubernetes_allows_them(value: str, ok: bool) -> None:
    assert is_label_value(value) is ok


def test_tags_kubernetes_refuses_as_labels_live_in_annotations_and_read_back() -> None:
    tags = {TAG_TYPE: "GPU workers", TAG_STATUS: "up-to-date"}
    labels, annotations = split_tags(tags)
    assert labels == {TAG_STATUS: "up-to-date"}
    assert annotations == {ANNOTATION_PREFIX + TAG_TYPE: "GPU workers"}
    pod = {"metadata": {"labels": labels, "annotations": {**annotations, "other": "x"}}}
    assert tags_of(pod) == tags
    patch = tag_patch({TAG_TYPE: "cpu"})  # now a label: the annotation goes
    assert patch["metadata"]["labels"] == {TAG_TYPE: "cpu"}
    assert patch["metadata"]["annotations"] == {ANNOTATION_PREFIX + TAG_TYPE: None}


def test_a_cluster_name_that_cannot_label_pods_is_refused_with_the_fix() -> None:
    assert label_problem("example-cluster") is None
    problem = label_problem("my cluster")
    assert problem is not None and "cannot be a Kubernetes label value" in problem


def test_pods_as_nodes() -> None:
    running = to_node(_pod(phase="Running", podIP="127.18.0.5"))
    assert running is not None
    assert (running.id, running.kind, running.node_type) == (
        "c-worker-abcde",
        NodeKind.WORKER,
        "cpu",
    )
    assert running.ip == "127.18.0.5" and running.state is NodeState.RUNNING
    assert running.tags["note"] == "two words" and running.status is NodeStatus.UNINITIALIZED
    assert running.created_at == pytest.approx(1795600800.0)
    pending = to_node(_pod(phase="Pending"))
    assert pending is not None and pending.state is NodeState.PENDING and pending.ip is None
    for phase in ("Failed", "Succeeded"):  # its container ended, and Ray with it
        ended = to_node(_pod(phase=phase, reason="Evicted"))
        assert ended is not None and ended.state is NodeState.DEAD
    deleting = _pod(phase="Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-25T10:05:00Z"
    assert to_node(deleting) is None
    stranger = _pod(phase="Running")
    del stranger["metadata"]["labels"][TAG_KIND]
    assert to_node(stranger) is None


def test_a_listing_reuses_the_node_of_a_pod_the_server_did_not_change() -> None:
    """NodeMemo: the same uid and resourceVersion give the very node of the last listing;
    a new resourceVersion (any write to the pod) gives the node read afresh."""
    memo = NodeMemo()

    def pod(version: str, phase: str) -> dict[str, Any]:
        made = _pod(phase=phase, podIP="127.18.0.5")
        made["metadata"].update(uid="u-1", resourceVersion=version)
        return made

    (first,) = memo.nodes([pod("7", "Pending")])
    (again,) = memo.nodes([pod("7", "Pending")])
    assert again is first
    (changed,) = memo.nodes([pod("8", "Running")])
    assert changed is not first and changed.state is NodeState.RUNNING
    assert changed == to_node(pod("8", "Running"))
    unnamed = _pod(phase="Running")  # no uid: read every time
    assert memo.nodes([unnamed])[0] is not memo.nodes([unnamed])[0]
    assert memo.nodes([]) == [] and memo.nodes([pod("8", "Running")])[0] is not changed


def test_unschedulable_is_read_from_the_pod_scheduled_condition() -> None:
    stuck = _pod(
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
    )
    assert unschedulable(stuck) == "0/3 nodes are available: 3 Insufficient cpu."
    placed = _pod(phase="Pending", conditions=[{"type": "PodScheduled", "status": "True"}])
    assert unschedulable(placed) is None and unschedulable(_pod()) is None


def test_pod_body_keeps_the_manifest_and_adds_the_nodes_labels() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "ray-head-", "labels": {"component": "ray-head"}},
        "spec": {"containers": [{"name": "ray-node", "image": "rayproject/ray"}]},
    }
    body = pod_body(
        manifest,
        cluster_name="c",
        kind=NodeKind.HEAD,
        tags={TAG_CLUSTER: "c", TAG_KIND: "head", TAG_TYPE: "head type"},
        service_account="sa",
    )
    assert body["metadata"]["generateName"] == "ray-head-"
    assert body["metadata"]["labels"] == {
        "component": "ray-head",
        TAG_CLUSTER: "c",
        TAG_KIND: "head",
    }
    assert body["metadata"]["annotations"] == {ANNOTATION_PREFIX + TAG_TYPE: "head type"}
    assert body["spec"]["serviceAccountName"] == "sa"
    assert body["spec"]["containers"] == manifest["spec"]["containers"]
    assert manifest["metadata"]["labels"] == {"component": "ray-head"}  # not changed
    named = pod_body(
        {"metadata": {"name": "fixed"}, "spec": {"serviceAccountName": "own"}},
        cluster_name="My_Cluster",
        kind=NodeKind.WORKER,
        tags={},
        service_account="sa",
    )
    assert "name" not in named["metadata"]
    assert named["metadata"]["generateName"] == name_prefix("My_Cluster", NodeKind.WORKER)
    # Changed to fit DNS-1123, so followed by a hash of the exact name.
    assert named["metadata"]["generateName"] == f"my-cluster-{name_hash('My_Cluster')}-worker-"
    assert named["spec"]["serviceAccountName"] == "own"


def _settings(**keys: Any) -> KubernetesProviderConfig:
    return KubernetesProviderConfig(
        type="kubernetes",
        extra={},
        namespace="ray",
        use_internal_ips=True,
        service_account=keys.get("service_account"),
        role=keys.get("role"),
        role_binding=keys.get("role_binding"),
        services=(),
    )


def test_the_autoscalers_objects_are_the_configs_or_the_launchers_own() -> None:
    account, role, binding = (m for _, m in autoscaler_objects(_settings(), "c"))
    own = autoscaler_name("c")
    assert name_of(account) == name_of(role) == name_of(binding) == own
    assert role["rules"] == [dict(r) for r in AUTOSCALER_RULES]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources == {"pods", "pods/status", "pods/exec", "services"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": own}]
    assert binding["roleRef"]["name"] == own
    given = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "autoscaler"}}
    made = autoscaler_objects(_settings(service_account=given), "c")
    account, _, binding = (m for _, m in made)
    assert account == given
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "autoscaler"}]
