"""The Kubernetes provider (launcher/providers/kubernetes/) and its exec runner
(launcher/runners/kube_exec.py) against the fake API server of tests/kube_fake, in one run:

1. Ticks: API calls and time for an idle minute of autoscaler ticks with N worker pods
   (default 100 and 1,000) that nothing needs to launch or remove: ours, the real `Daemon`
   ticking 60 times at its 1 s interval on a fake clock; against two baselines on the same
   server and pods: Ray's KubeRay provider (`KubeRayNodeProvider`, installed with Ray) for 12
   autoscaler updates (Ray's 5 s interval), and Ray 1.x's own Kubernetes provider (removed
   from Ray 2; its calls reproduced with the same client calls), one update scaled to 12.
   Target (issue 16): at most one pod list per tick and no per-pod GETs.
2. `launcher up -y` (the CLI, a subprocess) with the fake kubelet running each pod as a real
   process tree: time to the head pod up to date and to `up` returning; against the same `up`
   on the on-prem provider over SSH to one isolated loopback host. No Ray: start commands echo.
3. Exec round trip: `KubeExecRunner.run("true")` in a fake-kubelet pod against
   `SSHRunner.run("true")` on an isolated sshd host, both on loopback; and a 20 MB `put()`.

    .venv/bin/python bench/bench_kubernetes.py [--pods 100,1000] [--repeat 3]
        [--old-updates 1] [--up-repeat 2] [--exec-runs 50] [--put-mb 20] [--parts ticks,up,exec]

Parts 2 and 3 need root (the fake pods and the isolated host use PID and mount namespaces),
nsenter and sshd; without them they are skipped with a note. Only loopback addresses.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    TICKS_OURS,
    BenchError,
    daemon_minute,
    expect,
    ray_update,
    show_time,
    wait_for,
)
from fakes.kube.scheduler import NodeSpec
from fakes.kube.server import KubeServer
from launcher.config.loader import Overrides, parse_config
from launcher.providers.base import TAG_STATUS, NodeKind
from launcher.providers.factory import make_provider
from launcher.runners.base import CommandRunner

CLUSTER = "bench-kube"
NAMESPACE = "ray"
UPDATES_RAY = 12  # Ray's autoscaler: one update every 5 s (AUTOSCALER_UPDATE_INTERVAL_S)
LISTINGS = 10  # listings in a row for the per-listing time
WAIT_S = 120.0
POLL_S = 0.01
SLEEPER = ["/bin/bash", "-c", "--", "trap : TERM INT; sleep infinity & wait;"]
# The pods' labels for the two Ray baselines: KubeRay selects on ray.io/cluster and reads
# ray.io/node-type and ray.io/group; Ray 1.x selected on ray-cluster-name.
RAY_LABELS = {
    "ray.io/cluster": CLUSTER,
    "ray.io/group": "worker",
    "ray-cluster-name": CLUSTER,
}
SSH_IP = "127.0.12.2"  # the isolated sshd host of parts 2 and 3 (no other bench uses it)
LAUNCHER = [sys.executable, "-m", "launcher"]


def pod_manifest(kind: str, command: Sequence[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "ray-node",
        "image": "rayproject/ray",
        "resources": {"requests": {"cpu": "100m"}},
    }
    if command:
        container["command"] = list(command)
    labels = {**RAY_LABELS, "ray.io/node-type": kind}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": labels},
        "spec": {"containers": [container]},
    }


def api_client(kubeconfig: Path) -> Any:
    """An ApiClient of the official client for the kubeconfig's current context."""
    from kubernetes import config

    loader: Any = config  # untyped
    return loader.new_client_from_config(config_file=str(kubeconfig))


def show_calls(calls: Mapping[str, float]) -> str:
    parts = []
    for name, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
        if n:
            parts.append(f"{n:g} {name}" if n == int(n) else f"{n:.2g} {name}")
    return " + ".join(parts) or "none"


def call_counts(server: KubeServer) -> Counter[str]:
    """The fake's call log as `verb resource[/subresource]`."""
    out: Counter[str] = Counter()
    for logged in server.calls():
        call = logged.call
        resource = call.resource + (f"/{call.subresource}" if call.subresource else "")
        out[f"{call.verb} {resource or call.path}"] += 1
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    aligns = ["---" if i == 0 or h.startswith("calls ") else "---:" for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(aligns) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -- part 1: an idle minute of ticks ----------------------------------------------------------


@dataclass
class Minute:
    """What one side spent on an idle minute (or on `updates` of it, scaled to a minute)."""

    seconds: float  # wall time of the minute's ticks/updates, as measured
    ticks: int  # ticks or updates measured
    per_minute: int  # ticks or updates in a minute of this side
    calls: Counter[str]  # calls the fake saw while measuring
    stubbed: int = 0  # calls answered locally (KubeRay's RayCluster GET)

    def scale(self) -> float:
        return self.per_minute / self.ticks


@dataclass
class TickLab:
    server: KubeServer
    provider: Any  # KubernetesProvider
    head: str
    tmp: Path
    kuberay: Any = None
    old: Any = None

    def workers(self) -> int:
        return sum(1 for n in self.provider.nodes() if n.kind is NodeKind.WORKER)

    def grow_to(self, count: int) -> None:
        """Launch workers (status up-to-date: nothing for the daemon to set up) until there
        are `count`, in launches of 100 (untimed)."""
        worker = self.provider.config.node_types["worker"]
        while (have := self.workers()) < count:
            self.provider.create_nodes(
                worker, NodeKind.WORKER, min(100, count - have), {TAG_STATUS: "up-to-date"}
            )

    def config_for(self, count: int) -> Any:
        """The provider's config with min_workers = max_workers = count: keep what is there."""
        pod = pod_manifest("worker")
        head = pod_manifest("head")
        text = f"""
cluster_name: {CLUSTER}
max_workers: {count}
provider: {{type: kubernetes, namespace: {NAMESPACE}}}
available_node_types:
  head: {{node_config: {head}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {pod}, resources: {{CPU: 1}}, min_workers: {count}, max_workers: {count}}}
head_node_type: head
"""
        return parse_config(text, "bench.yaml", Overrides())

    def ours_minute(self, count: int) -> Minute:
        """The real daemon for 60 ticks, the clock moving 1 s per tick. The head's status is
        setting-up, so it reads no Ray demand; every worker is up to date and wanted."""
        provider = make_provider(self.config_for(count))
        provider.nodes()  # its API client made, untimed
        self.server.clear_calls()
        daemon, seconds = daemon_minute(provider)
        expect("ours: the daemon wanted to launch", not daemon.executor.pending())
        calls = call_counts(self.server)
        expect(f"ours acted: {calls}", set(calls) <= {"list pods", "get pods"})
        return Minute(seconds, TICKS_OURS, TICKS_OURS, calls)

    def ours_listing(self) -> float:
        started = time.perf_counter()
        for _ in range(LISTINGS):
            self.provider.nodes()
        return (time.perf_counter() - started) / LISTINGS

    def kuberay_minute(self) -> Minute:
        provider = self.kuberay
        self.server.clear_calls()
        stubbed_before = provider.k8s_api_client.stubbed
        started = time.perf_counter()
        for _ in range(UPDATES_RAY):
            ray_update(provider)
        seconds = time.perf_counter() - started
        stubbed = provider.k8s_api_client.stubbed - stubbed_before
        return Minute(seconds, UPDATES_RAY, UPDATES_RAY, call_counts(self.server), stubbed)

    def kuberay_listing(self) -> float:
        started = time.perf_counter()
        for _ in range(LISTINGS):
            self.kuberay.get_node_data()
        return (time.perf_counter() - started) / LISTINGS

    def old_minute(self, updates: int) -> Minute:
        self.server.clear_calls()
        started = time.perf_counter()
        for _ in range(updates):
            ray_update(self.old)
        seconds = time.perf_counter() - started
        return Minute(seconds, updates, UPDATES_RAY, call_counts(self.server))

    def old_listing(self) -> float:
        started = time.perf_counter()
        for _ in range(LISTINGS):
            self.old.non_terminated_nodes({})
        return (time.perf_counter() - started) / LISTINGS


class OldRayKubernetesProvider:
    """Ray 1.x's KubernetesNodeProvider (python/ray/autoscaler/_private/_kubernetes/
    node_provider.py, removed from Ray 2): the same client calls, with the client's models.
    Listing: list_namespaced_pod with a label selector on the cluster and a field selector
    leaving out ended pods; node_tags and internal_ip: a read_namespaced_pod each."""

    FIELDS = "status.phase!=Failed,status.phase!=Unknown,status.phase!=Succeeded"

    def __init__(self, core: Any, namespace: str, cluster: str) -> None:
        self.core = core
        self.namespace = namespace
        self.cluster = cluster

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        selector = ",".join(
            f"{k}={v}" for k, v in {**tag_filters, "ray-cluster-name": self.cluster}.items()
        )
        pods = self.core.list_namespaced_pod(
            self.namespace,
            field_selector=self.FIELDS + ",status.phase!=Terminating",
            label_selector=selector,
        )
        return [p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None]

    def node_tags(self, node_id: str) -> dict[str, str]:
        labels: dict[str, str] = self.core.read_namespaced_pod(
            node_id, self.namespace
        ).metadata.labels
        return labels

    def internal_ip(self, node_id: str) -> str:
        return str(self.core.read_namespaced_pod(node_id, self.namespace).status.pod_ip)


class _StubbedRayCluster:
    """KubeRay's HTTP client, but the RayCluster custom resource (which the fake does not
    serve) is answered here, without a call; pods go to the fake through Ray's own client."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.stubbed = 0

    def get(self, path: str) -> dict[str, Any]:
        if path.startswith("rayclusters"):
            self.stubbed += 1
            group = {"groupName": "worker", "replicas": 0, "maxReplicas": 10_000}
            return {"metadata": {"name": CLUSTER}, "spec": {"workerGroupSpecs": [group]}}
        answer: dict[str, Any] = self.real.get(path)
        return answer

    def patch(self, path: str, payload: Any, content_type: str = "") -> dict[str, Any]:
        raise AssertionError(f"KubeRay patched {path} in an idle minute")

    def delete(self, path: str) -> dict[str, Any]:
        raise AssertionError(f"KubeRay deleted {path} in an idle minute")


def make_kuberay(server: KubeServer, head: str, tmp: Path) -> Any:
    """Ray's KubeRayNodeProvider as the KubeRay operator runs it in the head pod: the API
    server from KUBERNETES_SERVICE_HOST/PORT, the pod's token and CA files (here the fake's
    admin token and CA), RAY_HEAD_POD_NAME. Read by the module when imported."""
    os.environ["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
    os.environ["KUBERNETES_SERVICE_PORT_HTTPS"] = str(server.port)
    os.environ["RAY_HEAD_POD_NAME"] = head
    from ray.autoscaler._private import constants
    from ray.autoscaler._private.kuberay import node_provider as kuberay

    token = tmp / "kuberay-token"
    token.write_text(server.token)
    kuberay_module: Any = kuberay
    kuberay_module.IN_CLUSTER_TOKEN_PATH = str(token)
    kuberay_module.IN_CLUSTER_CA_CERT_PATH = str(server.ca_file)
    config = {
        "type": "kuberay",
        "namespace": NAMESPACE,
        constants.WORKER_LIVENESS_CHECK_KEY: False,
        constants.DISABLE_NODE_UPDATERS_KEY: True,
        constants.DISABLE_LAUNCH_CONFIG_CHECK_KEY: True,
        constants.FOREGROUND_NODE_LAUNCH_KEY: True,
    }
    # Its INFO lines (two per listing) go where the operator's monitor.log would be: still
    # formatted and written, to /dev/null instead of this script's stderr.
    sink = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    for handler in logging.getLogger("ray").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)
    provider = kuberay_module.KubeRayNodeProvider(config, CLUSTER)
    provider.k8s_api_client = _StubbedRayCluster(provider.k8s_api_client)
    return provider


@contextlib.contextmanager
def tick_lab(tmp: Path) -> Iterator[TickLab]:
    from kubernetes import client as kube_client

    node = NodeSpec("node-1", cpu="1000", memory="4000Gi", max_pods=5000)
    with KubeServer(nodes=[node]) as server:
        server.create("namespaces", {"metadata": {"name": NAMESPACE}})
        kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")
        os.environ["KUBECONFIG"] = str(kubeconfig)
        lab_config = TickLab(server, None, "", tmp).config_for(1)
        provider = make_provider(lab_config)
        provider.bootstrap()
        (head,) = provider.create_nodes(
            lab_config.head_type, NodeKind.HEAD, 1, {TAG_STATUS: "setting-up"}
        )
        lab = TickLab(server, provider, head.id, tmp)
        lab.kuberay = make_kuberay(server, head.id, tmp)
        core = kube_client.CoreV1Api(api_client(kubeconfig))
        lab.old = OldRayKubernetesProvider(core, NAMESPACE, CLUSTER)
        yield lab


@dataclass
class TickResults:
    minutes: dict[tuple[str, int], list[Minute]] = field(default_factory=dict)
    listings: dict[tuple[str, int], list[float]] = field(default_factory=dict)


def bench_ticks(
    tmp: Path, counts: Sequence[int], repeat: int, old_updates: int
) -> tuple[TickResults, str]:
    results = TickResults()
    tmp.mkdir(parents=True, exist_ok=True)
    with tick_lab(tmp) as lab:
        for count in counts:
            started = time.perf_counter()
            lab.grow_to(count)
            grew = time.perf_counter() - started
            listed = lab.old.non_terminated_nodes({})
            expect(f"Ray 1.x lists {len(listed)} of {count + 1}", len(listed) == count + 1)
            expect(
                "KubeRay lists every pod",
                len(lab.kuberay.non_terminated_nodes({})) == count + 1,
            )
            print(f"  N={count}: pods made in {grew:.1f} s (untimed)", file=sys.stderr)
            for r in range(repeat):
                sides: list[tuple[str, Callable[[], Minute], Callable[[], float]]] = [
                    ("ours", functools.partial(lab.ours_minute, count), lab.ours_listing),
                    ("KubeRay", lab.kuberay_minute, lab.kuberay_listing),
                ]
                if r == 0:  # Ray 1.x's minute is long: measured once
                    sides.append(("Ray 1.x", lambda: lab.old_minute(old_updates), lab.old_listing))
                order = sides if r % 2 == 0 else sides[::-1]
                for label, minute, listing in order:
                    m = minute()
                    results.minutes.setdefault((label, count), []).append(m)
                    results.listings.setdefault((label, count), []).append(listing())
                    print(
                        f"  N={count} {label}: {show_time(m.seconds)} for {m.ticks}",
                        file=sys.stderr,
                    )
        failed = [c for c in lab.server.calls() if c.status >= 500]
        expect(f"the fake failed: {failed[:3]}", not failed)
    return results, report_ticks(results, counts)


def report_ticks(results: TickResults, counts: Sequence[int]) -> str:
    headers = [
        "side",
        "N",
        "calls per tick",
        "calls a minute",
        "time per tick",
        "time a minute",
        "per listing",
        "calls a minute, ours / this",
        "time a minute, ours / this",
    ]
    rows = []
    for count in counts:
        ours_calls = ours_time = 0.0
        for label in ("ours", "KubeRay", "Ray 1.x"):
            minutes = results.minutes.get((label, count))
            if not minutes:
                continue
            m = minutes[len(minutes) // 2] if len(minutes) > 1 else minutes[0]
            seconds = statistics.median(x.seconds for x in minutes)
            per_tick = {k: v / m.ticks for k, v in m.calls.items()}
            per_minute = {k: v * m.scale() for k, v in m.calls.items()}
            if m.stubbed:
                per_tick["RayCluster get (answered locally)"] = m.stubbed / m.ticks
            total_minute = sum(per_minute.values())
            minute_s = seconds * m.scale()
            if label == "ours":
                ours_calls, ours_time = total_minute, minute_s
            name = {
                "ours": f"ours: Daemon, {TICKS_OURS} ticks",
                "KubeRay": f"Ray's KubeRay provider, {UPDATES_RAY} updates",
                "Ray 1.x": f"Ray 1.x's provider, {m.ticks} update(s) x {m.scale():g}",
            }[label]
            rows.append(
                [
                    name,
                    str(count),
                    show_calls(per_tick),
                    show_calls(per_minute),
                    show_time(seconds / m.ticks),
                    show_time(minute_s),
                    show_time(statistics.median(results.listings[(label, count)])),
                    f"{ours_calls / total_minute:.3f}x" if label != "ours" else "",
                    f"{ours_time / minute_s:.2f}x" if label != "ours" else "",
                ]
            )
    return table(headers, rows)


# -- parts 2 and 3: real pods, an isolated SSH host --------------------------------------------


def root_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (the fake pods and the SSH host use PID and mount namespaces)"
    for tool in ("nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not Path("/usr/sbin/sshd").exists():
        return "needs openssh-server (/usr/sbin/sshd)"
    return None


@dataclass
class RealLab:
    server: KubeServer
    kubeconfig: Path
    host: Any  # fakes.hosts.ssh.IsolatedHost
    key: Path
    tmp: Path
    env: dict[str, str]


@contextlib.contextmanager
def real_lab(tmp: Path) -> Iterator[RealLab]:
    from fakes.hosts.ssh import IsolatedHost, make_key
    from fakes.kube.kubelet import FakeKubelet

    tmp.mkdir(parents=True, exist_ok=True)
    key = make_key(tmp / "id_ed25519")
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(
            KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options()))
        )
        server.create("namespaces", {"metadata": {"name": NAMESPACE}})
        kubeconfig = server.write_kubeconfig(tmp / "real-kubeconfig")
        host = IsolatedHost(SSH_IP, Path(f"{key}.pub").read_text())
        stack.callback(host.close)
        host.start()
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "LAUNCHER_HOME": str(tmp / "launcher-home"),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        yield RealLab(server, kubeconfig, host, key, tmp, env)


UP_COMMANDS = """
setup_commands: ["echo setup-done"]
head_start_ray_commands: ["echo head-started-no-ray"]
worker_start_ray_commands: ["echo worker-started-no-ray"]
"""


def kube_up_config(lab: RealLab) -> Path:
    pod = pod_manifest("head", SLEEPER)
    worker = pod_manifest("worker", SLEEPER)
    path = lab.tmp / "kube-up.yaml"
    path.write_text(
        f"""cluster_name: {CLUSTER}-up
max_workers: 0
provider: {{type: kubernetes, namespace: {NAMESPACE}}}
available_node_types:
  head: {{node_config: {pod}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {worker}, resources: {{CPU: 1}}, min_workers: 0, max_workers: 0}}
head_node_type: head
{UP_COMMANDS}"""
    )
    return path


def ssh_up_config(lab: RealLab) -> Path:
    path = lab.tmp / "ssh-up.yaml"
    path.write_text(
        f"""cluster_name: {CLUSTER}-ssh-up
provider: {{type: local, head_ip: {lab.host.ip}, worker_ips: []}}
auth: {{ssh_user: root, ssh_private_key: {lab.key}}}
min_workers: 0
max_workers: 0
{UP_COMMANDS}"""
    )
    return path


def cli(lab: RealLab, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCHER, *args],
        env=lab.env,
        cwd=lab.tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class UpRun:
    head_created: float | None
    head_running: float | None
    head_ready: float | None
    returned: float
    calls: Counter[str]


def kube_up(lab: RealLab, path: Path) -> UpRun:
    """`launcher up -y` as a subprocess; a thread watches the fake's store (no API calls)
    for the head pod: made, Running, labelled up-to-date."""
    selector = f"launcher-cluster={CLUSTER}-up,launcher-node-kind=head"
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch(start: float) -> None:
        while not done.is_set():
            pods = lab.server.pods(NAMESPACE, selector)
            now = time.perf_counter() - start
            for pod in pods:
                seen.setdefault("created", now)
                if (pod.get("status") or {}).get("phase") == "Running":
                    seen.setdefault("running", now)
                if pod["metadata"].get("labels", {}).get("launcher-node-status") == "up-to-date":
                    seen.setdefault("ready", now)
            done.wait(POLL_S)

    lab.server.clear_calls()
    start = time.perf_counter()
    watcher = threading.Thread(target=watch, args=(start,), daemon=True)
    watcher.start()
    result = cli(lab, "up", "-y", str(path))
    returned = time.perf_counter() - start
    done.set()
    watcher.join()
    expect(f"kubernetes up failed: {result.stdout}{result.stderr}", result.returncode == 0)
    calls = call_counts(lab.server)
    return UpRun(seen.get("created"), seen.get("running"), seen.get("ready"), returned, calls)


def kube_down(lab: RealLab, path: Path) -> None:
    result = cli(lab, "down", "-y", "--purge", str(path))
    expect(f"kubernetes down failed: {result.stdout}{result.stderr}", result.returncode == 0)
    wait_for(
        lambda: not lab.server.pods(NAMESPACE, f"launcher-cluster={CLUSTER}-up"),
        "the up's pods gone",
        WAIT_S,
        poll_s=POLL_S,
    )


def ssh_up(lab: RealLab, path: Path) -> UpRun:
    """The same `up` on the on-prem provider: the head is the isolated host. Its status is
    in the launcher's node records here, read after `up` (no polling: `up` returns once the
    head is up to date and its autoscaler started, as on Kubernetes)."""
    start = time.perf_counter()
    result = cli(lab, "up", "-y", str(path))
    returned = time.perf_counter() - start
    expect(f"on-prem up failed: {result.stdout}{result.stderr}", result.returncode == 0)
    return UpRun(None, None, None, returned, Counter())


def ssh_down(lab: RealLab, path: Path) -> None:
    result = cli(lab, "down", "-y", str(path))
    expect(f"on-prem down failed: {result.stdout}{result.stderr}", result.returncode == 0)
    # A new machine next time: the head's launcher venv and state go (a new pod's home is
    # empty too).
    shutil.rmtree(lab.host.path("~/.launcher"), ignore_errors=True)


def client_import_s() -> float:
    """What importing the kubernetes client costs a new process (as `up` and the head's
    autoscaler import it), median of 3 fresh interpreters."""
    code = (
        "import time; t = time.perf_counter(); from kubernetes import client, config; "
        "client.CoreV1Api; client.RbacAuthorizationV1Api; print(time.perf_counter() - t)"
    )
    times = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        times.append(float(done.stdout))
    return statistics.median(times)


def bench_up(lab: RealLab, repeat: int) -> str:
    from launcher.cluster.install import build_wheel

    os.environ["LAUNCHER_HOME"] = lab.env["LAUNCHER_HOME"]
    build_wheel()  # the wheel both sides copy to the head, cached: built once, untimed
    kube_path, ssh_path = kube_up_config(lab), ssh_up_config(lab)
    kube_runs: list[UpRun] = []
    ssh_runs: list[float] = []
    for r in range(repeat):
        order = ["kube", "ssh"] if r % 2 == 0 else ["ssh", "kube"]
        for side in order:
            if side == "kube":
                run = kube_up(lab, kube_path)
                kube_down(lab, kube_path)
                kube_runs.append(run)
                print(f"  up kubernetes: {show_time(run.returned)}", file=sys.stderr)
            else:
                seconds = ssh_up(lab, ssh_path).returned
                ssh_down(lab, ssh_path)
                ssh_runs.append(seconds)
                print(f"  up on-prem: {show_time(seconds)}", file=sys.stderr)

    def med(values: Sequence[float | None]) -> str:
        known = [v for v in values if v is not None]
        return show_time(statistics.median(known)) if known else "n/a"

    ssh_median = statistics.median(ssh_runs)
    kube_median = statistics.median(r.returned for r in kube_runs)
    calls = kube_runs[len(kube_runs) // 2].calls
    rows = [
        [
            "kubernetes: head pod created (in the fake's store)",
            med([r.head_created for r in kube_runs]),
            "",
        ],
        ["kubernetes: head pod Running", med([r.head_running for r in kube_runs]), ""],
        ["kubernetes: head pod labelled up-to-date", med([r.head_ready for r in kube_runs]), ""],
        [
            "kubernetes: `up` returned (autoscaler started in the head pod)",
            show_time(kube_median),
            f"{kube_median / ssh_median:.2f}x",
        ],
        [
            "on-prem over SSH, one isolated host: `up` returned (baseline)",
            show_time(ssh_median),
            "1.00x",
        ],
    ]
    rows.append(
        [
            "of kubernetes' `up`: importing the kubernetes client (CoreV1Api, RBAC), alone",
            show_time(client_import_s()),
            "",
        ]
    )
    calls_line = "API calls of one kubernetes `up` (median run): " + show_calls(calls)
    return table(["what (from `launcher up -y` starting)", "median", "ratio to on-prem"], rows) + (
        f"\n\n{calls_line}"
    )


def exec_parts(kube: Any, runs: int) -> tuple[float, float]:
    """Medians of an exec of `true` without the runner's shell, and of a websocket opened and
    closed with nothing run to the end."""
    from launcher.runners.kube_session import ExecSession

    bare: list[float] = []
    connect: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        code, _, _ = kube.capture(["true"])
        bare.append(time.perf_counter() - started)
        expect("capture true", code == 0)
        started = time.perf_counter()
        ExecSession.open(kube.api(), kube.namespace, kube.pod, kube.container, ["true"]).close()
        connect.append(time.perf_counter() - started)
    return statistics.median(bare), statistics.median(connect)


def bench_exec(lab: RealLab, runs: int, put_mb: int, repeat: int) -> str:
    from kubernetes import client as kube_client

    from launcher.runners.known_hosts import KnownHosts
    from launcher.runners.kube_exec import KubeExecRunner
    from launcher.runners.ssh import SSHRunner, SSHTarget

    core: Any = kube_client.CoreV1Api(api_client(lab.kubeconfig))
    body = {
        "metadata": {"name": "bench-exec"},
        "spec": {"containers": [{"name": "main", "image": "debian", "command": SLEEPER}]},
    }
    core.create_namespaced_pod(NAMESPACE, body)
    wait_for(
        lambda: (
            (lab.server.pod(NAMESPACE, "bench-exec") or {}).get("status", {}).get("phase")
            == "Running"
        ),
        "the exec pod Running",
        WAIT_S,
        poll_s=POLL_S,
    )
    kube = KubeExecRunner(core, NAMESPACE, "bench-exec", None, {}, lab.tmp / "kube-exec.log")
    target = SSHTarget(lab.host.ip, "root", key_path=str(lab.key))
    ssh = SSHRunner(target, KnownHosts(lab.tmp / "known_hosts"), lab.tmp / "ssh.log")
    expect(f"ssh host not ready: {ssh.check_ready()}", ssh.check_ready() is None)
    expect(f"exec pod not ready: {kube.check_ready()}", kube.check_ready() is None)
    for _ in range(3):  # warm-up: the container name, connections, first-use imports
        expect("kube true", kube.run("true").ok)
        expect("ssh true", ssh.run("true").ok)
    kube_times: list[float] = []
    ssh_times: list[float] = []
    lab.server.clear_calls()
    for i in range(runs):  # interleaved, alternating which goes first
        pair: list[tuple[CommandRunner, list[float]]] = [(kube, kube_times), (ssh, ssh_times)]
        for runner, times in pair if i % 2 == 0 else pair[::-1]:
            started = time.perf_counter()
            ok = runner.run("true").ok
            times.append(time.perf_counter() - started)
            expect(f"{runner!r}: true failed", ok)
    # The fake logs a call when its handler returns, which for an exec can be just after the
    # client has its exit status: wait (briefly) for the last ones.
    with contextlib.suppress(BenchError):
        wait_for(
            lambda: lab.server.count(resource="pods") >= runs,
            "the execs logged",
            5.0,
            poll_s=POLL_S,
        )
    exec_calls = call_counts(lab.server)
    kube_t, ssh_t = statistics.median(kube_times), statistics.median(ssh_times)
    bare, connect = exec_parts(kube, runs)
    rows = [
        [
            '`run("true")`, median of ' + str(runs),
            show_time(kube_t),
            show_time(ssh_t),
            f"{kube_t / ssh_t:.2f}x",
        ],
        [
            '`run("true")`, 90th percentile',
            show_time(statistics.quantiles(kube_times, n=10)[-1]),
            show_time(statistics.quantiles(ssh_times, n=10)[-1]),
            "",
        ],
    ]
    rows += [
        [
            "of which: an exec of `true` alone (`capture`: no login shell, no setsid)",
            show_time(bare),
            "",
            "",
        ],
        [
            "of which: the exec's websocket opened and closed (TLS, upgrade)",
            show_time(connect),
            "",
            "",
        ],
    ]
    if put_mb:
        blob = lab.tmp / "blob"
        blob.write_bytes(os.urandom(put_mb << 20))
        kube_put: list[float] = []
        ssh_put: list[float] = []
        for r in range(repeat):
            pair = [(kube, kube_put), (ssh, ssh_put)]
            for runner, times in pair if r % 2 == 0 else pair[::-1]:
                remote = f"~/blob-{r}"
                started = time.perf_counter()
                runner.put(str(blob), remote)
                times.append(time.perf_counter() - started)
                code, out, _ = (
                    kube.capture(["stat", "-c", "%s", f"/root/blob-{r}"])
                    if runner is kube
                    else (0, str(lab.host.path(remote).stat().st_size).encode(), b"")
                )
                expect(f"{runner!r}: put size {out!r}", code == 0 and int(out) == put_mb << 20)
                runner.run(f"rm -f {remote}")
        kp, sp = statistics.median(kube_put), statistics.median(ssh_put)
        rows.append(
            [
                f"`put()` of one {put_mb} MB file, median of {repeat}",
                f"{show_time(kp)} ({put_mb / kp:.0f} MB/s)",
                f"{show_time(sp)} ({put_mb / sp:.0f} MB/s)",
                f"{kp / sp:.2f}x",
            ]
        )
    ssh.close()
    per_run = {k: round(v / runs, 2) for k, v in exec_calls.items()}
    return (
        table(["operation", "KubeExecRunner (pod)", "SSHRunner (isolated host)", "pod / SSH"], rows)
        + '\n\nAPI calls per `run("true")` (after warm-up): '
        + show_calls(per_run)
        + f" ({show_calls(exec_calls)} for {runs} runs)"
    )


# -- main -------------------------------------------------------------------------------------


def numbers(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise SystemExit(f"bench_kubernetes: --pods {text!r}: give numbers like 100,1000") from None
    if not counts or min(counts) < 1 or max(counts) > 5000 or counts != sorted(counts):
        raise SystemExit(f"bench_kubernetes: --pods {text!r}: rising numbers from 1 to 5000")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pods", default="100,1000", help="worker pods for the ticks (rising)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="repeats of the tick minutes and puts"
    )
    parser.add_argument(
        "--old-updates",
        type=int,
        default=1,
        help="updates of Ray 1.x's provider measured per N (5 GETs per pod each), scaled to 12",
    )
    parser.add_argument("--up-repeat", type=int, default=2, help="`up` runs per side")
    parser.add_argument("--exec-runs", type=int, default=50, help='run("true") per runner')
    parser.add_argument("--put-mb", type=int, default=20, help="put() size in MB (0: none)")
    parser.add_argument("--parts", default="ticks,up,exec", help="which parts to run")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    expect(f"--parts {args.parts!r}", bool(parts) and parts <= {"ticks", "up", "exec"})
    expect(
        "--repeat, --up-repeat and --exec-runs must be at least 1",
        min(args.repeat, args.up_repeat, args.exec_runs, args.old_updates) >= 1,
    )
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-kube-") as name:
        tmp = Path(name)
        os.environ["HOME"] = str(tmp)  # the daemon's state file (~/.launcher/head)
        os.environ["LAUNCHER_HOME"] = str(tmp / "launcher-home")
        if "ticks" in parts:
            print("part 1: ticks", file=sys.stderr)
            _, text = bench_ticks(tmp / "ticks", numbers(args.pods), args.repeat, args.old_updates)
            loads.append(os.getloadavg()[0])
            out += [
                f"## an idle minute of autoscaler ticks (medians of {args.repeat})",
                "",
                text,
                "",
            ]
        if parts & {"up", "exec"}:
            problem = root_problem()
            if problem is not None:
                out += [f"(parts up and exec skipped: {problem})", ""]
            else:
                with real_lab(tmp / "real") as lab:
                    if "exec" in parts:
                        print("part 3: exec", file=sys.stderr)
                        text = bench_exec(lab, args.exec_runs, args.put_mb, args.repeat)
                        loads.append(os.getloadavg()[0])
                        out += ["## exec round trip, both on loopback", "", text, ""]
                    if "up" in parts:
                        print("part 2: up", file=sys.stderr)
                        text = bench_up(lab, args.up_repeat)
                        loads.append(os.getloadavg()[0])
                        out += [
                            f"## `launcher up -y`, no Ray (medians of {args.up_repeat})",
                            "",
                            text,
                            "",
                        ]
    print("\n".join(out))
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print(
        f"{time.monotonic() - started:.0f} s in all; load average (1 min) {min(loads):.1f} to "
        f"{max(loads):.1f}; {os.cpu_count()} cores; threads left: {', '.join(left) or 'none'}"
    )


if __name__ == "__main__":
    main()
