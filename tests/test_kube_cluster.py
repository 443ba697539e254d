"""Kubernetes clusters end to end: the launcher CLI against the fake API server
(fakes/kube/server.py) whose kubelet (fakes/kube/kubelet.py) runs each pod as a real
process tree with its own 127.18.x.y address, running real Ray. Commands reach the pods
through the exec API; the autoscaler runs in the head pod with the head's service account
(in-cluster config against the fake), as it would on a real cluster.

The config is Ray's own `kubernetes/example-full.yaml` (the older head_node/worker_nodes
form), with only the cluster's name, one worker at start, and start commands that name each
pod's address (the pods share this machine's network, where a real cluster gives each its
own) changed.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.hosts.ssh import COUNT_NODES, isolation_unavailable, ray_start_commands
from fakes.kube.kubelet import FakeKubelet
from fakes.kube.server import KubeServer
from tests.cluster_helpers import on_terminal, run, start, wait_for

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

EXAMPLE = Path(__file__).parent.parent.parent / "shared/ray-example-configs/kubernetes"
NAME = "kube-e2e"
NAMESPACE = "ray"
SELECTOR = f"launcher-cluster={NAME}"


def cluster_config() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLE / "example-full.yaml").read_text())
    data["cluster_name"] = NAME
    data["min_workers"] = 1
    for key in ("initial_workers", "autoscaling_mode", "target_utilization_fraction"):
        data.pop(key, None)  # Ray's, no longer acted on (plan warns)
    data.update(yaml.safe_load(ray_start_commands(num_cpus=1)))
    return data


@dataclass
class KubeCluster:
    server: KubeServer
    path: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return run(*args, env=self.env, timeout=timeout)

    def pods(self, kind: str | None = None) -> list[dict[str, Any]]:
        selector = SELECTOR + (f",launcher-node-kind={kind}" if kind else "")
        return self.server.pods(NAMESPACE, selector)

    def running(self, kind: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods(kind)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    def alive(self) -> str:
        result = self.run("exec", str(self.path), COUNT_NODES)
        return result.stdout + result.stderr


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    tmp = tmp_path_factory.mktemp("kube")
    with KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options())) as server:
        server.create("namespaces", {"metadata": {"name": NAMESPACE}})
        path = tmp / "cluster.yaml"
        path.write_text(yaml.safe_dump(cluster_config()))
        env = {
            **os.environ,
            "KUBECONFIG": str(server.write_kubeconfig(tmp / "kubeconfig")),
            "LAUNCHER_HOME": str(tmp / "home"),
        }
        cluster = KubeCluster(server, path, env)
        yield cluster
        cluster.run("down", "-y", "--purge", str(path))


def test_up_runs_ray_in_pods_with_the_autoscaler_in_the_head_pod(kube: KubeCluster) -> None:
    result = kube.run("up", "-y", str(kube.path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "created service account autoscaler in namespace ray" in out
    assert "created service ray-head in namespace ray" in out
    assert "launcher installed on the head" in out
    (head,) = kube.running("head")
    assert head["spec"]["serviceAccountName"] == "autoscaler"
    assert head["metadata"]["labels"]["component"] == "ray-head"  # Ray's manifest, kept
    assert len(kube.running("worker")) == 1
    assert "alive 2" in kube.alive()
    calls = kube.server.calls(verb="list", resource="pods")
    in_pod = [c for c in calls if (c.call.user or "").startswith("system:serviceaccount:ray:")]
    assert in_pod, "the autoscaler in the head pod never listed pods with its account"


def test_exec_submit_and_rsync_go_through_the_exec_api(kube: KubeCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import ray, sys\nray.init()\nprint('job ran with', sys.argv[1:])\n")
    result = kube.run("submit", str(kube.path), str(script), "--", "a", "b")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "job ran with ['a', 'b']" in result.stdout
    failed = kube.run("exec", str(kube.path), "exit 7")
    assert failed.returncode == 7
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "f.txt").write_text("payload")
    (data / "run.sh").write_text("#!/bin/sh\n")
    (data / "run.sh").chmod(0o755)
    up = kube.run("rsync-up", str(kube.path), f"{data}/", "~/data")
    assert up.returncode == 0, up.stdout + up.stderr
    shown = kube.run("exec", str(kube.path), "cat ~/data/sub/f.txt; test -x ~/data/run.sh")
    assert shown.returncode == 0 and "payload" in shown.stdout
    back = tmp_path / "back"
    down = kube.run("rsync-down", str(kube.path), "~/data/", str(back))
    assert down.returncode == 0, down.stdout + down.stderr
    assert (back / "sub" / "f.txt").read_text() == "payload"
    assert os.access(back / "run.sh", os.X_OK)


def test_attach_is_a_terminal_in_the_head_pod_and_p_forwards_a_port(kube: KubeCluster) -> None:
    typed = b"echo in-$(hostname)-$((6 * 7)); tty; exit 3\n"
    output, code = on_terminal(["attach", str(kube.path)], kube.env, typed)
    (head,) = kube.running("head")
    assert f"in-{head['metadata']['name']}-42" in output  # the pod's own hostname
    assert "/dev/pts/" in output and code == 3
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = (
        "python -c \"import socket,os; s=socket.create_server((os.environ['LAUNCHER_NODE_IP'], "
        f"{port})); print('listening', flush=True); c,_=s.accept(); c.sendall(b'hello from pod')\""
    )
    process = start("exec", "-p", str(port), str(kube.path), server, env=kube.env)
    assert process.stdout is not None
    for line in process.stdout:
        if "listening" in line:
            break
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        assert client.recv(100) == b"hello from pod"
    assert process.wait(timeout=60) == 0


def test_a_deleted_worker_pod_is_replaced(kube: KubeCluster) -> None:
    (worker,) = kube.running("worker")
    name = worker["metadata"]["name"]
    kube.server.delete_pod_now(NAMESPACE, name)
    wait_for(
        lambda: any(p["metadata"]["name"] != name for p in kube.running("worker")),
        120,
        "a new worker pod",
    )
    wait_for(lambda: "alive 2" in kube.alive(), 180, "Ray to see the new worker")


def test_the_autoscaler_in_the_head_pod_scales_on_rays_demand(kube: KubeCluster) -> None:
    ask = (
        "python -c 'import ray; from ray.autoscaler.sdk import request_resources; "
        "ray.init(); request_resources(num_cpus=3)'"
    )
    result = kube.run("exec", str(kube.path), ask)
    assert result.returncode == 0, result.stdout + result.stderr
    wait_for(lambda: len(kube.running("worker")) == 2, 180, "a second worker pod")
    wait_for(lambda: "alive 3" in kube.alive(), 180, "Ray to see three nodes")
    log = kube.run("monitor", "--no-follow", str(kube.path)).stdout
    assert "launch 1 x worker_node" in log, log


def test_down_leaves_no_pod_service_or_account(kube: KubeCluster) -> None:
    result = kube.run("down", "-y", "--purge", str(kube.path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert kube.pods() == []
    for plural, group in (
        ("services", ""),
        ("serviceaccounts", ""),
        ("roles", "rbac.authorization.k8s.io"),
        ("rolebindings", "rbac.authorization.k8s.io"),
    ):
        left = kube.server.get(plural, "autoscaler", NAMESPACE, group)
        assert left is None, f"{plural} autoscaler left"
    assert kube.server.get("services", "ray-head", NAMESPACE) is None
