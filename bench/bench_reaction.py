"""Time how fast an autoscaler reacts to a task no node can run: a {CPU: 4} task on a cluster
whose head has 1 CPU and whose worker type has 4 (min_workers 0, max_workers 2). Measured
from the task's submission to (a) the autoscaler asking its provider for a worker and (b) the
task running, for ours (`launcher up` on the localhost provider, driver run with `launcher
submit`) and for Ray's own autoscaler (`RAY_FAKE_CLUSTER=1 ray start --head
--autoscaling-config=...` with the fake_multinode provider) in the same run. Prints each
repeat, the medians, the ratios ours/Ray and where the time goes on each side.

    sudo .venv/bin/python bench/bench_reaction.py [--repeat 3] [--ray-interval SECONDS]

Needs root: Ray's cluster runs in a network namespace of its own with only loopback up
(its fake provider insists on port 6379 and the node's own address), created and deleted
by this script. Each side starts a fresh cluster per repeat and is taken down before the
next; both autoscalers run with their default tick (ours 1 s, Ray's 5 s) unless
`--ray-interval` sets Ray's `AUTOSCALER_UPDATE_INTERVAL_S`. Each repeat submits at a
different phase of both ticks, so neither side is timed only just before or just after one
of its ticks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from bench.common import wait_for

BIN = Path(sys.executable).parent
LAUNCHER = str(BIN / "launcher")
RAY = str(BIN / "ray")
OBJECT_STORE_BYTES = 256 * 2**20  # what the localhost provider gives each node
SETTLE_S = 5.0  # after the autoscaler's first tick, before submitting
PHASE_PERIOD_S = 5.0  # Ray's default tick; submissions are spread over one period
CLUSTER = "bench-reaction"
WAIT_S = 120.0  # at most, for an autoscaler's first tick

OURS_CONFIG = f"""\
cluster_name: {CLUSTER}
max_workers: 2
idle_timeout_minutes: 1
provider: {{type: localhost}}
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {{}}, resources: {{CPU: 4}}, min_workers: 0, max_workers: 2}}
head_node_type: head
"""

# Ray's fake provider names the head's type itself (ray.head.default) and starts workers
# with the resources given here; the head's come from `ray start`'s flags.
RAY_CONFIG = f"""\
cluster_name: {CLUSTER}-ray
max_workers: 2
idle_timeout_minutes: 1
upscaling_speed: 1.0
provider:
  type: fake_multinode
  use_node_id_as_ip: true
  disable_node_updaters: true
  disable_launch_config_check: true
available_node_types:
  ray.head.default: {{node_config: {{}}, resources: {{CPU: 1}}, max_workers: 0}}
  worker:
    node_config: {{}}
    resources: {{CPU: 4, object_store_memory: {OBJECT_STORE_BYTES}}}
    min_workers: 0
    max_workers: 2
head_node_type: ray.head.default
auth: {{}}
docker: {{}}
initialization_commands: []
setup_commands: []
head_setup_commands: []
worker_setup_commands: []
head_start_ray_commands: []
worker_start_ray_commands: []
file_mounts: {{}}
cluster_synced_files: []
file_mounts_sync_continuously: false
rsync_exclude: []
rsync_filter: []
"""

# Run by both sides' drivers. Times are time.time() on this machine, shared by every node.
DRIVER = """\
import json
import time

import ray
from ray._raylet import GcsClient
from ray.autoscaler.v2.sdk import get_cluster_resource_state

ray.init(logging_level="WARNING")
gcs = GcsClient(address=ray.get_runtime_context().gcs_address)


@ray.remote(num_cpus=4)
def started():
    return time.time()


def alive():
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


before = alive()
times = {"submitted": time.time()}
ref = started.remote()
while True:
    ready, _ = ray.wait([ref], timeout=0.05)
    now = time.time()
    if "demand" not in times and get_cluster_resource_state(gcs).pending_resource_requests:
        times["demand"] = now
    if "joined" not in times and (ready or alive() - before):
        times["joined"] = now
    if ready:
        break
times["running"] = ray.get(ref)
print("BENCH " + json.dumps(times), flush=True)
"""

# (label, key) of the figures printed; times are seconds after the submission.
OURS_ROWS = [
    ("demand visible in Ray's GCS (driver polls)", "demand"),
    ("(a) worker requested: node.json created", "requested"),
    ("setup started: node left `uninitialized`", "setup"),
    ("`starting-ray` stage entered", "starting_ray"),
    ("worker's `ray start` first log line", "ray_start_first"),
    ("worker's `ray start` done (`Ray runtime started.`)", "ray_started"),
    ("worker seen alive in ray.nodes() (driver polls)", "joined"),
    ("(b) task running", "running"),
]
RAY_ROWS = [
    ("demand visible in Ray's GCS (driver polls)", "demand"),
    ("(a) worker requested: `Queue 1 new nodes for launch`", "requested"),
    ("fake node started: `Launching 1 nodes` (after create)", "node_started"),
    ("worker seen alive in ray.nodes() (driver polls)", "joined"),
    ("(b) task running", "running"),
]

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\s")

Times = dict[str, float]


def stamps(path: Path, pattern: str) -> list[float]:
    """Epoch times of the lines of a Ray log (local-time `YYYY-mm-dd HH:MM:SS,mmm`) that
    contain `pattern`."""
    found = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            match = _STAMP.match(line)
            if match and re.search(pattern, line):
                seconds = time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S"))
                found.append(seconds + int(match[2]) / 1000)
    return found


def bench_line(output: str) -> Times:
    for line in output.splitlines():
        if line.startswith("BENCH "):
            return {k: float(v) for k, v in json.loads(line[6:]).items()}
    raise RuntimeError(f"the driver printed no BENCH line:\n{output[-3000:]}")


def run(*args: str, env: dict[str, str], timeout: float = 300) -> str:
    result = subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited with {result.returncode}:\n"
            f"{(result.stdout + result.stderr)[-3000:]}"
        )
    return result.stdout


class WorkerWatcher:
    """Polls the localhost provider's node records and notes when the first worker appears
    and when it enters each setup stage (the updater keeps the stage in node.json)."""

    def __init__(self, nodes_dir: Path) -> None:
        self.nodes_dir = nodes_dir
        self.created: float | None = None
        self.node_id: str | None = None
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> WorkerWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _poll(self) -> None:
        while not self.stop.wait(0.05):
            now = time.time()
            records = []
            for path in self.nodes_dir.glob("w-*/node.json"):
                with contextlib.suppress(OSError, ValueError):
                    records.append(json.loads(path.read_text()))
            if not records:
                continue
            first = min(records, key=lambda r: float(r["created_at"]))
            if self.node_id is None:
                self.node_id, self.created = first["id"], float(first["created_at"])
            if first["id"] == self.node_id:
                self.seen.setdefault(first["tags"].get("launcher-node-status", "?"), now)


def ours(work: Path, phase_s: float) -> Times:
    home = work / "launcher-home"
    env = dict(os.environ, LAUNCHER_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    config, driver = work / "ours.yaml", work / "driver.py"
    nodes_dir = home / "clusters" / CLUSTER / "localhost" / "nodes"
    try:
        run(LAUNCHER, "up", "-y", str(config), env=env)
        state = "h-*/home/.launcher/head/autoscaler-state.json"
        wait_for(lambda: any(nodes_dir.glob(state)), "our autoscaler's first tick", WAIT_S)
        time.sleep(SETTLE_S + phase_s)
        with WorkerWatcher(nodes_dir) as watcher:
            times = bench_line(run(LAUNCHER, "submit", str(config), str(driver), env=env))
        if watcher.node_id is None:
            raise RuntimeError("the task ran, but no worker of ours was seen")
        setup_log = home / "clusters" / CLUSTER / "logs" / f"{watcher.node_id}.log"
        first_lines = stamps(setup_log, "Local node IP")
        started = stamps(setup_log, "Ray runtime started")
        later = [t for s, t in watcher.seen.items() if s not in ("uninitialized", "?")]
        extra = {
            "requested": watcher.created,
            "setup": min(later, default=None),
            "starting_ray": watcher.seen.get("starting-ray"),
            "ray_start_first": first_lines[0] if first_lines else None,
            "ray_started": started[0] if started else None,
        }
        times.update({k: v for k, v in extra.items() if v is not None})
        return times
    finally:
        down = subprocess.run(
            [LAUNCHER, "down", "-y", str(config)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if down.returncode != 0:
            print(f"warning: `launcher down` failed:\n{down.stdout}{down.stderr}", file=sys.stderr)
        shutil.rmtree(home, ignore_errors=True)


def namespace_pids(name: str) -> list[int]:
    result = subprocess.run(
        ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
    )
    return [int(p) for p in result.stdout.split()]


@contextlib.contextmanager
def namespace(name: str) -> Iterator[None]:
    """A network namespace with only loopback up; on exit every process in it (all started
    here) is stopped, by pid, and the namespace deleted."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield
    finally:
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            pids = namespace_pids(name)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while pids and time.monotonic() < deadline:
                time.sleep(0.2)
                pids = namespace_pids(name)
            if not pids:
                break
        subprocess.run(["ip", "netns", "delete", name], check=False)


@contextlib.contextmanager
def _removed(path: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def rays(work: Path, index: int, phase_s: float, interval: float | None) -> Times:
    temp = work / f"ray-{index}"
    env = dict(
        os.environ, RAY_FAKE_CLUSTER="1", RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0"
    )
    env.pop("RAY_ADDRESS", None)
    if interval is not None:
        env["AUTOSCALER_UPDATE_INTERVAL_S"] = f"{interval:g}"
    name = f"bench-reaction-{os.getpid()}-{index}"
    inside = ["ip", "netns", "exec", name]
    monitor_log = temp / "session_latest" / "logs" / "monitor.log"
    with namespace(name), _removed(temp):
        run(
            *inside,
            RAY,
            "start",
            "--head",
            "--port=6379",
            "--num-cpus=1",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--autoscaling-config={work / 'ray.yaml'}",
            f"--temp-dir={temp}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            env=env,
        )
        wait_for(
            lambda: bool(stamps(monitor_log, "took .* to complete the update iteration")),
            "Ray autoscaler's first tick",
            WAIT_S,
        )
        time.sleep(SETTLE_S + phase_s)
        driver_env = dict(env, RAY_ADDRESS="127.0.0.1:6379")
        times = bench_line(run(*inside, sys.executable, str(work / "driver.py"), env=driver_env))
        queued = stamps(monitor_log, r"Queue \d+ new nodes for launch")
        launched = stamps(monitor_log, r"Launching \d+ nodes, type worker")
        if queued:
            times["requested"] = queued[0]
        if launched:
            times["node_started"] = launched[0]
    return times


def submit_phase(index: int, repeats: int) -> float:
    """Seconds added to the settling time in repeat `index`: one slice of Ray's 5 s tick per
    repeat, and inside it a van der Corput offset, so the phases spread over our 1 s tick
    as well (plain equal slices would all fall at the same point of a 1 s tick)."""
    offset, scale, k = 0.0, 0.5, index + 1
    while k:
        offset += scale * (k % 2)
        k //= 2
        scale /= 2
    return PHASE_PERIOD_S * (index + offset) / repeats


def relative(times: Times) -> Times:
    return {k: v - times["submitted"] for k, v in times.items() if k != "submitted"}


def median(samples: list[Times], key: str) -> float | None:
    values = [s[key] for s in samples if key in s]
    return statistics.median(values) if values else None


def show(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.2f}"


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the clean-up of whatever is running


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--ray-interval",
        type=float,
        default=None,
        help="Ray's AUTOSCALER_UPDATE_INTERVAL_S (default: Ray's own, 5 s)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root, for the network namespace Ray's cluster runs in")
    signal.signal(signal.SIGTERM, _interrupted)
    ours_runs: list[Times] = []
    ray_runs: list[Times] = []
    with tempfile.TemporaryDirectory(prefix="brx-") as temp:
        work = Path(temp)
        (work / "ours.yaml").write_text(OURS_CONFIG)
        (work / "ray.yaml").write_text(RAY_CONFIG)
        (work / "driver.py").write_text(DRIVER)
        for i in range(args.repeat):
            phase = submit_phase(i, args.repeat)
            ours_runs.append(relative(ours(work, phase)))
            ray_runs.append(relative(rays(work, i, phase, args.ray_interval)))
            print(
                f"repeat {i + 1}: ours (a) {show(ours_runs[-1].get('requested'))} s "
                f"(b) {show(ours_runs[-1].get('running'))} s; "
                f"Ray (a) {show(ray_runs[-1].get('requested'))} s "
                f"(b) {show(ray_runs[-1].get('running'))} s",
                flush=True,
            )
    interval = "5 s (default)" if args.ray_interval is None else f"{args.ray_interval:g} s"
    print(f"\nrepeat={args.repeat}, Ray's autoscaler interval {interval}; medians, seconds")
    print("after the task's submission")
    for key, title in (("requested", "(a) worker requested"), ("running", "(b) task running")):
        mine, theirs = median(ours_runs, key), median(ray_runs, key)
        ratio = f"{mine / theirs:.2f}x" if mine is not None and theirs else "n/a"
        met = "met" if mine is not None and theirs and mine <= theirs / 2 else "not met"
        print(
            f"{title:24} ours {show(mine)}  Ray {show(theirs)}  ours/Ray {ratio} "
            f"(target <= 0.50x: {met})"
        )
    for side, rows, samples in (("ours", OURS_ROWS, ours_runs), ("Ray", RAY_ROWS, ray_runs)):
        print(f"\n{side}, where the time goes (medians):")
        for label, key in rows:
            print(f"  {label:56} {show(median(samples, key))} s")


if __name__ == "__main__":
    main()
