"""Time the spot training flow's recovery: from a worker's death to the Ray Tune trial it ran
running again, restored from its checkpoint, on a new node. Ours (`launcher up` on the
localhost provider, a `simulated_spot` worker reclaimed) against Ray's own autoscaler on its
fake multi-node cluster (FakeMultiNodeProvider, as `ray.cluster_utils.AutoscalingCluster`
starts it), in the same run, each repeated on a fresh cluster.

    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_recovery.py [--repeat 5]
    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_recovery.py --quick

Both clusters: a head with no CPU, two workers of 2 CPUs (`min_workers: 2`), a second
worker type of 2 CPUs with `min_workers: 0` (ours names it the spot type's fallback). The
same Tune driver runs on both: 4 trials of 1 CPU (so both workers are full), each
checkpointing every step (0.5 s) to a directory on this machine's shared disk; every trial
appends `{"t": time.time(), "event": ..., "node": ...}` lines to an events file when it
starts, restores a checkpoint and reports, and the driver appends Ray's node table changes
(`ray.nodes()` polled every 0.1 s) and Tune's trial failures (a Tune callback). Once trial 0
has checkpointed twice, its node dies:
- ours: the localhost provider's `reclaim_node` (what `launcher kill-random-node --hard` does
  to a `simulated_spot` worker: every process of the node SIGKILLed, the node listed
  PREEMPTED until terminated);
- Ray's: every process of that fake node SIGKILLed at once (its raylet, the raylet's children
  (workers, agents) and the log monitor the fake provider started for it).

Milestones, seconds after the death:
- death noticed: ours, the autoscaler's first decision naming the dead node (its state file,
  float times); Ray's, `Terminating the node ... (lost contact with raylet)` in monitor.log;
- replacement requested: ours, the first `launch` decision; Ray's, `Queue N new nodes for
  launch` (either may come before the death is noticed: a launch for the lost trial's demand);
- node up: ours, the new node's record tagged up-to-date (set up, Ray started on it); Ray's,
  `Launching N nodes` (logged once the fake provider's create_node returned: it starts the
  node's Ray processes in Ray's monitor process, there is nothing to set up);
- Ray joined: the new node alive in `ray.nodes()`;
- trial rescheduled: trial 0's trainable starting again, on another node;
- restored: trial 0's trainable having loaded its checkpoint (the total).
Also shown: when the GCS declared the dead node dead and when Tune saw the trial fail.

Needs root: Ray's fake cluster runs in a network namespace of its own with only loopback up
(its provider starts every node at the machine's own address on port 6379), as in
bench_reaction.py. Both sides use Ray's default settings (the GCS health check among them);
Ray's autoscaler ticks every 1 s (`AUTOSCALER_UPDATE_INTERVAL_S`, as AutoscalingCluster sets
it; `--ray-interval` changes it), ours every 1 s (its default).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from bench.bench_reaction import namespace, stamps
from bench.common import wait_for

BIN = Path(sys.executable).parent
LAUNCHER = str(BIN / "launcher")
RAY = str(BIN / "ray")
OBJECT_STORE_BYTES = 256 * 2**20  # what the localhost provider gives each node
CLUSTER = "bench-recovery"
TRIALS = 4
STEP_S = 0.5
KILL_AFTER_CHECKPOINTS = 2  # trial 0's checkpoints before its node dies
STARTUP_TIMEOUT_S = 240.0
RECOVERY_TIMEOUT_S = 240.0
GCS_WAIT_S = 30.0  # after the death, for the GCS to declare the node dead (shown, not timed)
POLL_S = 0.05  # how often a wait looks again

OURS_CONFIG = f"""\
cluster_name: {CLUSTER}
max_workers: 4
idle_timeout_minutes: 1
provider: {{type: localhost}}
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 0}}, max_workers: 0}}
  spot:
    node_config: {{simulated_spot: true}}
    resources: {{CPU: 2}}
    min_workers: 2
    max_workers: 2
  on-demand: {{node_config: {{}}, resources: {{CPU: 2}}, min_workers: 0, max_workers: 2}}
head_node_type: head
metadata:
  launcher:
    fallbacks:
      spot: [on-demand]
"""

# The fake provider names the head's type itself (ray.head.default); its resources come from
# `ray start`'s flags. The rest is what AutoscalingCluster's generated config holds.
RAY_CONFIG = f"""\
cluster_name: {CLUSTER}-ray
max_workers: 4
idle_timeout_minutes: 1
upscaling_speed: 1.0
provider:
  type: fake_multinode
  use_node_id_as_ip: true
  disable_node_updaters: true
  disable_launch_config_check: true
available_node_types:
  ray.head.default: {{node_config: {{}}, resources: {{CPU: 0}}, max_workers: 0}}
  spot:
    node_config: {{}}
    resources: {{CPU: 2, object_store_memory: {OBJECT_STORE_BYTES}}}
    min_workers: 2
    max_workers: 2
  on-demand:
    node_config: {{}}
    resources: {{CPU: 2, object_store_memory: {OBJECT_STORE_BYTES}}}
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

# The Tune driver both sides run: `driver.py EVENTS STORAGE STOP_FILE`.
DRIVER = f"""\
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import ray
from ray import tune

EVENTS, STORAGE, STOP = sys.argv[1], sys.argv[2], sys.argv[3]


def note(event, **fields):
    line = json.dumps(dict(t=time.time(), event=event, **fields)) + "\\n"
    fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def trainable(config):
    here = dict(
        trial=config["index"],
        node=ray.get_runtime_context().get_node_id(),
        ip=ray.util.get_node_ip_address(),
    )
    note("start", **here)
    step = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            step = json.loads((Path(folder) / "state.json").read_text())["step"] + 1
        note("restored", step=step, **here)
    while not os.path.exists(STOP):
        time.sleep({STEP_S})
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "state.json").write_text(json.dumps({{"step": step}}))
            tune.report(
                {{"step": step}}, checkpoint=tune.Checkpoint.from_directory(folder)
            )
        note("checkpoint", step=step, **here)
        step += 1


class Failures(tune.Callback):
    def on_trial_error(self, iteration, trials, trial, **info):
        note("tune_failed", trial=trial.config["index"])

    def on_trial_recover(self, iteration, trials, trial, **info):
        note("tune_failed", trial=trial.config["index"])


def watch_nodes():
    alive = set()
    while True:
        try:
            nodes = ray.nodes()
        except Exception:
            time.sleep(0.1)
            continue
        now = {{n["NodeID"]: n["NodeManagerAddress"] for n in nodes if n["Alive"]}}
        for node in now.keys() - alive:
            note("node_alive", node=node, ip=now[node])
        for node in alive - now.keys():
            note("node_dead", node=node)
        alive = set(now)
        time.sleep(0.1)


ray.init(logging_level="WARNING")
threading.Thread(target=watch_nodes, daemon=True).start()
# Tune starts once both workers are up: trials queued while the second one starts would make
# an autoscaler launch a third node for them, a spare the recovery would then use.
while sum(n["Alive"] and n["Resources"].get("CPU", 0) > 0 for n in ray.nodes()) < 2:
    time.sleep(0.2)
tuner = tune.Tuner(
    tune.with_resources(trainable, {{"cpu": 1}}),
    param_space={{"index": tune.grid_search(list(range({TRIALS})))}},
    run_config=tune.RunConfig(
        name="recovery",
        storage_path=STORAGE,
        failure_config=tune.FailureConfig(max_failures=3),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        callbacks=[Failures()],
        verbose=0,
    ),
)
results = tuner.fit()
errors = [r.error for r in results if r.error is not None]
print("BENCH-DONE errors=%d" % len(errors), flush=True)
"""

# (label, key) of the milestones, in the order of the flow; the last is the total.
MILESTONES = [
    ("death noticed (by the autoscaler)", "noticed"),
    ("replacement requested", "requested"),
    ("node up", "node_up"),
    ("Ray joined (new node alive in ray.nodes())", "joined"),
    ("trial rescheduled (trainable started, new node)", "rescheduled"),
    ("restored from checkpoint (total)", "restored"),
]
CONTEXT = [
    ("GCS declared the dead node dead (ray.nodes())", "gcs_dead"),
    ("Tune saw the trial fail (callback)", "tune_failed"),
]

Times = dict[str, float]


# -- the events file -------------------------------------------------------------------
def events(path: Path) -> list[dict[str, Any]]:
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def victim_ready(path: Path) -> dict[str, Any] | None:
    """Trial 0's latest start once every trial started and trial 0 checkpointed enough."""
    seen = events(path)
    if len({e["trial"] for e in seen if e["event"] == "start"}) < TRIALS:
        return None
    starts = [e for e in seen if e["event"] == "start" and e["trial"] == 0]
    done = [e for e in seen if e["event"] == "checkpoint" and e["trial"] == 0]
    if not starts or len(done) < KILL_AFTER_CHECKPOINTS:
        return None
    return starts[-1]


def trial_milestones(
    path: Path, death: float, dead_node: str, since: float | None = None
) -> tuple[Times, str | None]:
    """joined, rescheduled, restored, gcs_dead, tune_failed (epoch seconds) from the events
    file, and the node trial 0 was rescheduled on. `since`: when the node's replacement may
    have been asked for (a reclaim notice before the death); else the death. With a notice,
    the trial may move (the autoscaler stops the noticed node's Ray once the replacement has
    room) and be restored before the death: a negative time."""
    found: Times = {}
    new_node = None
    for e in events(path):
        if e["t"] < min(death, since or death):
            continue
        event, trial = e["event"], e.get("trial")
        if event == "node_alive" and e["node"] != dead_node:
            found.setdefault("joined", e["t"])
        elif event == "node_dead" and e["node"] == dead_node:
            found.setdefault("gcs_dead", e["t"])
        elif event == "tune_failed" and trial == 0:
            found.setdefault("tune_failed", e["t"])
        elif event == "start" and trial == 0 and e["node"] != dead_node:
            found.setdefault("rescheduled", e["t"])
            new_node = new_node or e["node"]
        elif event == "restored" and trial == 0 and e["node"] != dead_node:
            found.setdefault("restored", e["t"])
    return found, new_node


def recovered(path: Path, dead_node: str, death: float, since: float | None = None) -> bool:
    """Trial 0 restored, and the GCS declared the dead node dead (or GCS_WAIT_S passed)."""
    found, _ = trial_milestones(path, death, dead_node, since)
    return "restored" in found and ("gcs_dead" in found or time.time() - death > GCS_WAIT_S)


def stop_driver(driver: subprocess.Popen[str], stop_file: Path, log: Path) -> None:
    """Let the trials end (stop file), wait for the driver, kill it if it hangs."""
    stop_file.touch()
    try:
        driver.wait(timeout=90)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        print(f"warning: the Tune driver did not end; its log: {log}", file=sys.stderr)


def check_running(driver: subprocess.Popen[str], log: Path) -> Callable[[], None]:
    def alive() -> None:
        if driver.poll() is not None:
            raise RuntimeError(
                f"the Tune driver ended (exit {driver.returncode}):\n"
                f"{log.read_text(errors='replace')[-3000:]}"
            )

    return alive


# -- ours ------------------------------------------------------------------------------
class NodeWatcher:
    """Polls the localhost provider's node records: when each worker made after the
    watcher started is first tagged up-to-date."""

    def __init__(self, nodes_dir: Path) -> None:
        self.nodes_dir = nodes_dir
        self.before = {p.parent.name for p in nodes_dir.glob("w-*/node.json")}
        self.up: dict[str, float] = {}  # nodes made since, when first seen up-to-date
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> NodeWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _poll(self) -> None:
        while not self.stop.wait(0.05):
            now = time.time()
            for path in self.nodes_dir.glob("w-*/node.json"):
                with contextlib.suppress(OSError, ValueError):
                    data = json.loads(path.read_text())
                    if data["id"] in self.before:
                        continue
                    if data["tags"].get("launcher-node-status") == "up-to-date":
                        self.up.setdefault(data["id"], now)


def _reclaim(config_path: Path, ip: str) -> str:
    """Reclaim the worker at `ip` as `launcher kill-random-node --hard` would; its id."""
    from launcher.config.loader import load_config
    from launcher.providers.factory import make_provider

    provider = make_provider(load_config(config_path))
    node = next((n for n in provider.nodes() if n.ip == ip), None)
    if node is None or not provider.reclaim_node(node):
        raise RuntimeError(f"no simulated_spot worker of ours at {ip} to reclaim")
    return node.id


def _notify(config_path: Path, ip: str, at: float) -> None:
    """Give the worker at `ip` notice that it is reclaimed at `at`, as
    `launcher kill-random-node --hard --notice` would."""
    from launcher.config.loader import load_config
    from launcher.providers.factory import make_provider

    provider = make_provider(load_config(config_path))
    node = next((n for n in provider.nodes() if n.ip == ip), None)
    if node is None or not provider.notify_reclaim(node, at):
        raise RuntimeError(f"no simulated_spot worker of ours at {ip} to give notice to")


def _take(config_path: Path, ip: str, notice_s: float) -> tuple[float, float, str]:
    """Reclaim the worker at `ip`, after a notice of `notice_s` if given: when the notice
    was given (the death, without one), when the node died, and its id."""
    since = time.time()
    if notice_s:
        _notify(config_path, ip, since + notice_s)
        time.sleep(notice_s)
    death = time.time()
    return since, death, _reclaim(config_path, ip)


def ours(work: Path, index: int, notice_s: float = 0.0) -> Times:
    home = work / f"home-{index}"
    env = dict(os.environ, LAUNCHER_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    os.environ["LAUNCHER_HOME"] = str(home)  # for the in-process reclaim
    config = work / "ours.yaml"
    nodes_dir = home / "clusters" / CLUSTER / "localhost" / "nodes"
    path, stop_file = work / f"ours-{index}.events", work / f"ours-{index}.stop"
    log = work / f"ours-{index}.driver.log"
    try:
        up = subprocess.run(
            [LAUNCHER, "up", "-y", str(config)], env=env, capture_output=True, text=True,
            timeout=STARTUP_TIMEOUT_S, check=False,
        )  # fmt: skip
        if up.returncode != 0:
            raise RuntimeError(f"launcher up failed:\n{(up.stdout + up.stderr)[-3000:]}")
        with log.open("w") as out:
            driver = subprocess.Popen(
                [LAUNCHER, "submit", str(config), str(work / "driver.py"),
                 str(path), str(work / f"ours-{index}-storage"), str(stop_file)],
                env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                start_new_session=True,
            )  # fmt: skip
        alive = check_running(driver, log)
        try:
            victim = wait_for(
                lambda: victim_ready(path), "trial 0", STARTUP_TIMEOUT_S, poll_s=POLL_S, alive=alive
            )
            with NodeWatcher(nodes_dir) as watcher:
                since, death, dead_id = _take(config, victim["ip"], notice_s)
                wait_for(
                    lambda: recovered(path, victim["node"], death, since),
                    "trial 0 restored",
                    RECOVERY_TIMEOUT_S,
                    poll_s=POLL_S,
                    alive=alive,
                )
        finally:
            stop_driver(driver, stop_file, log)
        times, _ = trial_milestones(path, death, victim["node"], since)
        head_dir = next(nodes_dir.glob("h-*/home/.launcher/head"), None)
        if head_dir is not None:
            with contextlib.suppress(OSError):
                shutil.copy(head_dir / "monitor.log", work / f"ours-{index}.monitor.log")
            with contextlib.suppress(OSError):  # the nodes' setup logs
                shutil.copytree(home / "clusters" / CLUSTER / "logs", work / f"ours-{index}.logs")
        state_files = list(nodes_dir.glob("h-*/home/.launcher/head/autoscaler-state.json"))
        decisions = json.loads(state_files[0].read_text())["decisions"] if state_files else []
        later = [d for d in decisions if d["time"] >= since]
        noticed = [d["time"] for d in later if dead_id in d["text"]]
        launched = [d["time"] for d in later if d["action"] == "launch"]
        if noticed:
            times["noticed"] = noticed[0]
        if launched:
            times["requested"] = launched[0]
        new_up = list(watcher.up.values())
        if new_up:
            times["node_up"] = min(new_up)
        return {k: v - death for k, v in times.items()}
    finally:
        down = subprocess.run(
            [LAUNCHER, "down", "-y", str(config)], env=env, capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        if down.returncode != 0:
            print(f"warning: `launcher down` failed:\n{down.stdout}{down.stderr}", file=sys.stderr)
        shutil.rmtree(home, ignore_errors=True)


# -- Ray's -----------------------------------------------------------------------------
def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, start time as epoch seconds, to 10 ms) of a process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    boot = time.time() - uptime  # /proc/stat's btime is whole seconds
    return int(fields[1]), boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def fake_node_raylet(node_id: str) -> int | None:
    """The raylet of a fake node: the fake provider starts it with the node's id in
    RAY_OVERRIDE_NODE_ID_FOR_TESTING."""
    for pid in _pids():
        raylet = "/raylet" in _cmdline(pid).split(" ", 1)[0]
        if raylet and _environ(pid).get("RAY_OVERRIDE_NODE_ID_FOR_TESTING") == node_id:
            return pid
    return None


def fake_node_processes(node_id: str) -> list[int]:
    """Every process of one fake node: its raylet, the raylet's descendants (workers,
    agents), and the log monitor the fake provider started for it (a child of Ray's monitor
    too, the one started right after this raylet)."""
    raylet = fake_node_raylet(node_id)
    if raylet is None:
        raise RuntimeError(f"no raylet of fake node {node_id}")
    stats = {pid: s for pid in _pids() if (s := _stat(pid)) is not None}
    found = {raylet}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in stats.items() if parent in found} - found
        found |= more
        grew = bool(more)
    parent, started = stats[raylet]
    monitors = [
        (start, pid)
        for pid, (ppid, start) in stats.items()
        if ppid == parent and "log_monitor" in _cmdline(pid) and start >= started
    ]
    if monitors:
        found.add(min(monitors)[1])
    return sorted(found)


def rays(work: Path, index: int, interval: float) -> Times:
    temp = work / f"ray-{index}"
    env = dict(
        os.environ,
        RAY_FAKE_CLUSTER="1",
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        AUTOSCALER_UPDATE_INTERVAL_S=f"{interval:g}",
    )
    env.pop("RAY_ADDRESS", None)
    name = f"bench-recovery-{os.getpid()}-{index}"
    inside = ["ip", "netns", "exec", name]
    monitor_log = temp / "session_latest" / "logs" / "monitor.log"
    path, stop_file = work / f"ray-{index}.events", work / f"ray-{index}.stop"
    log = work / f"ray-{index}.driver.log"
    with namespace(name):
        try:
            started = subprocess.run(
                [*inside, RAY, "start", "--head", "--port=6379", "--num-cpus=0",
                 f"--object-store-memory={OBJECT_STORE_BYTES}",
                 f"--autoscaling-config={work / 'ray.yaml'}", f"--temp-dir={temp}",
                 "--include-dashboard=false", "--disable-usage-stats"],
                env=env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
                check=False,
            )  # fmt: skip
            if started.returncode != 0:
                raise RuntimeError(f"ray start failed:\n{started.stdout}{started.stderr}")
            with log.open("w") as out:
                driver = subprocess.Popen(
                    [*inside, sys.executable, str(work / "driver.py"), str(path),
                     str(work / f"ray-{index}-storage"), str(stop_file)],
                    env=dict(env, RAY_ADDRESS="127.0.0.1:6379"), stdout=out,
                    stderr=subprocess.STDOUT, text=True, start_new_session=True,
                )  # fmt: skip
            alive = check_running(driver, log)
            try:
                victim = wait_for(
                    lambda: victim_ready(path),
                    "trial 0",
                    STARTUP_TIMEOUT_S,
                    poll_s=POLL_S,
                    alive=alive,
                )
                doomed = fake_node_processes(victim["node"])
                death = time.time()
                for pid in doomed:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                wait_for(
                    lambda: recovered(path, victim["node"], death),
                    "trial 0 restored",
                    RECOVERY_TIMEOUT_S,
                    poll_s=POLL_S,
                    alive=alive,
                )
            finally:
                stop_driver(driver, stop_file, log)
            times, _ = trial_milestones(path, death, victim["node"])
            noticed = [t for t in stamps(monitor_log, "lost contact with raylet") if t >= death]
            queued = [
                t for t in stamps(monitor_log, r"Queue \d+ new nodes for launch") if t >= death
            ]
            if noticed:
                times["noticed"] = noticed[0]
            if queued:
                times["requested"] = queued[0]
            created = [t for t in stamps(monitor_log, r"Launching \d+ nodes") if t >= death]
            if created:
                times["node_up"] = created[0]
            return {k: v - death for k, v in times.items()}
        finally:
            with contextlib.suppress(OSError):
                shutil.copy(monitor_log, work / f"ray-{index}.monitor.log")
            shutil.rmtree(temp, ignore_errors=True)


# -- report ----------------------------------------------------------------------------
def show(value: float | None) -> str:
    return "    n/a" if value is None else f"{value:7.2f}"


def summary(samples: list[Times], key: str) -> tuple[float | None, float | None, float | None]:
    values = [s[key] for s in samples if key in s]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def report(ours_runs: list[Times], ray_runs: list[Times], interval: float) -> None:
    print(
        f"\n{len(ours_runs)} repeat(s); seconds after the death; median [min-max]. "
        f"Ray's autoscaler interval {interval:g} s, ours 1 s."
    )
    print(f"{'milestone':52} {'ours':>25} {'Ray':>25}")
    for label, key in MILESTONES + CONTEXT:
        cells = []
        for samples in (ours_runs, ray_runs):
            mid, low, high = summary(samples, key)
            cells.append(
                f"{show(mid)} [{show(low).strip()}-{show(high).strip()}]"
                if mid is not None
                else "n/a"
            )
        print(f"{label:52} {cells[0]:>25} {cells[1]:>25}")
    mine, theirs = summary(ours_runs, "restored")[0], summary(ray_runs, "restored")[0]
    if mine is not None and theirs:
        met = "met" if mine <= theirs / 2 else "not met"
        print(f"\ntotal, ours / Ray's: {mine / theirs:.2f}x (target <= 0.50x: {met})")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the clean-up of whatever is running


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="brec-") as temp:
        work = Path(temp)
        os.chmod(work, 0o755)
        (work / "ours.yaml").write_text(OURS_CONFIG)
        (work / "ray.yaml").write_text(RAY_CONFIG)
        (work / "driver.py").write_text(DRIVER)
        yield work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="repeats per side (default 5)")
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument(
        "--ray-interval",
        type=float,
        default=1.0,
        help="Ray's AUTOSCALER_UPDATE_INTERVAL_S (default 1, as AutoscalingCluster sets it)",
    )
    parser.add_argument("--only", choices=("ours", "ray"), help="measure one side only")
    parser.add_argument(
        "--notice-s",
        type=float,
        default=0.0,
        help="ours only: give the node a reclaim notice this long before it goes, as AWS "
        "(120 s) and GCP (30 s) do for spot machines (Ray's autoscaler has no use for one)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root, for the network namespace Ray's cluster runs in")
    signal.signal(signal.SIGTERM, _interrupted)
    repeats = 1 if args.quick else args.repeat
    ours_runs: list[Times] = []
    ray_runs: list[Times] = []
    with workdir() as work:
        for i in range(repeats):
            # The sides take turns at going first.
            order = ("ours", "ray") if i % 2 == 0 else ("ray", "ours")
            for side in order:
                if args.only and side != args.only:
                    continue
                got = (
                    ours(work, i, args.notice_s)
                    if side == "ours"
                    else rays(work, i, args.ray_interval)
                )
                if got.get("requested", float("inf")) > got.get("joined", float("inf")):
                    print(f"repeat {i + 1} {side}: discarded (a node launched before the "
                          f"death joined first): {got}", flush=True)  # fmt: skip
                    continue
                (ours_runs if side == "ours" else ray_runs).append(got)
                cells = ", ".join(
                    f"{k} {v:.2f}" for k, v in sorted(got.items(), key=lambda kv: kv[1])
                )
                print(f"repeat {i + 1} {side}: {cells}", flush=True)
        if args.keep:
            kept = Path(tempfile.mkdtemp(prefix="brec-kept-"))
            shutil.copytree(work, kept, dirs_exist_ok=True)
            print(f"work directory kept in {kept}")
    report(ours_runs, ray_runs, args.ray_interval)


if __name__ == "__main__":
    main()
