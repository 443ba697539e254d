"""The fake Kubernetes API server (fakes/kube/server.py) against the official Python
client and the real kubectl: CRUD, selectors, patches, watches, errors, scheduling,
deletion, in-cluster configuration, faults and the call log."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from fakes.kube import patches, quantity
from fakes.kube.errors import ApiError
from fakes.kube.kubeconfig import KubeContext
from fakes.kube.kubelet_api import Pod, PodStatusSink
from fakes.kube.scheduler import NodeSpec
from fakes.kube.selectors import parse_fields, parse_labels
from fakes.kube.server import KubeServer

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from kubernetes.config import incluster_config, new_client_from_config  # noqa: E402

NODES = (
    NodeSpec("node-a", cpu="4", memory="8Gi"),
    NodeSpec("node-b", cpu="4", memory="8Gi"),
    NodeSpec(
        "gpu-1", cpu="8", memory="32Gi", extra={"nvidia.com/gpu": "2"}, labels={"accelerator": "t4"}
    ),
)


class StubKubelet:
    """Runs nothing: a pod is Running at once; stop_pod waits while `hold` is clear;
    exec answers a plain text naming the pod."""

    def __init__(self) -> None:
        self.sink: PodStatusSink | None = None
        self.ran: list[tuple[str, str]] = []
        self.stopped: list[tuple[str, float]] = []
        self.hold = threading.Event()
        self.hold.set()

    def bind(self, sink: PodStatusSink) -> None:
        self.sink = sink

    def run_pod(self, pod: Pod, node_name: str) -> None:
        assert self.sink is not None
        meta = pod["metadata"]
        self.ran.append((meta["name"], node_name))
        self.sink.update_status(
            meta["namespace"], meta["name"], {"phase": "Running", "podIP": "127.18.9.9"}
        )

    def stop_pod(self, pod: Pod, grace_period_s: float) -> None:
        self.hold.wait(timeout=30)
        self.stopped.append((pod["metadata"]["name"], grace_period_s))

    async def exec(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        command = request.query.getall("command", [])
        return web.Response(text=f"exec {pod['metadata']['name']} {' '.join(command)}")

    attach = portforward = log = exec

    def close(self) -> None:
        self.hold.set()


@pytest.fixture(scope="module")
def kubelet() -> StubKubelet:
    return StubKubelet()


@pytest.fixture(scope="module")
def server(kubelet: StubKubelet) -> Iterator[KubeServer]:
    with KubeServer(nodes=NODES, kubelet=kubelet, history_size=500) as srv:
        yield srv


@pytest.fixture(scope="module")
def kubeconfig(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "config"
    robot = server.mint_token("default", "robot")
    return server.write_kubeconfig(path, extra=[KubeContext("robot-ctx", robot, "kube-system")])


@pytest.fixture(scope="module")
def api_client(kubeconfig: Path) -> Any:
    return new_client_from_config(config_file=str(kubeconfig), context="kube-fake")


@pytest.fixture(scope="module")
def core(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


@pytest.fixture
def ns(core: Any) -> str:
    name = "t-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": name}})
    return name


def pod_body(
    name: str | None = None, cpu: str = "100m", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {}}
    if name and name.endswith("-"):
        meta["generateName"] = name
    elif name:
        meta["name"] = name
    container = {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}
    return {"metadata": meta, "spec": {"containers": [container], **spec}}


def raw(server: KubeServer, method: str, path: str, token: str | None = None) -> tuple[int, str]:
    """One HTTPS request to the server: (status, body text)."""
    context = ssl.create_default_context(cafile=str(server.ca_file))
    request = urllib.request.Request(
        server.url + path,
        method=method,
        headers={"Authorization": f"Bearer {token or server.token}"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


# -- pure parts: selectors, patches, quantities ------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app!=web", {"app": "db"}, True),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("app in (web, db)", {"app": "db"}, True),
        ("app in (web,db)", {"app": "x"}, False),
        ("app notin (web)", {}, True),
        ("app notin (web)", {"app": "web"}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("!app", {"other": "x"}, True),
        ("app=web,tier in (a),!gone,env", {"app": "web", "tier": "a", "env": "p"}, True),
        ("app=web,tier in (a),!gone", {"app": "web", "tier": "a", "gone": "1"}, False),
        ("example.com/role=head", {"example.com/role": "head"}, True),
        ("app=", {"app": ""}, True),
        ("", {"x": "y"}, True),
    ],
)
def test_label_selector_forms(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_labels(selector).matches(labels) is expected


@pytest.mark.parametrize("bad", ["app=(x", "in (a)", "a in b", "a,,b", "a=b=c", "x y", "a,"])
def test_label_selector_rejects_malformed(bad: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_labels(bad)
    assert info.value.code == 400


def test_field_selector() -> None:
    pod = {"metadata": {"name": "p", "namespace": "n"}, "status": {"phase": "Running"}}
    assert parse_fields("metadata.name=p,status.phase!=Pending", ("status.phase",)).matches(pod)
    assert not parse_fields("status.phase==Pending", ("status.phase",)).matches(pod)
    with pytest.raises(ApiError, match=r"field label not supported: spec\.foo"):
        parse_fields("spec.foo=1", ("status.phase",))


def test_strategic_merge_patch_merges_containers_by_name() -> None:
    pod = {
        "metadata": {"labels": {"a": "1", "b": "2"}},
        "spec": {"containers": [{"name": "x", "image": "i:1"}, {"name": "y", "image": "j"}]},
    }
    patch = {
        "metadata": {"labels": {"a": None, "c": "3"}},
        "spec": {
            "containers": [
                {"name": "x", "image": "i:2"},
                {"name": "y", "$patch": "delete"},
                {"name": "z", "image": "k"},
            ]
        },
    }
    result = patches.strategic_merge(pod, patch)
    assert result["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert result["spec"]["containers"] == [
        {"name": "x", "image": "i:2"},
        {"name": "z", "image": "k"},
    ]
    merged = patches.merge_patch(pod, {"spec": {"containers": [{"name": "only"}]}})
    assert merged["spec"]["containers"] == [{"name": "only"}]
    assert pod["metadata"]["labels"] == {"a": "1", "b": "2"}  # inputs unchanged


def test_json_patch_operations() -> None:
    doc = {"metadata": {"labels": {"a": "1"}}, "list": [1, 2]}
    ops = [
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "remove", "path": "/metadata/labels/a"},
        {"op": "replace", "path": "/list/0", "value": 9},
        {"op": "add", "path": "/list/-", "value": 3},
        {"op": "copy", "from": "/list/1", "path": "/first"},
        {"op": "test", "path": "/first", "value": 2},
    ]
    assert patches.json_patch(doc, ops) == {
        "metadata": {"labels": {"b/c": "2"}},
        "list": [9, 2, 3],
        "first": 2,
    }
    with pytest.raises(ApiError):
        patches.json_patch(doc, [{"op": "test", "path": "/list/0", "value": 5}])


def test_quantities() -> None:
    assert quantity.parse("500m") == Fraction(1, 2)
    assert quantity.parse("2Gi") == 2 * 2**30
    assert quantity.parse("1e3") == 1000
    assert quantity.parse("1.5") == Fraction(3, 2)
    assert quantity.parse(4) == 4
    assert quantity.show("cpu", Fraction(3, 2)) == "1500m"
    assert quantity.show("memory", Fraction(2 * 2**30)) == "2Gi"
    limits_only = {"spec": {"containers": [{"resources": {"limits": {"cpu": "2"}}}]}}
    assert quantity.pod_requests(limits_only)["cpu"] == 2
    with pytest.raises(ApiError):
        quantity.parse("lots")


# -- the official client -------------------------------------------------------------------


def test_create_get_list_and_generate_name(core: Any, ns: str) -> None:
    made = core.create_namespaced_pod(ns, pod_body("web-1", labels={"app": "web"}))
    assert made.metadata.uid and made.metadata.resource_version
    assert made.spec.service_account_name == "default"
    generated = core.create_namespaced_pod(ns, pod_body("worker-"))
    assert generated.metadata.name.startswith("worker-")
    assert len(generated.metadata.name) == len("worker-") + 5
    got = core.read_namespaced_pod("web-1", ns)
    assert got.metadata.labels == {"app": "web"}
    listed = core.list_namespaced_pod(ns)
    assert sorted(p.metadata.name for p in listed.items) == sorted(
        ["web-1", generated.metadata.name]
    )
    assert int(listed.metadata.resource_version) >= int(got.metadata.resource_version)


def test_errors_are_status_bodies(core: Any, ns: str, server: KubeServer) -> None:
    core.create_namespaced_pod(ns, pod_body("dup"))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, pod_body("dup"))
    assert info.value.status == 409
    assert status_of(info.value)["reason"] == "AlreadyExists"
    assert status_of(info.value)["message"] == 'pods "dup" already exists'
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("missing", ns)
    assert (info.value.status, status_of(info.value)["reason"]) == (404, "NotFound")
    assert status_of(info.value)["kind"] == "Status"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("no-such-ns", pod_body("p"))
    assert status_of(info.value)["message"] == 'namespaces "no-such-ns" not found'
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, pod_body("Bad_Name"))
    assert (info.value.status, status_of(info.value)["reason"]) == (422, "Invalid")
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, pod_body("x", serviceAccountName="nobody"))
    assert info.value.status == 403


def test_unauthorized_without_the_token(server: KubeServer) -> None:
    config = client.Configuration()
    config.host = server.url
    config.ssl_ca_cert = str(server.ca_file)
    config.api_key = {"authorization": "Bearer wrong"}
    with client.ApiClient(config) as bad, pytest.raises(ApiException) as info:
        client.CoreV1Api(bad).list_namespaced_pod("default")
    assert info.value.status == 401
    assert status_of(info.value)["reason"] == "Unauthorized"


def test_replace_with_a_stale_resource_version_conflicts(core: Any, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    first = core.read_namespaced_config_map("cm", ns)
    first.data = {"a": "2"}
    core.replace_namespaced_config_map("cm", ns, first)
    first.data = {"a": "3"}
    with pytest.raises(ApiException) as info:
        core.replace_namespaced_config_map("cm", ns, first)  # the old resourceVersion
    assert (info.value.status, status_of(info.value)["reason"]) == (409, "Conflict")
    assert core.read_namespaced_config_map("cm", ns).data == {"a": "2"}


def test_patch_kinds(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod_body("p", labels={"a": "1", "b": "2"}))
    core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert core.read_namespaced_pod("p", ns).metadata.labels == {"b": "2", "c": "3"}
    core.patch_namespaced_pod(
        "p", ns, [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]
    )
    assert core.read_namespaced_pod("p", ns).metadata.annotations == {"k": "v"}
    core.patch_namespaced_pod_status("p", ns, {"status": {"reason": "Custom"}})
    assert core.read_namespaced_pod("p", ns).status.reason == "Custom"
    with pytest.raises(ApiException) as info:  # a pod's resources are immutable
        core.patch_namespaced_pod(
            "p",
            ns,
            {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "3"}}}]}},
        )
    assert info.value.status == 422


def test_list_with_every_selector_form(core: Any, ns: str) -> None:
    for name, labels in [
        ("a", {"role": "head", "zone": "1"}),
        ("b", {"role": "worker"}),
        ("c", {"role": "worker", "spot": "yes"}),
        ("d", {}),
    ]:
        core.create_namespaced_pod(ns, pod_body(name, labels=labels))

    def names(**kwargs: Any) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(ns, **kwargs).items)

    assert names(label_selector="role=worker") == ["b", "c"]
    assert names(label_selector="role==head") == ["a"]
    assert names(label_selector="role!=worker") == ["a", "d"]
    assert names(label_selector="role in (head, worker),!spot") == ["a", "b"]
    assert names(label_selector="role notin (worker)") == ["a", "d"]
    assert names(label_selector="spot") == ["c"]
    assert names(label_selector="zone,role=head") == ["a"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b,status.phase=Running") == ["a", "c", "d"]
    first = core.list_namespaced_pod(ns, limit=3)
    assert len(first.items) == 3 and first.metadata._continue
    rest = core.list_namespaced_pod(ns, limit=3, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["d"]
    everywhere = core.list_pod_for_all_namespaces(label_selector="role=head")
    assert ns in {p.metadata.namespace for p in everywhere.items}


def test_watch_events_and_resource_versions(core: Any, ns: str, server: KubeServer) -> None:
    start = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod_body("w", labels={"x": "1"}))
    core.patch_namespaced_pod("w", ns, {"metadata": {"labels": {"x": "2"}}})
    core.delete_namespaced_pod("w", ns, grace_period_seconds=0)
    seen: list[tuple[str, str]] = []
    stream = watch.Watch().stream(
        core.list_namespaced_pod, ns, resource_version=start, timeout_seconds=10
    )
    for event in stream:
        seen.append((event["type"], event["object"].metadata.labels.get("x")))
        if event["type"] == "DELETED":
            break
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED" and "MODIFIED" in kinds
    assert ("MODIFIED", "2") in seen


def test_watch_from_a_compacted_version_is_gone(core: Any, ns: str, server: KubeServer) -> None:
    old = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "tick"}})
    server.compact()
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        resource_version=old,
        timeout_seconds=5,
        _preload_content=False,
    )
    with pytest.raises(ApiException) as info:
        for _ in stream:
            pass
    assert info.value.status == 410


def test_watch_with_a_selector_sees_objects_enter_and_leave(core: Any, ns: str) -> None:
    core.create_namespaced_pod(ns, pod_body("m", labels={"role": "x"}))
    start = core.read_namespaced_pod("m", ns).metadata.resource_version
    core.patch_namespaced_pod("m", ns, {"metadata": {"labels": {"role": "head"}}})
    core.patch_namespaced_pod("m", ns, {"metadata": {"labels": {"role": "none"}}})
    events = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        label_selector="role=head",
        resource_version=start,
        timeout_seconds=5,
    ):
        events.append(event["type"])
        if len(events) == 2:
            break
    assert events == ["ADDED", "DELETED"]


def test_unschedulable_pod_binds_once_capacity_frees(
    core: Any, ns: str, server: KubeServer, kubelet: StubKubelet
) -> None:
    core.create_namespaced_pod(ns, pod_body("huge", cpu="12"))

    def reason() -> str | None:
        conditions = core.read_namespaced_pod("huge", ns).status.conditions or []
        return next(
            (c.message for c in conditions if c.type == "PodScheduled" and c.status == "False"),
            None,
        )

    message = server.wait_for(reason)
    assert message.startswith("0/3 nodes are available: 3 Insufficient cpu.")
    assert core.read_namespaced_pod("huge", ns).status.phase == "Pending"
    server.set_node_capacity("gpu-1", cpu="16")
    pod = server.wait_for(lambda: server.pod(ns, "huge")["spec"].get("nodeName"))
    assert pod == "gpu-1"
    assert ("huge", "gpu-1") in kubelet.ran
    assert server.wait_for(lambda: core.read_namespaced_pod("huge", ns).status.phase == "Running")
    server.set_node_capacity("gpu-1", cpu="8")


def test_scheduler_honours_node_selector_and_extended_resources(
    core: Any, ns: str, server: KubeServer
) -> None:
    gpu = pod_body("gpu", nodeSelector={"accelerator": "t4"})
    gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    core.create_namespaced_pod(ns, gpu)
    assert server.wait_for(lambda: server.pod(ns, "gpu")["spec"].get("nodeName")) == "gpu-1"
    more = pod_body("gpu2")
    more["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    core.create_namespaced_pod(ns, more)
    message = server.wait_for(
        lambda: next(
            (
                c["message"]
                for c in server.pod(ns, "gpu2")["status"].get("conditions", [])
                if c.get("reason") == "Unschedulable"
            ),
            None,
        )
    )
    assert "3 Insufficient nvidia.com/gpu" in message
    core.delete_namespaced_pod("gpu", ns, grace_period_seconds=0)
    assert server.wait_for(lambda: server.pod(ns, "gpu2")["spec"].get("nodeName")) == "gpu-1"
    wrong = pod_body("nowhere", nodeSelector={"accelerator": "a100"})
    core.create_namespaced_pod(ns, wrong)
    message = server.wait_for(
        lambda: next(
            (
                c["message"]
                for c in server.pod(ns, "nowhere")["status"].get("conditions", [])
                if c.get("reason") == "Unschedulable"
            ),
            None,
        )
    )
    assert "3 node(s) didn't match Pod's node affinity/selector" in message


def test_graceful_delete_marks_then_removes(
    core: Any, ns: str, server: KubeServer, kubelet: StubKubelet
) -> None:
    core.create_namespaced_pod(ns, pod_body("slow"))
    server.wait_for(lambda: server.pod(ns, "slow")["status"]["phase"] == "Running")
    kubelet.hold.clear()
    try:
        core.delete_namespaced_pod(
            "slow", ns, grace_period_seconds=7, propagation_policy="Background"
        )
        marked = core.read_namespaced_pod("slow", ns)
        assert marked.metadata.deletion_timestamp is not None
        assert marked.metadata.deletion_grace_period_seconds == 7
    finally:
        kubelet.hold.set()
    server.wait_for(lambda: server.pod(ns, "slow") is None)
    assert ("slow", 7) in kubelet.stopped
    core.create_namespaced_pod(ns, pod_body("never", cpu="100"))  # never runs: gone at once
    core.delete_namespaced_pod("never", ns)
    assert server.pod(ns, "never") is None


def test_deletecollection_by_label(core: Any, ns: str, server: KubeServer) -> None:
    for i in range(4):
        core.create_namespaced_pod(ns, pod_body(f"p{i}", labels={"keep": str(i % 2)}))
    core.delete_collection_namespaced_pod(ns, label_selector="keep=0", grace_period_seconds=0)
    server.wait_for(lambda: len(server.pods(ns)) == 2)
    assert sorted(p["metadata"]["name"] for p in server.pods(ns)) == ["p1", "p3"]


def test_deleting_a_namespace_deletes_its_objects(core: Any, server: KubeServer) -> None:
    name = "gone-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_pod(name, pod_body("p"))
    core.create_namespaced_secret(name, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert core.read_namespaced_secret("s", name).data == {"k": "dg=="}
    core.delete_namespace(name)
    server.wait_for(lambda: server.get("namespaces", name) is None)
    assert server.pods(name) == []
    with pytest.raises(ApiException) as info:
        core.read_namespaced_secret("s", name)
    assert info.value.status == 404


def test_rbac_objects(api_client: Any, ns: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "rb"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        },
    )
    assert [r.metadata.name for r in rbac.list_namespaced_role(ns).items] == ["r"]
    assert rbac.read_namespaced_role_binding("rb", ns).role_ref.name == "r"


def test_in_cluster_config(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ns: str
) -> None:
    env = server.serviceaccount_files(tmp_path, ns, "default")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    config = client.Configuration()
    incluster_config.load_incluster_config(client_configuration=config)
    since = server.last_seq()
    with client.ApiClient(config) as in_pod:
        assert client.CoreV1Api(in_pod).list_namespaced_pod(ns).items == []
    users = {c.call.user for c in server.calls(since=since)}
    assert users == {f"system:serviceaccount:{ns}:default"}
    assert (tmp_path / "namespace").read_text() == ns


def test_faults_and_call_log(core: Any, ns: str, server: KubeServer) -> None:
    server.faults.fail("create", "pods", 503, times=1)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, pod_body("f"))
    assert info.value.status == 503
    core.create_namespaced_pod(ns, pod_body("f"))  # the fault fired once
    slow = server.faults.delay("list", "pods", 0.2)
    since = server.last_seq()
    started = time.monotonic()
    core.list_namespaced_pod(ns)
    assert time.monotonic() - started >= 0.2
    server.faults.remove(slow)
    core.read_namespaced_pod("f", ns)
    log = server.calls(since=since)
    assert [c.call.kind for c in log] == ["list pods", "get pods"]
    assert server.count("list", "pods", since=since) == 1
    assert log[0].call.user == "kube-admin"


def test_quota_forbids_pods_beyond_it(core: Any, ns: str) -> None:
    core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "1"}}}
    )
    core.create_namespaced_pod(ns, pod_body("fits", cpu="800m"))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, pod_body("over", cpu="300m"))
    assert info.value.status == 403
    assert "exceeded quota: q, requested: requests.cpu=300m" in status_of(info.value)["message"]


def test_streaming_subresources_reach_the_kubelet(core: Any, ns: str, server: KubeServer) -> None:
    core.create_namespaced_pod(ns, pod_body("run"))
    server.wait_for(lambda: server.pod(ns, "run")["status"]["phase"] == "Running")
    core.create_namespaced_pod(ns, pod_body("stuck", cpu="64"))
    server.wait_for(lambda: server.pod(ns, "stuck")["status"].get("conditions"))
    status, text = raw(
        server, "POST", f"/api/v1/namespaces/{ns}/pods/run/exec?command=echo&command=hi"
    )
    assert (status, text) == (200, "exec run echo hi")
    status, text = raw(server, "POST", f"/api/v1/namespaces/{ns}/pods/stuck/exec?command=ls")
    assert status == 400
    assert json.loads(text)["message"] == "pod stuck does not have a host assigned"
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod_log("absent", ns)
    assert info.value.status == 404


def test_list_of_many_pods_is_fast(server: KubeServer, core: Any) -> None:
    name = "many-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": name}})
    for i in range(1000):
        server.create("pods", pod_body(f"p{i:04}", cpu="0", labels={"i": str(i % 10)}), name)
    started = time.monotonic()
    listed = core.list_namespaced_pod(name, _preload_content=False)
    elapsed = time.monotonic() - started
    assert len(json.loads(listed.data)["items"]) == 1000
    print(f"list of 1000 pods: {elapsed * 1000:.0f} ms")
    assert elapsed < 5
    core.delete_namespace(name)


def test_node_removal_eviction_binding_and_tokens(
    core: Any, ns: str, server: KubeServer, kubelet: StubKubelet
) -> None:
    server.add_node(NodeSpec("spot-1", cpu="2", labels={"pool": "spot"}))
    core.create_namespaced_pod(ns, pod_body("on-spot", nodeSelector={"pool": "spot"}))
    assert server.wait_for(lambda: server.pod(ns, "on-spot")["spec"].get("nodeName")) == "spot-1"
    server.remove_node("spot-1")  # a preemption: the node and its pods are gone
    assert server.pod(ns, "on-spot") is None
    assert "spot-1" not in {n["metadata"]["name"] for n in server.nodes()}

    core.create_namespaced_pod(ns, pod_body("evicted"))
    server.wait_for(lambda: server.pod(ns, "evicted")["status"]["phase"] == "Running")
    core.create_namespaced_pod_eviction(
        "evicted",
        ns,
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evicted"}},
    )
    server.wait_for(lambda: server.pod(ns, "evicted") is None)

    custom = pod_body("manual", schedulerName="my-scheduler")
    core.create_namespaced_pod(ns, custom)
    core.create_namespaced_pod_binding(
        "manual",
        ns,
        {"metadata": {"name": "manual"}, "target": {"kind": "Node", "name": "node-b"}},
        _preload_content=False,
    )
    assert server.wait_for(lambda: server.pod(ns, "manual")["status"]["phase"] == "Running")
    assert server.pod(ns, "manual")["spec"]["nodeName"] == "node-b"

    core.create_namespaced_service_account(ns, {"metadata": {"name": "bot"}})
    answer = core.create_namespaced_service_account_token("bot", ns, {"spec": {"audiences": ["x"]}})
    identity = server.identity(answer.status.token)
    assert identity is not None and identity.user == f"system:serviceaccount:{ns}:bot"


def test_list_then_watch_from_its_resource_version_misses_nothing(core: Any, ns: str) -> None:
    listed = core.list_namespaced_pod(ns)
    for i in range(3):
        core.create_namespaced_pod(ns, pod_body(f"late-{i}"))
    names = []
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    ):
        if event["type"] == "ADDED":
            names.append(event["object"].metadata.name)
        if len(names) == 3:
            break
    assert names == ["late-0", "late-1", "late-2"]
