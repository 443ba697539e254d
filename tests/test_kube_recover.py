"""A recovering run on Kubernetes, end to end: `submit --recover --start --stop` against the
fake API server (fakes/kube/) whose kubelet runs each pod as a real process tree with
real Ray; the head pod deleted mid-run (`kill-random-node --head --hard`, through the API:
the pod and its processes go). The supervisor brings up a new head pod, keeps the worker
pod (the same pod: its Ray is started again against the new head over the exec API, no new
pod is made for it), and starts the driver again, which resumes from the run's storage.

The storage: pods share this machine's files except /root, /tmp and /dev/shm (their own),
so the run's storage is a directory under /var/tmp, which every pod reaches at the same
path (the way tests/test_aws_tune.py shares one with its hosts).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.hosts.ssh import isolation_unavailable
from fakes.kube.kubelet import FakeKubelet
from fakes.kube.server import KubeServer
from launcher.config.loader import Overrides, parse_config
from launcher.providers.base import NodeKind
from launcher.providers.factory import make_provider
from launcher.runners.kube_exec import KubeExecRunner
from tests.cluster_helpers import run, start, wait_for

needs_isolation = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

NAME = "kube-recover"
NAMESPACE = "ray"
SELECTOR = f"launcher-cluster={NAME}"
STEPS = 40
POD = (
    "{apiVersion: v1, kind: Pod, spec: {containers: [{name: ray-node, image: rayproject/ray, "
    "command: [/bin/bash, -c, --], args: ['trap : TERM INT; sleep infinity & wait;'], "
    "resources: {requests: {cpu: 100m}}}]}}"
)
# Each Ray node names its own address and agent port: the pods share this machine's
# network (fakes/hosts/ssh.py ray_start_commands, with no CPU on the head: the steps run
# on the worker).
RAY_OPTIONS = (
    "--node-ip-address=$LAUNCHER_NODE_IP --object-store-memory=100000000 "
    "--dashboard-agent-listen-port=$((52000 + ${LAUNCHER_NODE_IP##*.})) --disable-usage-stats"
)
CONFIG = f"""
cluster_name: {NAME}
max_workers: 1
provider: {{type: kubernetes, namespace: {NAMESPACE}}}
available_node_types:
  head: {{node_config: {POD}, resources: {{CPU: 0}}, max_workers: 0}}
  worker: {{node_config: {POD}, resources: {{CPU: 1}}, min_workers: 1, max_workers: 1}}
head_node_type: head
head_start_ray_commands:
  - ray stop
  - ray start --head --port=6379 --include-dashboard=false --num-cpus=0 {RAY_OPTIONS}
worker_start_ray_commands:
  - ray stop
  - ray start --address=$RAY_HEAD_IP:6379 --num-cpus=1 {RAY_OPTIONS}
"""
# The driver: STEPS steps, each a Ray task on the worker (the head has no CPU) that writes
# the count to the run's storage; a later attempt resumes from the count kept there. The
# first attempt goes slowly so that the head is lost mid-run; later ones quickly.
DRIVER = f"""
import os, socket, time
import ray

storage = os.environ["LAUNCHER_STORAGE_PATH"]
count = os.path.join(storage, "count")
attempt = int(os.environ["LAUNCHER_RUN_ATTEMPT"])

@ray.remote(num_cpus=1)
def step(n):
    with open(count + ".part", "w") as out:
        out.write(str(n))
    os.replace(count + ".part", count)
    return socket.gethostname()  # a pod's hostname is its name

ray.init()
done = int(open(count).read()) if os.path.exists(count) else 0
print(f"attempt {{attempt}} resuming from step {{done}}", flush=True)
with open(os.path.join(storage, "resumed"), "a") as out:
    out.write(f"{{done}}\\n")
for n in range(done + 1, {STEPS} + 1):
    host = ray.get(step.remote(n))
    time.sleep(1.0 if attempt == 1 else 0.05)
print("all steps done, the last on", host, flush=True)
"""


@dataclass
class Cluster:
    server: KubeServer
    path: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run(*args, env=self.env, timeout=timeout)

    def pods(self, kind: str | None = None) -> list[str]:
        selector = SELECTOR + (f",launcher-node-kind={kind}" if kind else "")
        return [p["metadata"]["name"] for p in self.server.pods(NAMESPACE, selector)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options())) as server:
        server.create("namespaces", {"metadata": {"name": NAMESPACE}})
        path = tmp_path / "cluster.yaml"
        path.write_text(CONFIG)
        env = {
            **os.environ,
            "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig")),
            "LAUNCHER_HOME": str(tmp_path / "home"),
        }
        made = Cluster(server, path, env)
        try:
            yield made
        finally:
            made.run("down", "-y", "--purge", str(path))


def _count(storage: Path) -> int:
    try:
        return int((storage / "count").read_text())
    except (OSError, ValueError):
        return 0


def _ended(process: subprocess.Popen[str]) -> bool:
    return process.poll() is not None


@needs_isolation
def test_a_run_survives_its_head_pod_deleted_keeping_its_worker_pod(
    cluster: Cluster, shared_dir: Path, tmp_path: Path
) -> None:
    driver = tmp_path / "steps.py"
    driver.write_text(DRIVER)
    submit = ["submit", str(cluster.path), str(driver), "--start", "--stop", "--recover"]
    process = start(*submit, "--recover-storage", str(shared_dir), env=cluster.env)
    try:
        wait_for(lambda: _count(shared_dir) >= 3 or _ended(process), 300, "the third step")
        assert process.poll() is None, process.communicate()[0][-5000:]
        (old_head,) = cluster.pods("head")
        workers = cluster.pods("worker")
        assert len(workers) == 1
        before_kill = cluster.server.calls()[-1].call.seq
        killed = cluster.run("kill-random-node", str(cluster.path), "--head", "--hard", "-y")
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert f"Terminated head {old_head}" in killed.stdout, killed.stdout
        assert old_head not in cluster.pods()  # the pod is gone, not merely its Ray
        output, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output[-5000:]
    assert f"head {old_head} lost" in output
    assert f"all steps done, the last on {workers[0]}" in output  # the kept worker pod
    assert _count(shared_dir) == STEPS
    first, second = (int(n) for n in (shared_dir / "resumed").read_text().split())
    assert first == 0 and second >= 3  # the second attempt resumed from storage

    listed = cluster.run("jobs", "list", "--json", str(cluster.path))
    assert listed.returncode == 0, listed.stderr
    (ended,) = json.loads(listed.stdout)
    assert ended["state"] == "succeeded" and ended["attempts"] == 2, ended
    (recovery,) = ended["recoveries_detail"]
    assert recovery["lost_head"] == old_head
    assert recovery["new_head"] and recovery["new_head"] != old_head
    assert recovery["kept_workers"] == workers  # the same pod, rejoined
    # Its Ray was started again through the exec API by the run's supervisor (with this
    # machine's credentials), as soon as the new head's Ray was up: the new head's
    # autoscaler (the head pod's account) left it to the supervisor.
    execs = [
        c.call
        for c in cluster.server.calls(resource="pods", since=before_kill)
        if c.call.subresource == "exec" and c.call.name == workers[0]
    ]
    account = f"system:serviceaccount:{NAMESPACE}:"
    assert any(c.user and not c.user.startswith(account) for c in execs), execs
    assert not [c for c in execs if (c.user or "").startswith(account)], execs
    # Three pods made in all: the first head, its worker, the new head; none for the worker.
    created = cluster.server.calls(verb="create", resource="pods")
    assert len([c for c in created if not c.call.subresource]) == 3
    new_head_started = re.search(r"attempt 2 started on head (\S+)", output)
    assert new_head_started and new_head_started.group(1) == recovery["new_head"], output[-3000:]
    # --stop took the cluster down: no pod left.
    assert cluster.pods() == []


def _soon(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """wait_for, polling often: the window waited for lasts a second."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.01)


def test_execs_connecting_at_once_leave_the_providers_calls_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's `kubernetes.stream` swaps its ApiClient's `call_api` for a websocket's
    while an exec connects, and puts back what it found. On the provider's one ApiClient,
    two execs connecting at once (a supervisor following its driver and probing the head)
    left the websocket's in place for good: every listing of pods after that failed with
    "Handshake status 200 OK" (and, during a connect, any call from another thread)."""
    with KubeServer() as server:
        server.create("namespaces", {"metadata": {"name": NAMESPACE}})
        monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        provider = make_provider(parse_config(CONFIG, "k.yaml", Overrides()))
        provider.bootstrap()
        (head,) = provider.create_nodes(provider.config.node_types["head"], NodeKind.HEAD, 1, {})
        runner = provider.access.command_runner(head, tmp_path / "node.log")
        assert isinstance(runner, KubeExecRunner)  # one runner, as a supervisor's session has
        runner.attempts = 1
        runner.run("true", {})  # it has read the pod's container once
        # The next exec is answered (an error) after 1 s, the one after it after 2 s.
        first = server.faults.add("*", "pods/exec", code=500, delay=1.0, times=1)
        second = server.faults.add("*", "pods/exec", code=500, delay=2.0, times=1)

        def exec_true() -> threading.Thread:
            thread = threading.Thread(target=runner.run, args=("true", {}), daemon=True)
            thread.start()
            return thread

        threads = [exec_true()]
        _soon(lambda: first.seen == 1, "the first exec to be connecting")
        assert [n.id for n in provider.nodes()] == [head.id]  # while it connects
        threads.append(exec_true())
        _soon(lambda: second.fired == 1, "the second exec to be connecting")
        for thread in threads:
            thread.join(30)
        assert second.fired == 1 and not any(t.is_alive() for t in threads)
        assert [n.id for n in provider.nodes()] == [head.id]  # and after both
