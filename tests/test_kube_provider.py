"""The Kubernetes provider against the fake API server, without Ray: capacity failures
(Unschedulable pods, quota refusals) and the fallback types they start, pods that end,
credentials and contexts, a namespace that does not exist. The fake's stand-in kubelet marks
pods Running; nothing runs in them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.kube.kubeconfig import KubeContext
from fakes.kube.server import KubeServer
from launcher.autoscaler.daemon import Daemon
from launcher.config.loader import Overrides, parse_config
from launcher.errors import CapacityError, ProviderError, UsageError
from launcher.providers.base import TAG_STANDS_IN_FOR, NodeKind, NodeState
from launcher.providers.factory import make_provider
from launcher.providers.kubernetes.provider import KubernetesProvider


def pod(cpu: str) -> str:
    return (
        "{apiVersion: v1, kind: Pod, spec: {containers: [{name: ray-node, image: rayproject/ray, "
        f"resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}"
    )


def config_text(name: str, extra_provider: str = "", types: str = "") -> str:
    return f"""
cluster_name: {name}
max_workers: 4
provider: {{type: kubernetes, namespace: ray, scheduling_timeout_s: 0.5{extra_provider}}}
available_node_types:
  head: {{node_config: {pod("100m")}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {pod("100m")}, resources: {{CPU: 1}}, max_workers: 4}}
{types}
head_node_type: head
"""


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    monkeypatch.setenv("HOME", str(tmp_path))  # the daemon's state file
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "launcher"))
    with KubeServer() as made:
        made.create("namespaces", {"metadata": {"name": "ray"}})
        monkeypatch.setenv("KUBECONFIG", str(made.write_kubeconfig(tmp_path / "kubeconfig")))
        yield made


def provider_for(text: str) -> KubernetesProvider:
    provider = make_provider(parse_config(text, "k.yaml", Overrides()))
    assert isinstance(provider, KubernetesProvider)
    provider.bootstrap()
    return provider


def test_an_unschedulable_type_is_a_capacity_failure_and_its_fallback_stands_in(
    server: KubeServer,
) -> None:
    types = f"""  big: {{node_config: {pod("64")}, resources: {{CPU: 64}}, min_workers: 1, max_workers: 2}}
metadata: {{launcher: {{fallbacks: {{big: [worker]}}}}}}"""
    provider = provider_for(config_text("fb", types=types))
    with pytest.raises(CapacityError) as raised:
        provider.create_nodes(provider.config.node_types["big"], NodeKind.WORKER, 1, {})
    assert "Insufficient cpu" in str(raised.value) and raised.value.scope == "zone"
    assert server.pods("ray", "launcher-cluster=fb") == []  # the stuck pod was deleted
    daemon = Daemon(provider, provider.config)
    try:
        for _ in range(3):  # big fails once; then it is out, and its fallback stands in
            daemon.tick()
            deadline = time.monotonic() + 60
            while daemon.executor.pending() and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        daemon.executor.shutdown()
    workers = [n for n in provider.nodes() if n.kind is NodeKind.WORKER]
    assert [(n.node_type, n.tags.get(TAG_STANDS_IN_FOR)) for n in workers] == [("worker", "big")]
    provider.terminate_nodes([n.id for n in provider.nodes()])


def test_a_quota_refusal_is_a_capacity_failure_of_every_zone(server: KubeServer) -> None:
    server.create(
        "resourcequotas",
        {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}},
        namespace="ray",
    )
    provider = provider_for(config_text("quota"))
    worker = provider.config.node_types["worker"]
    with pytest.raises(CapacityError) as raised:
        provider.create_nodes(worker, NodeKind.WORKER, 2, {})
    assert raised.value.scope == "quota" and "exceeded quota" in str(raised.value)
    assert len(raised.value.created) == 1  # the one the quota allowed is reported, not lost
    provider.terminate_nodes([n.id for n in provider.nodes()])


def test_a_pod_that_ended_is_a_dead_node(server: KubeServer) -> None:
    provider = provider_for(config_text("ended"))
    (node,) = provider.create_nodes(provider.config.node_types["worker"], NodeKind.WORKER, 1, {})
    server.set_pod_status("ray", node.id, {"phase": "Failed", "reason": "Evicted"})
    (listed,) = provider.nodes()
    assert listed.state is NodeState.DEAD
    provider.terminate_nodes([node.id])
    assert provider.nodes() == [] and server.pods("ray", "launcher-cluster=ended") == []


def test_the_context_the_config_names_is_used(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "two-contexts"
    other = KubeContext("other", server.token, "ray")
    server.write_kubeconfig(path, context="broken", extra=[other])
    text = path.read_text().replace(server.token, "not-a-token", 1)  # `broken`'s user
    path.write_text(text)
    monkeypatch.setenv("KUBECONFIG", str(path))
    provider_for(config_text("ctx", extra_provider=", context: other"))  # bootstrap works
    with pytest.raises(ProviderError, match=r"cannot reach the Kubernetes API .*Unauthorized"):
        provider_for(config_text("ctx"))  # the current context's token is refused
    with pytest.raises(UsageError, match="context 'nope' cannot be used"):
        provider_for(config_text("ctx", extra_provider=", context: nope"))


def test_missing_credentials_and_namespace_are_one_line_each(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(UsageError, match=r"no kubeconfig found .* set KUBECONFIG"):
        provider_for(config_text("creds"))
    monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
    text = config_text("ns").replace("namespace: ray", "namespace: missing")
    with pytest.raises(UsageError, match="namespace missing does not exist"):
        provider_for(text)
    assert json.dumps(server.get("namespaces", "missing")) == "null"  # not created


def test_a_launch_waits_for_the_schedulers_decision(
    server: KubeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler that decides late (a loaded control plane): a pod it has not yet looked
    at is neither placed nor unschedulable. The launch waits for the decision instead of
    returning the pod as launched (which CI caught under load: the capacity failure of a
    type that fits nowhere was never raised)."""
    decide = server.cluster.schedule_once
    late = threading.Event()

    def slow() -> None:
        if not late.is_set():
            late.wait(1.0)  # the first passes are a second late
            late.set()
        decide()

    monkeypatch.setattr(server.cluster, "schedule_once", slow)
    types = f"  big: {{node_config: {pod('64')}, resources: {{CPU: 64}}, max_workers: 1}}"
    provider = provider_for(config_text("late", types=types).replace("0.5", "5"))
    with pytest.raises(CapacityError):
        provider.create_nodes(provider.config.node_types["big"], NodeKind.WORKER, 1, {})
    (node,) = provider.create_nodes(provider.config.node_types["worker"], NodeKind.WORKER, 1, {})
    assert server.pod("ray", node.id)["spec"]["nodeName"]  # type: ignore[index]
    provider.terminate_nodes([node.id])
