"""SSH: setting up many hosts, and a no-op `up`, against OpenSSH client processes spawned one
per command as Ray's launcher does, measured in the same run on the same hosts (issue 5).

    sudo .venv/bin/python bench/bench_ssh.py [--quick] [--repeat N]

Needs root: every host is an sshd in its own PID and mount namespaces, with its own home
and /tmp (fakes/hosts/ssh.py `IsolatedHost`), on 127.0.7.x:22 so it never meets the tests'
hosts. All traffic stays on 127.0.0.0/8. --quick takes about a minute, the full run two.

1. Setup of N hosts (N = 1, 4, 16). On every host: sync a file_mounts directory (5 files,
   100 KB) and a single file, run 5 short setup commands and 2 start commands (`echo`, not
   `ray start`: 16 Ray nodes on 2 cores would measure CPU contention, not the launcher).
   Ours: one `NodeUpdater` per node on fresh connections, run concurrently up to the
   daemon's MAX_PARALLEL_SETUPS, as the autoscaler sets workers up. Baseline: the steps of
   Ray's NodeUpdater, one `ssh` process per command with the options Ray passes
   (ControlMaster included), `rsync -avz --rsh ssh` for file mounts, a thread per node.
   Each repeat starts from hosts without the files and from fresh node records. Wall time,
   the whole machine's CPU time (the hosts share its cores) and this process's own.
2. No-op `up` on a head and 7 workers (min_workers: 7; real Ray on the head only, `echo`
   start commands on the workers). After a first `up` and once every worker is up to date,
   `launcher up -y` again as a subprocess, timed. Baselines: (C) Ray's own `ray up -y`, no-op,
   on the same head; (A) just the SSH round trips of a no-op `ray up` (`uptime`, then the
   head's start commands, which `ray up` reruns unless --no-restart); (B) the SSH
   operations of our own no-op `up`, recorded, replayed one OpenSSH client process each.
   Then where our no-op `up` spends its time (in-process, phases and SSH operations timed).

Part 1 also times a what-if patched into this process only: ours with every copy made by
rsync (as before SFTP was used for small copies), and splits the CPU between the launcher's
side and the hosts' (the processes in their namespaces: sshd, shells, what the commands run).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import hashlib
import json
import os
import random
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

import launcher.cluster.install as install_module
import launcher.runners.ssh as ssh_module
from fakes.hosts.ssh import IsolatedHost, isolated_hosts, isolation_unavailable
from launcher.autoscaler.daemon import MAX_PARALLEL_SETUPS
from launcher.cluster import lifecycle
from launcher.config.loader import Overrides
from launcher.config.model import ClusterConfig
from launcher.events import Event, NodeProgress, ignore
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeStatus
from launcher.providers.onprem.claims import FileRecords
from launcher.providers.onprem.provider import OnPremProvider
from launcher.runners.ssh import SSHRunner
from launcher.updater.updater import NodeUpdater, UpdateOptions

FIRST_IP = "127.0.7.2"
UNUSED_HEAD_IP = "127.0.7.1"  # part 1's head: named in the config, never contacted
PART2_HOSTS = 8
SETUP_COMMANDS = (
    "mkdir -p ~/bench/x",
    'echo "setup $(hostname) $(date +%s)" >> ~/bench/x/log',
    "python3 -c 'import sys; print(sys.version_info[:2])' >> ~/bench/x/log",
    "wc -c ~/bench/data/*.txt >> ~/bench/x/log",
    "grep -q PATH ~/.bashrc && echo env-ok >> ~/bench/x/log",
)
WORKER_START = ("echo ray-stop-skipped", "echo ray-started >> ~/bench/x/started")
# Part 2's head runs real Ray, as a real cluster's does, so its autoscaler reads real demand
# (without a GCS it would log the outage and go on). Workers run no Ray. The GCS listens on
# *:6379 (the port the launcher uses for on-prem heads), so nothing else may hold it while
# part 2 runs; the other ports are our own.
HEAD_START = (
    "ray stop",
    "ray start --head --port=6379 --node-ip-address=$LAUNCHER_NODE_IP --num-cpus=1 "
    "--include-dashboard=false --dashboard-agent-listen-port=46480 "
    "--ray-client-server-port=46481 --object-store-memory=100000000 --disable-usage-stats",
    "echo head-started >> ~/bench/x/started",
)
# What a no-op `ray up` reruns on the head (its head start commands), without Ray's own work.
RAY_UP_RESTART = ("echo ray-stop-skipped", "echo ray-start-skipped")
CONFIG = """\
cluster_name: {name}
provider:
  type: local
  head_ip: {head}
  worker_ips: {workers}
auth:
  ssh_user: root
  ssh_private_key: {key}
min_workers: {min_workers}
max_workers: {max_workers}
upscaling_speed: {upscaling_speed}
idle_timeout_minutes: 5
file_mounts:
  ~/bench/data: {data}
  ~/bench/conf.txt: {conf}
setup_commands: {setup}
head_start_ray_commands: {head_start}
worker_start_ray_commands: {worker_start}
"""


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- the baseline: OpenSSH client processes as Ray's launcher spawns them -------------------
class OpenSSH:
    """One OpenSSH client process per command, with the options Ray's SSHCommandRunner
    passes (ray/autoscaler/_private/command_runner.py, `SSHOptions`, `run`,
    `run_rsync_up`): no host key checks, the key only, keepalives, and a ControlMaster
    socket per cluster kept 10 s (`ControlPersist=10s`); commands as
    `ssh -tt ... bash --login -c -i 'source ~/.bashrc; export ... && (CMD)'`, environment
    variables as `export K=V;` in front; file mounts as `mkdir -p` then
    `rsync --rsh 'ssh OPTIONS' -avz`."""

    def __init__(self, key: Path, control_dir: Path, log: Path) -> None:
        self.key = key
        self.control_dir = control_dir
        self.log = log
        control_dir.mkdir(parents=True, exist_ok=True)
        control_dir.chmod(0o700)

    def options(self, timeout: int) -> list[str]:
        settings = {
            "StrictHostKeyChecking": "no",
            "UserKnownHostsFile": os.devnull,
            "IdentitiesOnly": "yes",
            "ExitOnForwardFailure": "yes",
            "ServerAliveInterval": "5",
            "ServerAliveCountMax": "3",
            "ControlMaster": "auto",
            "ControlPath": f"{self.control_dir}/%C",
            "ControlPersist": "10s",
            "ConnectTimeout": f"{timeout}s",
        }
        return ["-i", str(self.key), *(a for k, v in settings.items() for a in ("-o", f"{k}={v}"))]

    def run(
        self, ip: str, command: str, env: Mapping[str, str] | None = None, timeout: int = 120
    ) -> None:
        """A command in a login shell, as Ray runs setup and start commands."""
        exports = "".join(
            f"export {k}={shlex.quote(json.dumps(v))};" for k, v in (env or {}).items()
        )
        wrapped = (
            "source ~/.bashrc; export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore && "
            f"({exports}{command})"
        )
        remote = ["bash", "--login", "-c", "-i", shlex.quote(wrapped)]
        self._call(["ssh", "-tt", *self.options(timeout), f"root@{ip}", *remote])

    def plain(self, ip: str, command: str) -> None:
        """A command in `sh -c`, no terminal, no login shell (replaying our quiet captures)."""
        self._call(["ssh", *self.options(120), f"root@{ip}", f"sh -c {shlex.quote(command)}"])

    def rsync(self, ip: str, source: str, target: str) -> None:
        rsh = subprocess.list2cmdline(["ssh", *self.options(120)])
        self._call(["rsync", "--rsh", rsh, "-avz", source, f"root@{ip}:{target}"])

    def _call(self, args: list[str]) -> None:
        with self.log.open("ab") as out:
            done = subprocess.run(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=False, timeout=300
            )
        if done.returncode != 0:
            raise RuntimeError(f"baseline command failed ({done.returncode}): {args[-1]}")

    def close(self, ips: Sequence[str]) -> None:
        """End the ControlMaster processes (after the timing)."""
        for ip in ips:
            subprocess.run(
                ["ssh", "-o", f"ControlPath={self.control_dir}/%C", "-O", "exit", f"root@{ip}"],
                capture_output=True,
                check=False,
                timeout=30,
            )


def ray_node_update(ssh: OpenSSH, ip: str, mounts: Mapping[str, Path], head_ip: str) -> None:
    """What Ray's NodeUpdater runs over SSH to set a new worker up (updater.py do_update):
    `uptime` until it answers, each file mount, setup commands, start commands."""
    ssh.run(ip, "uptime", timeout=10)
    for remote, local in mounts.items():
        source, target = str(local), remote
        if local.is_dir():
            source, target = f"{local}/", f"{remote}/"
        ssh.run(ip, f"mkdir -p {os.path.dirname(target)}")
        ssh.rsync(ip, source, target)
    for command in SETUP_COMMANDS:
        ssh.run(ip, command)
    for command in WORKER_START:
        ssh.run(ip, command, {"RAY_HEAD_IP": head_ip})


# -- the machines ---------------------------------------------------------------------------
@dataclass
class Lab:
    tmp: Path
    key: Path
    hosts: list[IsolatedHost]
    data: Path
    conf: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def mounts(self) -> dict[str, Path]:
        return {"~/bench/data": self.data, "~/bench/conf.txt": self.conf}

    def write_config(self, name: str, head: str, workers: Sequence[str], min_workers: int) -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(
            CONFIG.format(
                name=name,
                head=head,
                workers=json.dumps(list(workers)),
                key=self.key,
                min_workers=min_workers,
                max_workers=len(workers),
                # Workers without Ray never count as started, so with upscaling_speed 1 the
                # autoscaler would start only 5 of the 7 (max(5, 1 x running nodes)).
                upscaling_speed=10,
                data=self.data,
                conf=self.conf,
                setup=json.dumps(list(SETUP_COMMANDS)),
                head_start=json.dumps(list(HEAD_START)),
                worker_start=json.dumps(list(WORKER_START)),
            )
        )
        return path

    def reset(self, hosts: Sequence[IsolatedHost]) -> None:
        """Hosts without the benchmark's files, as new machines."""
        for host in hosts:
            shutil.rmtree(host.path("~/bench"), ignore_errors=True)

    def check_set_up(self, hosts: Sequence[IsolatedHost]) -> None:
        for host in hosts:
            started = host.path("~/bench/x/started")
            copied = host.path("~/bench/data/f4.txt")
            if (
                not started.exists()
                or not copied.exists()
                or not host.path("~/bench/conf.txt").exists()
            ):
                raise RuntimeError(f"{host.ip} was not set up")


@contextlib.contextmanager
def lab(count: int) -> Iterator[Lab]:
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as name:
        tmp = Path(name)
        key = tmp / "id_ed25519"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
            check=True,
            capture_output=True,
        )
        data = tmp / "mounts" / "data"
        data.mkdir(parents=True)
        rng = random.Random(5)
        for index in range(5):  # 5 x 20 KB
            text = "".join(rng.choice("abcdefghij \n") for _ in range(20_000))
            (data / f"f{index}.txt").write_text(text)
        conf = tmp / "mounts" / "conf.txt"
        conf.write_text("setting: 1\n")
        os.environ["LAUNCHER_HOME"] = str(tmp / "launcher-home")
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        with isolated_hosts(key, FIRST_IP, count) as hosts:
            yield Lab(tmp, key, hosts, data, conf, env)


# -- part 1: setup of N hosts ---------------------------------------------------------------
@dataclass(frozen=True)
class Cost:
    wall: float
    machine_cpu: float  # CPU seconds of the whole machine (/proc/stat): hosts included
    client_cpu: float  # CPU seconds of this process and the children it waited for
    hosts_cpu: float  # CPU seconds of the hosts' processes (sshd and what it ran)


def machine_cpu_s() -> float:
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def client_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def hosts_cpu_s(hosts: Sequence[IsolatedHost]) -> float:
    """CPU time of every process in the hosts' PID namespaces, those that ended included
    (an ended process's time is in its parent's, once reaped)."""
    ticks = 0
    for host in hosts:
        for pid in host.processes():
            with contextlib.suppress(OSError, ValueError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                ticks += sum(int(f) for f in stat.rsplit(")", 1)[1].split()[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(work: Callable[[], object], hosts: Sequence[IsolatedHost]) -> Cost:
    machine, client, host = machine_cpu_s(), client_cpu_s(), hosts_cpu_s(hosts)
    started = time.perf_counter()
    work()
    wall = time.perf_counter() - started
    time.sleep(0.2)  # the hosts' sessions end and are reaped
    return Cost(wall, machine_cpu_s() - machine, client_cpu_s() - client, hosts_cpu_s(hosts) - host)


# The what-if, patched in this process only (launcher/ is not changed): every copy by rsync,
# as before small copies went over SFTP on the open connection (each rsync runs an OpenSSH
# client that makes a new connection: a post-quantum key exchange here, ~185 ms, ~95 ms CPU).
LABELS = {"ours": "ours", "base": "OpenSSH per command", "rsync": "ours, copies by rsync"}


@contextlib.contextmanager
def all_copies_by_rsync() -> Iterator[None]:
    with mock.patch.object(ssh_module, "sftp_is_cheaper", lambda size, trip: False):
        yield


def setup_ours(lab: Lab, config: ClusterConfig, count: int, tag: str) -> Cost:
    """Workers set up the way the autoscaler's daemon does it: a NodeUpdater per node in its
    own thread, at most MAX_PARALLEL_SETUPS at a time, fresh SSH connections."""
    provider = OnPremProvider(config, on_head=True)
    records = FileRecords(config.cluster_name)
    records.root = lab.tmp / "records" / tag  # fresh node records: setup really runs
    provider.records = records
    head = provider.create_nodes(config.head_type, NodeKind.HEAD, 1, {})[0]
    worker_type = config.node_types["ray.worker.default"]
    nodes = provider.create_nodes(
        worker_type, NodeKind.WORKER, count, {TAG_STATUS: NodeStatus.UNINITIALIZED}
    )
    options = UpdateOptions(cwd=lab.tmp)

    def update(node: Node) -> None:
        listed = {n.id: n for n in provider.nodes()}  # as the daemon's _update does
        NodeUpdater(provider, config, listed[node.id], head, options, ignore).run()

    def all_nodes() -> None:
        with ThreadPoolExecutor(max_workers=MAX_PARALLEL_SETUPS) as pool:
            list(pool.map(update, nodes))

    try:
        cost = measure(all_nodes, lab.hosts[:count])
    finally:
        provider.ssh.close()
    statuses = {n.status for n in provider.workers()}
    if statuses != {NodeStatus.UP_TO_DATE}:
        raise RuntimeError(f"setup of {count} hosts ended with {statuses}")
    return cost


def setup_baseline(lab: Lab, count: int, tag: str) -> Cost:
    """The same work as Ray's launcher does it: one updater thread per node (no bound), each
    spawning an OpenSSH client per command."""
    ips = [h.ip for h in lab.hosts[:count]]
    ssh = OpenSSH(lab.key, lab.tmp / "cm" / tag, lab.tmp / "openssh.log")

    def all_nodes() -> None:
        with ThreadPoolExecutor(max_workers=count) as pool:
            futures = [
                pool.submit(ray_node_update, ssh, ip, lab.mounts, UNUSED_HEAD_IP) for ip in ips
            ]
            for future in futures:
                future.result()

    try:
        return measure(all_nodes, lab.hosts[:count])
    finally:
        ssh.close(ips)


SetupResults = dict[int, dict[str, list[Cost]]]


def bench_setup(lab: Lab, sizes: Sequence[int], repeats: int) -> SetupResults:
    ips = [h.ip for h in lab.hosts[: max(sizes)]]
    path = lab.write_config("bench-ssh-setup", UNUSED_HEAD_IP, ips, 0)
    config, _ = lifecycle.load_for_command(str(path), Overrides())
    results: SetupResults = {}
    for count in sizes:
        runs: dict[str, list[Cost]] = {key: [] for key in LABELS}
        for repeat in range(repeats):
            order = list(LABELS)
            for which in order[repeat % len(order) :] + order[: repeat % len(order)]:
                lab.reset(lab.hosts[:count])
                tag = f"{count}-{repeat}-{which}"
                if which == "base":
                    runs[which].append(setup_baseline(lab, count, tag))
                elif which == "rsync":
                    with all_copies_by_rsync():
                        runs[which].append(setup_ours(lab, config, count, tag))
                else:
                    runs[which].append(setup_ours(lab, config, count, tag))
                lab.check_set_up(lab.hosts[:count])
        results[count] = runs
        spread = "; ".join(f"{LABELS[k]} {_spread(v)}" for k, v in runs.items())
        print(f"  setup of {count:2d} hosts: {spread}", flush=True)
    lab.reset(lab.hosts[:1])
    recorder = Recorder(lab.tmp / "replay")
    with recorder.installed():
        setup_ours(lab, config, 1, "recorded")
    print("  ours, 1 host, SSH operations in order:")
    print_ops(recorder.ops, show_phase=False)
    return results


def _spread(values: Sequence[Cost]) -> str:
    return ", ".join(f"{v.wall:.2f}" for v in values) + " s"


def _median(runs: Sequence[Cost], what: str) -> float:
    return median([getattr(run, what) for run in runs])


def report_setup(results: SetupResults) -> None:
    rows = []
    for count, runs in sorted(results.items()):
        wall = {k: _median(v, "wall") for k, v in runs.items()}
        rows.append(
            [
                str(count),
                *(f"{wall[k]:.2f} s ({wall[k] / wall['base']:.2f}x)" for k in LABELS),
                *(
                    " / ".join(f"{_median(runs[k], what):.2f}" for k in LABELS)
                    for what in ("machine_cpu", "client_cpu", "hosts_cpu")
                ),
            ]
        )
    headers = [
        "hosts",
        *(f"{label} (/ OpenSSH)" for label in LABELS.values()),
        "machine CPU-s (same order)",
        "launcher-side CPU-s",
        "hosts' CPU-s",
    ]
    print(table(headers, rows))
    low, high = min(results), max(results)
    for key, label in LABELS.items():
        ratio = _median(results[high][key], "wall") / _median(results[low][key], "wall")
        target = f" (target under 1.5x: {'met' if ratio < 1.5 else 'MISSED'})"
        print(f"time({high}) / time({low}), {label}: {ratio:.2f}x{target if key == 'ours' else ''}")
    cores = os.cpu_count() or 1
    busy = ", ".join(
        f"{LABELS[k]} {_median(v, 'machine_cpu') / (cores * _median(v, 'wall')):.0%}"
        for k, v in results[high].items()
    )
    print(f"machine busy during the {high}-host runs (of {cores} cores): {busy}")
    ours = results[high]["ours"]
    floor = (_median(ours, "client_cpu") + _median(ours, "hosts_cpu")) / cores
    print(
        f"ours, {high} hosts: the launcher's and the hosts' CPU alone take {floor:.2f} s on "
        f"{cores} cores, {floor / _median(results[low]['ours'], 'wall'):.1f}x time({low}); per "
        f"host {1000 * _median(ours, 'client_cpu') / high:.0f} ms launcher-side, "
        f"{1000 * _median(ours, 'hosts_cpu') / high:.0f} ms on the host"
    )
    if high > MAX_PARALLEL_SETUPS:
        print(
            f"note: MAX_PARALLEL_SETUPS is {MAX_PARALLEL_SETUPS}, below {high}: the daemon "
            f"sets up at most {MAX_PARALLEL_SETUPS} workers at a time"
        )


# -- part 2: a no-op `up` on 8 hosts --------------------------------------------------------
def launcher_cli(lab: Lab, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        env=lab.env,
        cwd=lab.tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def first_up(lab: Lab, path: Path, timeout_s: float) -> None:
    """`launcher up`, then wait until every node is up to date (the autoscaler sets the
    workers up)."""
    result = launcher_cli(lab, "up", "-y", str(path))
    if result.returncode != 0:
        raise RuntimeError(f"first up failed: {result.stdout}{result.stderr}")
    deadline = time.monotonic() + timeout_s
    while True:
        status = launcher_cli(lab, "status", "--json", str(path), timeout=120)
        if status.returncode == 0:
            nodes = json.loads(status.stdout)["nodes"]
            ready = sum(n["status"] == "up-to-date" for n in nodes)
            if ready == PART2_HOSTS:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers not up to date after {timeout_s:g} s: {status.stdout}")
        time.sleep(1.0)


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def noop_up_cli(lab: Lab, path: Path) -> float:
    started = time.perf_counter()
    result = launcher_cli(lab, "up", "-y", str(path))
    elapsed = time.perf_counter() - started
    output = result.stdout + result.stderr
    if result.returncode != 0 or "reused" not in output or "running" not in output:
        raise RuntimeError(f"no-op up did not reuse the cluster: {output}")
    return elapsed


@dataclass
class Op:
    """One SSH operation our `up` made."""

    kind: str  # run | capture | rsync | home | connect
    host: str
    what: str
    seconds: float
    phase: str
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""


PHASES = {  # what `up` calls, in order: (module, attribute) -> label
    (lifecycle, "load_for_command"): "load and validate the config",
    (lifecycle, "make_provider"): "make the provider",
    (OnPremProvider, "bootstrap"): "bootstrap: wait for SSH on the head",
    (lifecycle, "_head"): "find the head (read the node records)",
    (NodeUpdater, "run"): "head updater (decides there is nothing to do)",
    (lifecycle, "connect"): "connect to the head (read the node records)",
    (lifecycle, "install_on_head"): "install_on_head: the launcher on the head",
    (install_module, "build_wheel"): "  of which build_wheel (hash the package, local)",
    (lifecycle, "place_ssh_access"): "place_ssh_access: key and host keys to the head",
    (lifecycle, "ensure_daemon"): "ensure_daemon: autoscaler running?",
    (lifecycle, "wait_for_min_workers"): "wait_for_min_workers (read the node records)",
}


class Recorder:
    """Times `up`'s phases and every SSH operation it makes, in this process."""

    def __init__(self, replay_dir: Path) -> None:
        self.phases: dict[str, float] = {}
        self.ops: list[Op] = []
        self.phase = "other"
        self.providers: list[Any] = []
        self.replay_dir = replay_dir
        replay_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for (owner, name), label in PHASES.items():
                original = getattr(owner, name)
                stack.enter_context(mock.patch.object(owner, name, self._phase(label, original)))
            for name, kind in (("run", "run"), ("capture", "capture")):
                original = getattr(SSHRunner, name)
                stack.enter_context(mock.patch.object(SSHRunner, name, self._op(kind, original)))
            stack.enter_context(
                mock.patch.object(SSHRunner, "_connect", self._connect(SSHRunner._connect))
            )
            stack.enter_context(
                mock.patch.object(SSHRunner, "_remote_home", self._home(SSHRunner._remote_home))
            )
            stack.enter_context(
                mock.patch.object(
                    ssh_module, "copy_over_rsync", self._rsync(ssh_module.copy_over_rsync)
                )
            )
            yield

    def _phase(self, label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            outer, self.phase = self.phase, label.strip()
            started = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                self.phases[label] = self.phases.get(label, 0.0) + time.perf_counter() - started
                self.phase = outer
            if label == PHASES[(lifecycle, "make_provider")]:
                self.providers.append(result)
            return result

        return timed

    def _op(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(runner: SSHRunner, command: str, *args: Any, **kwargs: Any) -> Any:
            given = (args[0] if args else kwargs.get("env")) if kind == "run" else None
            env = {**runner.base_env, **(given or {})}
            started = time.perf_counter()
            try:
                return original(runner, command, *args, **kwargs)
            finally:
                seconds = time.perf_counter() - started
                self.ops.append(Op(kind, runner.target.host, command, seconds, self.phase, env=env))

        return timed

    def _connect(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(runner: SSHRunner) -> Any:
            before = runner._client
            started = time.perf_counter()
            client = original(runner)
            if client is not before:
                seconds = time.perf_counter() - started
                self.ops.append(Op("connect", runner.target.host, "", seconds, self.phase))
            return client

        return timed

    def _home(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(runner: SSHRunner) -> Any:
            fresh = runner._home is None
            started = time.perf_counter()
            home = original(runner)
            if fresh:
                seconds = time.perf_counter() - started
                self.ops.append(Op("home", runner.target.host, "sftp", seconds, self.phase))
            return home

        return timed

    def _rsync(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(target: Any, known: Path, source: str, dest: str, *args: Any, **kw: Any) -> Any:
            kept = self.replay_dir / f"{len(self.ops)}-{Path(source).name}"
            if Path(source).is_dir():  # the replay copies the same bytes
                shutil.copytree(source, kept)
            else:
                shutil.copy(source, kept)
            tail = "/" if source.endswith("/") else ""
            started = time.perf_counter()
            try:
                return original(target, known, source, dest, *args, **kw)
            finally:
                seconds = time.perf_counter() - started
                self.ops.append(
                    Op("rsync", target.host, dest, seconds, self.phase, source=str(kept) + tail)
                )

        return timed


def noop_up_in_process(lab: Lab, path: Path) -> tuple[float, Recorder]:
    recorder = Recorder(lab.tmp / "replay")
    head_events: list[str] = []

    def sink(event: Event) -> None:
        if isinstance(event, NodeProgress) and event.kind == "head":
            head_events.append(event.stage)

    with recorder.installed():
        started = time.perf_counter()
        try:
            lifecycle.up(str(path), Overrides(), lifecycle.UpOptions(), sink, lambda q: True)
        finally:
            elapsed = time.perf_counter() - started
            for provider in recorder.providers:
                provider.ssh.close()
    if head_events != ["up to date (nothing to do)"]:
        raise RuntimeError(f"the in-process up was not a no-op on the head: {head_events}")
    return elapsed, recorder


def replay(lab: Lab, ops: Sequence[Op], tag: str) -> float:
    """Baseline B: our no-op `up`'s SSH operations, one OpenSSH client process each."""
    ssh = OpenSSH(lab.key, lab.tmp / "cm" / tag, lab.tmp / "openssh.log")
    try:
        started = time.perf_counter()
        for op in ops:
            if op.kind == "run":
                ssh.run(op.host, op.what, op.env)
            elif op.kind == "capture":
                ssh.plain(op.host, op.what)
            elif op.kind == "rsync":
                ssh.rsync(op.host, op.source, op.what)
            elif op.kind == "home":
                ssh.plain(op.host, "pwd")
        return time.perf_counter() - started
    finally:
        ssh.close(sorted({op.host for op in ops}))


def ray_noop_up(lab: Lab, head_ip: str, tag: str, restart: bool = True) -> float:
    """Baseline A: the SSH round trips of a no-op `ray up` on an unchanged cluster
    (commands.py get_or_create_head_node, updater.py do_update): the head updater's
    `uptime`; file mounts and setup skipped (the runtime hash matches the head's tags, read
    from the provider, no SSH); then, unless --no-restart, each head start command with
    Ray's environment. Workers are not contacted: the autoscaler on the head owns them."""
    ssh = OpenSSH(lab.key, lab.tmp / "cm" / tag, lab.tmp / "openssh.log")
    env = {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_enable_autoscaler_v2": "1",
        "RAY_CLOUD_INSTANCE_ID": head_ip,
        "RAY_NODE_TYPE_NAME": "local.cluster.node",
    }
    try:
        started = time.perf_counter()
        ssh.run(head_ip, "uptime", timeout=10)
        if restart:
            for command in RAY_UP_RESTART:
                ssh.run(head_ip, command, env)
        return time.perf_counter() - started
    finally:
        ssh.close([head_ip])


class RayCLI:
    """Ray's own `ray up`, as a user runs it, on a Ray cluster (local provider) whose head is
    the same machine as ours: baseline (C). Its state and config cache go to a directory of
    ours (TMPDIR); its SSH ControlMaster socket is where Ray puts it, under /tmp/ray_ssh_*,
    removed at the end."""

    name = "bench-ssh-ray"

    def __init__(self, lab: Lab, head: str, workers: Sequence[str]) -> None:
        self.lab, self.head = lab, head
        self.path = lab.tmp / f"{self.name}.yaml"
        text = lab.write_config(self.name, head, workers, len(workers)).read_text()
        ours = json.dumps(list(HEAD_START))
        assert ours in text
        # The same cluster, except that the head starts no Ray (ours runs there already).
        self.path.write_text(text.replace(ours, json.dumps(list(RAY_UP_RESTART))))
        temp = lab.tmp / "ray-tmp"
        temp.mkdir(exist_ok=True)
        self.env = {**lab.env, "TMPDIR": str(temp)}
        user = hashlib.sha256(getpass.getuser().encode()).hexdigest()[:10]
        cluster = hashlib.sha256(self.name.encode()).hexdigest()[:10]
        self.control = Path(f"/tmp/ray_ssh_{user}/{cluster}")  # Ray's SSHCommandRunner

    def up(self) -> tuple[float, str]:
        self.close_master()  # a cold start, as for a `ray up` run more than 10 s after the last
        started = time.perf_counter()
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ray"), "up", "-y", str(self.path)],
            env=self.env,
            cwd=self.lab.tmp,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"ray up failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        return elapsed, done.stdout + done.stderr

    def noop_up(self) -> float:
        elapsed, output = self.up()
        if "Configuration already up to date" not in output:
            raise RuntimeError(f"ray up was not a no-op: {output[-2000:]}")
        return elapsed

    def close_master(self) -> None:
        subprocess.run(
            ["ssh", "-o", f"ControlPath={self.control}/%C", "-O", "exit", f"root@{self.head}"],
            capture_output=True,
            check=False,
            timeout=30,
        )

    def close(self) -> None:
        self.close_master()
        shutil.rmtree(self.control, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.control.parent.rmdir()  # only when no other cluster's socket is there


NOOP_RUNS = ("cli", "inproc", "ray_cli", "a", "a_norestart", "b")


def bench_noop(lab: Lab, repeats: int, ready_timeout_s: float) -> dict[str, Any]:
    hosts = lab.hosts[:PART2_HOSTS]
    if not port_free(6379):
        raise RuntimeError(
            "port 6379 is in use (another Ray head, e.g. tests/test_onprem.py?); part 2 runs "
            "a Ray head there: rerun when it is free"
        )
    lab.reset(hosts)
    head, workers = hosts[0].ip, [h.ip for h in hosts[1:]]
    path = lab.write_config("bench-ssh-noop", head, workers, len(workers))
    started = time.perf_counter()
    first_up(lab, path, ready_timeout_s)
    print(f"  first up and {len(workers)} workers ready: {time.perf_counter() - started:.1f} s")
    ray = RayCLI(lab, head, workers)
    times: dict[str, list[float]] = {name: [] for name in NOOP_RUNS}
    recorders: list[Recorder] = []
    try:
        print(f"  first `ray up` (head only; not timed): {ray.up()[0]:.1f} s")
        for repeat in range(repeats):
            recorders.append(noop_round(lab, path, ray, times, repeat))
    finally:
        ray.close()
    if hosts[0].path("~/bench/x/started").read_text().count("head-started") != 1:
        raise RuntimeError("the no-op up restarted the head")
    return {"times": times, "recorders": recorders, "imports": import_times(lab)}


def noop_round(
    lab: Lab, path: Path, ray: RayCLI, times: dict[str, list[float]], repeat: int
) -> Recorder:
    times["cli"].append(noop_up_cli(lab, path))
    elapsed, recorder = noop_up_in_process(lab, path)
    times["inproc"].append(elapsed)
    times["ray_cli"].append(ray.noop_up())
    times["a"].append(ray_noop_up(lab, ray.head, f"a-{repeat}"))
    times["a_norestart"].append(ray_noop_up(lab, ray.head, f"a1-{repeat}", restart=False))
    times["b"].append(replay(lab, recorder.ops, f"b-{repeat}"))
    print(
        f"  no-op up {repeat + 1}: "
        + ", ".join(f"{key} {values[-1]:.2f} s" for key, values in times.items()),
        flush=True,
    )
    return recorder


def import_times(lab: Lab, repeats: int = 3) -> dict[str, Any]:
    """Interpreter start and imports, as a CLI pays them before any work."""

    def timed(code: str) -> float:
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=lab.env, check=True)
            runs.append(time.perf_counter() - started)
        return median(runs)

    ours = (
        "import launcher.cli.main, launcher.cluster.lifecycle, launcher.providers.onprem.provider"
    )
    profile = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", ours],
        env=lab.env,
        capture_output=True,
        text=True,
        check=True,
    )
    packages: dict[str, int] = {}  # top-level packages (at any depth) -> cumulative us
    for line in profile.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].strip()
            if "." not in name and name != "launcher" and not name.startswith("_"):
                packages[name] = max(packages.get(name, 0), int(parts[1]))
    biggest = sorted(packages.items(), key=lambda kv: -kv[1])[:6]
    return {
        "python": timed("pass"),
        "ours": timed(ours),
        "ray_cli": timed("import ray.scripts.scripts"),
        "biggest": biggest,
    }


def report_noop(found: dict[str, Any]) -> None:
    times, imports = found["times"], found["imports"]
    cli = median(times["cli"])
    rows = [
        ["`launcher up -y` (CLI subprocess, no-op)", f"{cli:.2f} s", "1.00x"],
        ["the same `up` in-process (no interpreter start)", f"{median(times['inproc']):.2f} s", ""],
    ]
    for key, label in (
        ("ray_cli", "(C) `ray up -y`, Ray's CLI, no-op, cold SSH master"),
        ("a", "(A) no-op `ray up` SSH sequence: uptime + 2 head start commands"),
        ("a_norestart", "(A') no-op `ray up --no-restart` SSH sequence: uptime"),
        ("b", "(B) our `up`'s SSH operations, one OpenSSH process each"),
    ):
        value = median(times[key])
        rows.append([label, f"{value:.2f} s", f"{cli / value:.2f}x"])
    print(table(["what (8 hosts: head + 7 workers)", "median", "ours CLI / this"], rows))
    verdict = "met" if cli < 2.0 else "MISSED"
    print(f"no-op up: {cli:.2f} s (target under 2 s: {verdict})")
    print(
        f"interpreter start {imports['python']:.2f} s; with our CLI's imports "
        f"{imports['ours']:.2f} s; with Ray's CLI imports (not in baseline A) "
        f"{imports['ray_cli']:.2f} s"
    )
    print("biggest packages our CLI imports (cumulative, nested ones counted in both):")
    for name, micros in imports["biggest"]:
        print(f"  {name}: {micros / 1e6:.3f} s")
    report_breakdown(found["recorders"])


def report_breakdown(recorders: Sequence[Recorder]) -> None:
    rows = []
    for label in PHASES.values():
        values = [r.phases.get(label, 0.0) for r in recorders]
        ops = [o for o in recorders[-1].ops if o.phase == label.strip() and o.kind != "connect"]
        kinds = ", ".join(
            f"{sum(o.kind == k for o in ops)} {k}"
            for k in ("run", "capture", "rsync", "home")
            if any(o.kind == k for o in ops)
        )
        rows.append([label, f"{median(values) * 1000:.0f} ms", kinds or "-"])
    print(table(["phase of the in-process no-op `up`", "median", "SSH operations"], rows))
    print("SSH operations of the last in-process no-op `up` (in order):")
    print_ops(recorders[-1].ops)


def print_ops(ops: Sequence[Op], show_phase: bool = True) -> None:
    for op in ops:
        what = op.what if len(op.what) < 70 else op.what[:67] + "..."
        phase = f"  [{op.phase}]" if show_phase else ""
        print(f"  {op.seconds * 1000:6.0f} ms  {op.kind:8s} {op.host:10s} {what!r}{phase}")
    counts: dict[str, list[float]] = {}
    for op in ops:
        counts.setdefault(op.kind, []).append(op.seconds)
    print(
        "  totals: "
        + ", ".join(f"{len(v)} {k} {sum(v) * 1000:.0f} ms" for k, v in sorted(counts.items()))
        + " (a connect is inside the run/capture that needed it)"
    )


# -- main -----------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats (<2 min)")
    parser.add_argument("--repeat", type=int, help="repeats per measurement (default 5; 2 quick)")
    parser.add_argument(
        "--only", choices=("setup", "noop"), help="run one part: setup of N hosts, or no-op up"
    )
    args = parser.parse_args()
    reason = isolation_unavailable()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # unwinds, so every host is closed

    signal.signal(signal.SIGTERM, stop)
    sizes = (1, 16) if args.quick else (1, 4, 16)
    repeats = args.repeat or (2 if args.quick else 5)
    print(
        f"{os.cpu_count()} cores; MAX_PARALLEL_SETUPS={MAX_PARALLEL_SETUPS}; "
        f"sizes {sizes}; {repeats} repeats",
        flush=True,
    )
    setup, noop = None, None
    with lab(PART2_HOSTS if args.only == "noop" else max(*sizes, PART2_HOSTS)) as machines:
        if args.only in (None, "setup"):
            print("1. setup of N hosts: file mounts (100 KB) + 5 setup + 2 start commands each")
            setup = bench_setup(machines, sizes, repeats)
        if args.only in (None, "noop"):
            print(f"2. no-op up on {PART2_HOSTS} hosts (head + {PART2_HOSTS - 1} workers)")
            noop = bench_noop(machines, max(repeats, 3), 120 if args.quick else 300)
    if setup is not None:
        print()
        report_setup(setup)
    if noop is not None:
        print()
        report_noop(noop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
