"""Time to a working cluster, head to head with Ray's own `ray up` (issue 31 section 1).

One cluster file (a head and N workers, `min_workers: N`, one file mount, the same
initialization, setup and start commands) is brought up by Ray 2.60's `ray up -y` (the
venv's `ray`) and by `launcher up -y`, both against the same fake AWS in the same run:
moto's EC2/IAM server on 127.0.0.1 (fakes/aws/server.py `MotoServer`, launching MaxCount
instances as EC2 does: bench/bench_aws.py's `Ec2CountServer`), whose instances in a loopback
VPC (127.16.1.0/24) are real sshd hosts running real Ray in their own PID and mount
namespaces (`InstanceHosts`). The sides alternate (the first side changes every repeat).
Per side and repeat:

  up        from the command to every node's Ray alive in the head's GCS (N + 1 nodes);
            Ray's `ray up` returns once the head is set up and its monitor on the head
            launches the workers, so the clock runs until the GCS lists them all
  noop      `up` again on the running cluster: Ray's `ray up -y --no-restart`, ours
            `launcher up -y`, to the command's return
  restart   Ray's plain `ray up -y` (it restarts Ray on the head), to the command's return
            and (`restart+alive`) to every node alive again in the new GCS
  down      from `down -y` to no instance of the cluster listed as pending, running,
            stopping, stopped or shutting-down by the fake (the instances terminated)

Where the time goes comes from the fake's call log (every EC2/IAM call, timed here, by
caller: this machine or the head) and from marks the cluster's own commands leave on each
host (`date` before the initialization, setup and start commands and after `ray start`),
the time each host's sshd came up, the time its file mount landed (the files' ctime) and
the time the GCS first listed it alive (polled every 0.2 s from here).

    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_time_to_cluster.py \
        [--repeat 3] [--workers 8] [--logs DIR] [--sides ray,ours]

Every `ray` and `launcher` process gets fake credentials, the fake's endpoint and a config
file naming it (checked before each start); the hosts' /root/.aws name the fake too, so Ray's
monitor and our autoscaler on the head reach only it. Ray's default instance profile
(`ray-autoscaler-v1` with its role) is made before the first `ray up`, as in an account where
Ray was used before: Ray's first `ray up` in a new account sleeps 30 s more for IAM to
propagate (bootstrap_aws). Both sides' own bootstrap (security group, our IAM role) is made
by their first `up` of the run (repeat 1) and reused after. On exit (also on failure or
Ctrl-C) both sides' `down` runs, every instance left is terminated in the fake and every
host is stopped.

AWS only: Ray's GCP provider builds its Google API clients with no endpoint option (and
fetches their discovery documents from Google), so nothing in its environment sends a
`ray up` process, or Ray's monitor on the head, to the GCE fake without patching Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_aws import Ec2CountServer
from bench.common import BenchError
from fakes.aws.faults import Call
from fakes.aws.server import InstanceHosts, amazon_image, loopback_vpc
from fakes.hosts.ssh import isolation_unavailable, make_key

BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
LAUNCHER = str(BIN / "launcher")
CLUSTER = "bench-ttc"
KEY_NAME = "bench-ttc"
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
UP_TIMEOUT_S = 600.0
DOWN_TIMEOUT_S = 300.0
POLL_S = 0.2
MARKS = "~/bench-marks"


# -- the fake, timed -------------------------------------------------------------------------


@dataclass(frozen=True)
class TimedCall:
    """One call the fake answered: when (wall clock) it began and ended inside the fake
    (waiting for the fake's lock included), what, and who called (None: this machine; an
    instance id: a process on that instance, e.g. the autoscaler on the head)."""

    start: float
    end: float
    service: str | None
    action: str | None
    origin: str | None
    launched: tuple[str, ...]  # RunInstances: the instance ids it answered with


class TimedServer(Ec2CountServer):
    """Ec2CountServer that also keeps the wall-clock time of every call it forwards."""

    def __init__(self) -> None:
        super().__init__()
        self.timed: list[TimedCall] = []
        self._timed_lock = threading.Lock()

    def _forward(self, environ: dict[str, Any], call: Call) -> tuple[int, list[Any], bytes]:
        start = time.time()
        status, headers, body = super()._forward(environ, call)
        launched: tuple[str, ...] = ()
        if call.action == "RunInstances" and status == 200:
            launched = tuple(
                i.decode() for i in re.findall(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", body)
            )
        entry = TimedCall(start, time.time(), call.service, call.action, call.origin, launched)
        with self._timed_lock:
            self.timed.append(entry)
        return status, headers, body

    def calls_between(self, start: float, end: float) -> list[TimedCall]:
        with self._timed_lock:
            return [c for c in self.timed if start <= c.start <= end]


# -- the cluster file ------------------------------------------------------------------------


def mark(name: str) -> str:
    return f'echo "{name} $(date +%s.%N)" >> {MARKS}'


# The hosts share this machine's network: each Ray node names its own address (the one its
# SSH session came in on) and a dashboard agent port of its own.
NODE_IP = "$(echo $SSH_CONNECTION | cut -d' ' -f3)"
RAY_OPTIONS = (
    f"--node-ip-address={NODE_IP} --object-store-memory=100000000 --num-cpus=1 "
    f"--dashboard-agent-listen-port=$((52000 + $(echo $SSH_CONNECTION | cut -d' ' -f3 "
    "| cut -d. -f4))) --disable-usage-stats"
)


def cluster_yaml(
    workers: int, ami: str, subnet: str, key: Path, files: Path, speed: float | None = None
) -> str:
    node_config = (
        f"{{InstanceType: m5.large, ImageId: {ami}, SubnetIds: [{subnet}], KeyName: {KEY_NAME}}}"
    )

    def commands(*lines: str) -> str:
        return "".join(f"  - {_yaml_str(line)}\n" for line in lines)

    return (
        f"cluster_name: {CLUSTER}\n"
        f"max_workers: {workers}\n"
        + (f"upscaling_speed: {speed:g}\n" if speed is not None else "")
        + "idle_timeout_minutes: 5\n"
        "provider:\n"
        "  type: aws\n"
        "  region: us-west-2\n"
        "  use_internal_ips: true\n"
        "  cache_stopped_nodes: false\n"
        "auth:\n"
        "  ssh_user: root\n"
        f"  ssh_private_key: {key}\n"
        "available_node_types:\n"
        "  head:\n"
        f"    node_config: {node_config}\n"
        "    resources: {CPU: 1}\n"
        "    max_workers: 0\n"
        "  worker:\n"
        f"    node_config: {node_config}\n"
        "    resources: {CPU: 1}\n"
        f"    min_workers: {workers}\n"
        f"    max_workers: {workers}\n"
        "head_node_type: head\n"
        "file_mounts:\n"
        f"  ~/bench-files: {files}\n"
        "initialization_commands:\n"
        + commands(mark("init"))
        + "setup_commands:\n"
        + commands(mark("setup"), "echo setup on $(hostname) >> ~/setup.log")
        + "head_start_ray_commands:\n"
        + commands(
            mark("start"),
            "ray stop",
            "ray start --head --port=6379 --include-dashboard=false "
            f"--autoscaling-config=~/ray_bootstrap_config.yaml {RAY_OPTIONS}",
            mark("started"),
        )
        + "worker_start_ray_commands:\n"
        + commands(
            mark("start"),
            "ray stop",
            f"ray start --address=$RAY_HEAD_IP:6379 {RAY_OPTIONS}",
            mark("started"),
        )
    )


def _yaml_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- processes -------------------------------------------------------------------------------


@dataclass
class Ran:
    argv: list[str]
    start: float
    end: float
    code: int
    lines: list[tuple[float, str]]  # (wall clock when read, line)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


class Processes:
    """Starts the `ray` and `launcher` commands, each in a session of its own (so Ctrl-C
    here does not reach them and `kill_all` ends their trees), with an environment that is
    checked to send boto3 to the fake only."""

    def __init__(self, env: Mapping[str, str], endpoint: str, log_dir: Path) -> None:
        self.env = dict(env)
        self.endpoint = endpoint
        self.log_dir = log_dir
        self.live: set[subprocess.Popen[str]] = set()
        self.count = 0
        check_env(self.env, endpoint)

    def run(self, argv: Sequence[str], label: str, timeout: float = UP_TIMEOUT_S) -> Ran:
        check_env(self.env, self.endpoint)
        self.count += 1
        log = self.log_dir / f"{self.count:03d}-{label}.log"
        lines: list[tuple[float, str]] = []
        start = time.time()
        proc = subprocess.Popen(
            list(argv),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.live.add(proc)
        try:
            reader = threading.Thread(target=_read_lines, args=(proc, lines), daemon=True)
            reader.start()
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(proc)
                raise BenchError(f"{' '.join(argv[:3])} timed out after {timeout:g} s") from None
            end = time.time()
            reader.join(10)
        finally:
            self.live.discard(proc)
        with log.open("w") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.writelines(f"{t - start:8.2f} {line}\n" for t, line in lines)
            out.write(f"exit {code} after {end - start:.2f} s\n")
        return Ran(list(argv), start, end, code, lines)

    def kill(self, proc: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def kill_all(self) -> None:
        for proc in list(self.live):
            self.kill(proc)


def _read_lines(proc: subprocess.Popen[str], into: list[tuple[float, str]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        into.append((time.time(), line.rstrip("\n")))


def check_env(env: Mapping[str, str], endpoint: str) -> None:
    """Refuse to start anything that could reach real AWS."""
    problems = [
        name
        for name, ok in (
            ("AWS_ENDPOINT_URL", env.get("AWS_ENDPOINT_URL") == endpoint),
            ("loopback endpoint", endpoint.startswith("http://127.")),
            ("AWS_ACCESS_KEY_ID", env.get("AWS_ACCESS_KEY_ID") == "testing"),
            ("AWS_SECRET_ACCESS_KEY", env.get("AWS_SECRET_ACCESS_KEY") == "testing"),
            ("AWS_EC2_METADATA_DISABLED", env.get("AWS_EC2_METADATA_DISABLED") == "true"),
            ("no AWS_PROFILE", "AWS_PROFILE" not in env and "AWS_SESSION_TOKEN" not in env),
        )
        if not ok
    ]
    config = env.get("AWS_CONFIG_FILE")
    if not config or f"endpoint_url = {endpoint}" not in Path(config).read_text():
        problems.append("AWS_CONFIG_FILE")
    if problems:
        raise SystemExit(f"bench_time_to_cluster: unsafe environment: {', '.join(problems)}")


# -- watching the cluster --------------------------------------------------------------------


@dataclass
class Watch:
    """What the watcher thread saw: when each instance's host came up, when each Ray node
    (by IP) was first alive in the head's GCS, and how many were alive at each poll."""

    host_up: dict[str, float] = field(default_factory=dict)  # instance id -> time
    alive_at: dict[str, float] = field(default_factory=dict)  # node IP -> time
    alive: int = 0
    head_ip: str | None = None
    cluster_id: str | None = None  # of the GCS last polled (a restarted GCS has another)


class Watcher:
    """A thread that polls the fake's instances (its backend, not its API: no calls in the
    log), the hosts, and the GCS of the cluster's head (by the side's head tag)."""

    def __init__(self, server: TimedServer, hosts: InstanceHosts) -> None:
        self.server = server
        self.hosts = hosts
        self.head_tag: tuple[str, str] = ("", "")
        self.watch = Watch()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._client: Any = None
        self._client_ip: str | None = None
        self._cluster_id: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="ttc-watcher")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def reset(self, head_tag: tuple[str, str]) -> Watch:
        with self._lock:
            self.head_tag = head_tag
            self.watch = Watch()
            self._client = self._client_ip = self._cluster_id = None
            return self.watch

    def snapshot(self) -> Watch:
        with self._lock:
            return Watch(
                dict(self.watch.host_up),
                dict(self.watch.alive_at),
                self.watch.alive,
                self.watch.head_ip,
                self.watch.cluster_id,
            )

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            with contextlib.suppress(Exception):
                self._poll()

    def _poll(self) -> None:
        now = time.time()
        up = self.hosts.running()
        key, value = self.head_tag
        heads = [
            v.private_ip
            for v in self.server.instances()
            if v.state == "running" and key and v.tags.get(key) == value
        ]
        with self._lock:
            for instance_id in up:
                self.watch.host_up.setdefault(instance_id, now)
            self.watch.head_ip = heads[0] if heads else None
        head_ip = heads[0] if heads else None
        if head_ip is None or not _listening(head_ip, 6379):
            with self._lock:
                self.watch.alive = 0
            return
        alive = self._alive_ips(head_ip)
        now = time.time()
        with self._lock:
            self.watch.alive = len(alive)
            for ip in alive:
                self.watch.alive_at.setdefault(ip, now)

    def _alive_ips(self, head_ip: str) -> list[str]:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]
        from ray.core.generated import gcs_pb2

        alive = gcs_pb2.GcsNodeInfo.ALIVE  # type: ignore[attr-defined]
        if self._client is None or self._client_ip != head_ip:
            self._client = GcsClient(address=f"{head_ip}:6379")
            self._client_ip = head_ip
        try:
            nodes = self._client.get_all_node_info(timeout=2)
            cluster_id = self._client.cluster_id.hex()
        except Exception:
            self._client = None
            raise
        if cluster_id != self._cluster_id:
            with self._lock:
                if self._cluster_id is not None:  # a new GCS: count from zero
                    self.watch.alive_at.clear()
                self._cluster_id = self.watch.cluster_id = cluster_id
        return [n.node_manager_address for n in nodes.values() if n.state == alive]


def _listening(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((ip, port)) == 0


# -- the two sides ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    label: str
    up: tuple[str, ...]
    noops: tuple[tuple[str, tuple[str, ...]], ...]  # (row, argv) after the cluster is up
    down: tuple[str, ...]
    head_tag: tuple[str, str]
    cluster_tag: tuple[str, str]


def sides(config: Path) -> dict[str, Side]:
    c = str(config)
    return {
        "ray": Side(
            "ray",
            (RAY, "up", "-y", c),
            (("noop", (RAY, "up", "-y", "--no-restart", c)), ("restart", (RAY, "up", "-y", c))),
            (RAY, "down", "-y", c),
            ("ray-node-type", "head"),
            ("ray-cluster-name", CLUSTER),
        ),
        "ours": Side(
            "ours",
            (LAUNCHER, "up", "-y", c),
            (("noop", (LAUNCHER, "up", "-y", c)),),
            (LAUNCHER, "down", "-y", c),
            ("launcher-node-kind", "head"),
            ("launcher-cluster", CLUSTER),
        ),
    }


# -- one round -------------------------------------------------------------------------------


@dataclass
class NodeTimes:
    """One node's first `up`, in seconds from the command's start."""

    kind: str  # head or worker
    launched: float | None = None  # its RunInstances answered
    host_up: float | None = None  # its sshd was started (it listens some 10 ms later)
    files: float | None = None  # its file mount landed
    marks: dict[str, float] = field(default_factory=dict)  # init, setup, start, started
    alive: float | None = None  # first listed alive by the GCS


@dataclass
class Round:
    side: str
    rows: dict[str, float] = field(default_factory=dict)  # row -> seconds
    returned: float = 0.0  # the first up's command returned, s after its start
    nodes: list[NodeTimes] = field(default_factory=list)
    calls: dict[str, list[TimedCall]] = field(default_factory=dict)  # row -> calls
    start: float = 0.0  # wall clock of the first up's start


class Bench:
    def __init__(
        self,
        server: TimedServer,
        hosts: InstanceHosts,
        watcher: Watcher,
        procs: Processes,
        workers: int,
    ) -> None:
        self.server = server
        self.hosts = hosts
        self.watcher = watcher
        self.procs = procs
        self.workers = workers

    def live_instances(self, side: Side) -> list[str]:
        key, value = side.cluster_tag
        return [
            v.id
            for v in self.server.instances()
            if v.state in LIVE_STATES and v.tags.get(key) == value
        ]

    def wait_alive(self, since: float, what: str, not_gcs: str | None = None) -> float:
        """Seconds from `since` to every node alive (the watcher's first sight of the last),
        in a GCS other than `not_gcs` (a cluster id) if given."""
        deadline = time.monotonic() + UP_TIMEOUT_S
        want = self.workers + 1
        while True:
            seen = self.watcher.snapshot()
            new = seen.cluster_id is not None and seen.cluster_id != not_gcs
            if new and seen.alive >= want and len(seen.alive_at) >= want:
                return max(seen.alive_at.values()) - since
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: {seen.alive} of {want} nodes alive after timeout")
            time.sleep(POLL_S / 2)

    def round(self, side: Side) -> Round:
        result = Round(side.label)
        self.watcher.reset(side.head_tag)
        self.hosts_gone()
        ran = self.procs.run(side.up, f"{side.label}-up")
        if ran.code != 0:
            raise BenchError(f"{side.label} up failed ({ran.code}):\n{ran.text()[-3000:]}")
        result.start = ran.start
        result.returned = ran.seconds
        result.rows["up"] = self.wait_alive(ran.start, f"{side.label} up")
        result.calls["up"] = self.server.calls_between(ran.start, ran.start + result.rows["up"])
        self.wait_marks(side, "started")  # written after `ray start` returns: maybe later
        result.nodes = self.node_times(side, ran.start, result.calls["up"])
        for row, argv in side.noops:
            before = self.watcher.snapshot().cluster_id
            ran = self.procs.run(argv, f"{side.label}-{row}")
            if ran.code != 0:
                raise BenchError(f"{side.label} {row} failed ({ran.code}):\n{ran.text()[-3000:]}")
            result.rows[row] = ran.seconds
            result.calls[row] = self.server.calls_between(ran.start, ran.end)
            if row == "restart":
                result.rows["restart+alive"] = self.wait_alive(
                    ran.start, f"{side.label} {row}", not_gcs=before
                )
        self.keep_head_logs(side)
        result.rows["down"] = self.down(side, result)
        return result

    def down(self, side: Side, result: Round | None = None) -> float:
        ran = self.procs.run(side.down, f"{side.label}-down", timeout=DOWN_TIMEOUT_S)
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while self.live_instances(side):
            if time.monotonic() > deadline:
                raise BenchError(f"{side.label} down: instances still listed")
            time.sleep(0.05)
        gone = time.time()
        if ran.code != 0:
            raise BenchError(f"{side.label} down failed ({ran.code}):\n{ran.text()[-3000:]}")
        if result is not None:
            result.calls["down"] = self.server.calls_between(ran.start, max(gone, ran.end))
        return max(gone, ran.end) - ran.start

    def keep_head_logs(self, side: Side) -> None:
        """Copy the head's autoscaler logs (Ray's monitor, our daemon) into the log directory
        before `down` takes the host away."""
        key, value = side.head_tag
        for view in self.server.instances():
            host = self.hosts.host(view.id)
            if view.state != "running" or view.tags.get(key) != value or host is None:
                continue
            with contextlib.suppress(OSError):  # every Ray session's (a restart makes one)
                for log in sorted(host.path("/tmp/ray").glob("session_2*/logs/monitor*")):
                    name = f"{self.procs.count:03d}-head-{log.parts[-3]}-{log.name}"
                    shutil.copy(log, self.procs.log_dir / name)
            with contextlib.suppress(OSError):
                for log in sorted(host.path("~/.launcher").rglob("*.log")):
                    name = "-".join(log.relative_to(host.path("~/.launcher")).parts)
                    shutil.copy(log, self.procs.log_dir / f"{self.procs.count:03d}-head-{name}")

    def wait_marks(self, side: Side, name: str, timeout: float = 60) -> None:
        """Until every node of the cluster has mark `name` (untimed), at most `timeout` s."""
        deadline = time.monotonic() + timeout
        key, value = side.cluster_tag
        while time.monotonic() < deadline:
            missing = 0
            for view in self.server.instances():
                if view.state == "running" and view.tags.get(key) == value:
                    host = self.hosts.host(view.id)
                    try:
                        text = host.path(MARKS).read_text() if host else ""
                    except OSError:
                        text = ""
                    missing += f"\n{name} " not in "\n" + text
            if not missing:
                return
            time.sleep(0.2)

    def hosts_gone(self) -> None:
        deadline = time.monotonic() + 120
        while self.hosts.running():
            if time.monotonic() > deadline:
                raise BenchError("hosts of the last cluster still up")
            time.sleep(0.1)

    def node_times(self, side: Side, start: float, calls: Sequence[TimedCall]) -> list[NodeTimes]:
        seen = self.watcher.snapshot()
        launched = {i: c.end for c in calls for i in c.launched}
        key, value = side.cluster_tag
        found = []
        for view in self.server.instances():
            if view.state != "running" or view.tags.get(key) != value:
                continue
            kind = "head" if view.tags.get(side.head_tag[0]) == side.head_tag[1] else "worker"
            node = NodeTimes(kind)
            if view.id in launched:
                node.launched = launched[view.id] - start
            if view.id in seen.host_up:
                node.host_up = seen.host_up[view.id] - start
            host = self.hosts.host(view.id)
            if host is not None:
                with contextlib.suppress(OSError):  # written as the host's sshd is started
                    node.host_up = (host.root / "unshare.pid").stat().st_mtime - start
                with contextlib.suppress(OSError):
                    mounted = min(p.stat().st_ctime for p in host.path("~/bench-files").iterdir())
                    node.files = mounted - start
                with contextlib.suppress(OSError):
                    for line in host.path(MARKS).read_text().splitlines():
                        name, _, when = line.partition(" ")
                        node.marks.setdefault(name, float(when) - start)
            if view.private_ip in seen.alive_at:
                node.alive = seen.alive_at[view.private_ip] - start
            found.append(node)
        return found

    def clean(self, all_sides: Sequence[Side]) -> None:
        """Best effort: both sides' down, then terminate whatever is left in the fake."""
        self.procs.kill_all()
        for side in all_sides:
            if self.live_instances(side):
                with contextlib.suppress(Exception):
                    self.procs.run(side.down, f"{side.label}-cleanup-down", timeout=120)
        with self.server.lock:
            left = [v.id for v in self.server.instances() if v.state in LIVE_STATES]
        if left:
            with contextlib.suppress(Exception):
                self.server.client("ec2").terminate_instances(InstanceIds=left)


# -- the report ------------------------------------------------------------------------------

ROWS = ("up", "noop", "restart", "restart+alive", "down")
ROW_TEXT = {
    "up": "first up, to every node's Ray alive",
    "noop": "up again, no-op (Ray: --no-restart)",
    "restart": "Ray's plain up -y (restarts Ray)",
    "restart+alive": "  ... to every node alive again",
    "down": "down, to no instance listed",
}
TARGETS = {"up": 0.5, "noop": 0.2, "down": 0.2}


def median_range(values: Sequence[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{med:6.2f} s ({min(values):.2f}-{max(values):.2f})"


def report(rounds: Sequence[Round]) -> str:
    by: dict[tuple[str, str], list[float]] = {}
    for r in rounds:
        for row, seconds in r.rows.items():
            by.setdefault((r.side, row), []).append(seconds)
    out = [f"{'':40} {'ray (median, range)':>24} {'ours (median, range)':>24}  ours/ray"]
    for row in ROWS:
        ray, ours = by.get(("ray", row), []), by.get(("ours", row), [])
        if not ray and not ours:
            continue
        if row in {"restart", "restart+alive"}:
            ratio = ""
        elif ray and ours:
            ratio = f"{statistics.median(ours) / statistics.median(ray):.2f}x"
            if row in TARGETS:
                target = TARGETS[row]
                met = statistics.median(ours) / statistics.median(ray) <= target
                if row == "down":
                    met = met or statistics.median(ours) <= 2.5
                ratio += f" (target <= {target}x{' or 2.5 s' if row == 'down' else ''}: "
                ratio += f"{'met' if met else 'NOT met'})"
        else:
            ratio = ""
        out.append(f"{ROW_TEXT[row]:40} {median_range(ray):>24} {median_range(ours):>24}  {ratio}")
    if any(r.side == "ray" for r in rounds):
        returned = [r.returned for r in rounds if r.side == "ray"]
        out.append(f"{'  (ray up itself returned after)':40} {median_range(returned):>24}")
    if any(r.side == "ours" for r in rounds):
        returned = [r.returned for r in rounds if r.side == "ours"]
        out.append(
            f"{'  (launcher up itself returned after)':40} {'':>24} {median_range(returned):>24}"
        )
    return "\n".join(out)


def med(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def show(value: float | None) -> str:
    return "-" if value is None else f"{value:6.2f}"


def earliest(values: Sequence[float | None]) -> float | None:
    return min((v for v in values if v is not None), default=None)


def latest(values: Sequence[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


MILESTONES: tuple[Callable[[NodeTimes], float | None], ...] = (
    lambda n: n.launched,
    lambda n: n.host_up,
    lambda n: n.files,
    lambda n: n.marks.get("init"),
    lambda n: n.marks.get("setup"),
    lambda n: n.marks.get("start"),
    lambda n: n.marks.get("started"),
    lambda n: n.alive,
)


def breakdown(rounds: Sequence[Round]) -> str:
    """Per side, medians over the repeats: the head's and the workers' milestones (seconds
    from the `up` command; workers: the median worker, and the last one) and the calls."""
    out: list[str] = []
    for side in ("ray", "ours"):
        mine = [r for r in rounds if r.side == side]
        if not mine:
            continue
        out.append(f"{side}: milestones of the first up, s after the command (median of repeats)")
        out.append(
            f"  {'':14} {'launched':>8} {'sshd up':>8} {'files':>8} {'init':>8} {'setup':>8} "
            f"{'ray start':>9} {'started':>8} {'alive':>8}"
        )
        for label, kind, agg in (
            ("head", "head", med),
            ("worker first", "worker", earliest),
            ("worker median", "worker", med),
            ("worker last", "worker", latest),
        ):
            values = [
                med([agg([get(n) for n in r.nodes if n.kind == kind]) for r in mine])
                for get in MILESTONES
            ]
            out.append(
                f"  {label:14} "
                + " ".join(f"{show(v):>{9 if i == 5 else 8}}" for i, v in enumerate(values))
            )
        middle = sorted(mine, key=lambda r: r.rows["up"])[len(mine) // 2]
        launches = [
            f"{c.end - middle.start:.1f} s: {len(c.launched)} from "
            + ("the head" if c.origin else "here")
            for c in middle.calls["up"]
            if c.action == "RunInstances"
        ]
        out.append("  RunInstances in the median up (s after the command: instances, caller):")
        out.append("  - " + ", ".join(launches))
        out.append(f"{side}: calls to the fake (median of repeats; time inside the fake)")
        for row in ("up", "noop", "restart", "down"):
            per = [r.calls[row] for r in mine if row in r.calls]
            if not per:
                continue
            here = med([len([c for c in cs if c.origin is None]) for cs in per])
            head = med([len([c for c in cs if c.origin is not None]) for cs in per])
            inside = med([sum(c.end - c.start for c in cs) for cs in per])
            actions = Counter(
                f"{c.action}{'@head' if c.origin else ''}" for c in per[len(per) // 2]
            )
            top = ", ".join(f"{n} {a}" for a, n in actions.most_common(8))
            out.append(
                f"  {row:8} {show(here)} from here + {show(head)} from the head, "
                f"{show(inside)} s in the fake; e.g. {top}"
            )
    return "\n".join(out)


# -- main ------------------------------------------------------------------------------------


def prepare_account(server: TimedServer, key: Path) -> tuple[str, str]:
    """The loopback VPC, the key pair both sides name (KeyName) and Ray's default instance
    profile (see the module docstring). Returns (AMI, subnet id)."""
    ec2 = server.client("ec2")
    vpc = loopback_vpc(ec2, zones=("a",))
    public = Path(f"{key}.pub").read_text().strip()
    ec2.import_key_pair(KeyName=KEY_NAME, PublicKeyMaterial=public.encode())
    iam = server.client("iam")
    iam.create_role(
        RoleName="ray-autoscaler-v1",
        AssumeRolePolicyDocument='{"Statement": [{"Effect": "Allow", "Principal": '
        '{"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}',
    )
    iam.create_instance_profile(InstanceProfileName="ray-autoscaler-v1")
    iam.add_role_to_instance_profile(
        InstanceProfileName="ray-autoscaler-v1", RoleName="ray-autoscaler-v1"
    )
    return amazon_image(server), vpc.subnet_ids[0]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds per side (default 3)")
    parser.add_argument("--workers", type=int, default=8, help="min_workers (default 8)")
    parser.add_argument("--provider", choices=("aws",), default="aws", help="only aws so far")
    parser.add_argument("--sides", default="ray,ours", help="ray,ours (default), ray or ours")
    parser.add_argument("--logs", type=Path, help="keep every command's output here")
    parser.add_argument(
        "--upscaling-speed",
        type=float,
        help="write upscaling_speed into the cluster file (default: none, each side's default)",
    )
    args = parser.parse_args()
    if args.repeat < 1 or not 1 <= args.workers <= 40:
        raise SystemExit("bench_time_to_cluster: --repeat >= 1 and --workers 1..40")
    if (why := isolation_unavailable()) is not None:
        raise SystemExit(f"bench_time_to_cluster: {why}")
    args.chosen = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not args.chosen or not set(args.chosen) <= {"ray", "ours"}:
        raise SystemExit("bench_time_to_cluster: --sides: ray, ours or ray,ours")
    return args


def environment(server: TimedServer, work: Path) -> dict[str, str]:
    """This process's environment with the fake's endpoint and credentials, no AWS profile,
    and homes for both sides' local state under `work`."""
    env = {**os.environ, **server.env()}
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    (work / "tmp").mkdir()
    env.update(
        LAUNCHER_HOME=str(work / "launcher-home"),
        TMPDIR=str(work / "tmp"),  # Ray's cached config (ray-config-*) goes here
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONUNBUFFERED="1",
    )
    return env


def setup(stack: contextlib.ExitStack, args: argparse.Namespace) -> tuple[Bench, list[Side]]:
    """The fake, its hosts, the account, the cluster file and the watcher; what is entered
    into `stack` is closed (and the cluster cleaned up) when it closes."""
    work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ttc-")))
    log_dir = args.logs or work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    key = make_key(work / "id_ed25519")
    files = work / "files"
    files.mkdir()
    for n in range(3):
        (files / f"file{n}.txt").write_text(f"bench file {n}\n" * 100)
    server = TimedServer()
    stack.enter_context(server)
    hosts = stack.enter_context(InstanceHosts(server))
    ami, subnet = prepare_account(server, key)
    config = work / "cluster.yaml"
    config.write_text(cluster_yaml(args.workers, ami, subnet, key, files, args.upscaling_speed))
    procs = Processes(environment(server, work), server.url, log_dir)
    watcher = Watcher(server, hosts)
    watcher.start()
    stack.callback(watcher.stop)
    bench = Bench(server, hosts, watcher, procs, args.workers)
    all_sides = sides(config)
    order = [all_sides[s] for s in args.chosen]
    stack.callback(bench.clean, order)
    stack.callback(hosts.check)
    return bench, order


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    args = parse_args()
    # Ctrl-C and SIGTERM clean up (SIGINT also when started in the background by a shell,
    # which would otherwise ignore it).
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    started = time.monotonic()
    load_before = os.getloadavg()
    rounds: list[Round] = []
    with contextlib.ExitStack() as stack:
        bench, order = setup(stack, args)
        print(
            f"{args.workers} workers, {args.repeat} repeats, sides {args.sides}; logs in "
            f"{bench.procs.log_dir}; load average {load_before[0]:.2f} {load_before[1]:.2f}",
            file=sys.stderr,
        )
        try:
            for repeat in range(args.repeat):
                shift = repeat % len(order)
                for side in order[shift:] + order[:shift]:
                    result = bench.round(side)
                    rounds.append(result)
                    rows = ", ".join(f"{k} {v:.2f} s" for k, v in result.rows.items())
                    print(f"  repeat {repeat + 1} {side.label}: {rows}", file=sys.stderr)
        except BaseException:
            print("failed or interrupted: cleaning up", file=sys.stderr)
            if args.logs is None:
                kept = Path(tempfile.mkdtemp(prefix="bench-ttc-logs-"))
                shutil.copytree(bench.procs.log_dir, kept, dirs_exist_ok=True)
                print(f"the commands' output is kept in {kept}", file=sys.stderr)
            raise
    print(
        f"{args.workers} workers, repeat={args.repeat}, AWS (moto), medians (ranges); "
        f"{time.monotonic() - started:.0f} s in all; load average {load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    print(report(rounds))
    print()
    print(breakdown(rounds))


if __name__ == "__main__":
    main()
