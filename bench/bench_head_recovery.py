"""Time a Tune sweep surviving the loss of its head: from the head's death to every trial
running again, for a recovering run (`launcher submit --recover`: a supervisor outside the
head brings up a new head, keeps the workers and starts the driver again) against
SkyPilot's way of recovering, a whole-cluster relaunch (`launcher down`, `launcher up`,
`launcher submit` again), measured in the same run. Also: the iterations each trial lost.

    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_head_recovery.py [--repeats 3]
    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_head_recovery.py --quick
    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_head_recovery.py \
        --provider aws [--repeats 2]

Both arms: the localhost provider with examples/clusters/local-recover.yaml (a spot head of
CPU 0, two spot workers of CPU 2) and examples/tune_sweep.py (3 trials of 40 steps of 0.5 s,
a checkpoint every step, `--storage-path` a directory of this run, `--name` fixed so a second
driver finds the experiment and resumes it with `Tuner.restore`), each with a LAUNCHER_HOME
of its own under a temp dir. Once every trial has checkpointed step 9 (10 checkpoints), the
head is taken with `launcher kill-random-node CLUSTER --head --hard -y` (the localhost
provider reclaims it as a cloud reclaims a spot machine). The death is the `reclaimed_at`
the provider writes into the head's record just before it kills the head's processes.
- ours: `launcher submit --start --stop --recover --recover-storage DIR` (attached, in a
  subprocess). Broken down from the run's record ($LAUNCHER_HOME/runs/recovering-run/RUN/
  run.json, `recoveries[-1]`: `seen_at` and its `phases`, seconds after it).
- baseline: `launcher submit --start --no-recover` (the config turns recovery on, so it is
  turned off); when it ends (its driver died with the head) or the kill command has seen the
  head gone, whichever is first (a submit still running is killed), at once `launcher down
  -y` (and a wait until the provider lists none of the cluster's nodes), `launcher up -y` and
  `launcher submit --no-recover` again with the same script arguments (without --start: the
  cluster was just brought up). The baseline is given no time to notice the loss beyond
  that, where SkyPilot's controller polls.

`--provider aws` runs the same two arms on AWS: moto's EC2 server, every instance a real
isolated SSH host running real Ray (bench/head_recovery_aws.py has the cluster: a spot head
of CPU 0 falling back to an on-demand head type, two workers of CPU 2, setup commands). There
`kill-random-node --head --hard` terminates the head instance, and the death is when EC2
accepted that termination; `launcher down` is followed by a wait until EC2 lists none of the
cluster's instances; a new head is a new instance, set up over SSH with the launcher
installed on it, as on AWS. On localhost a new node is a few processes, so there the arms
cost nearly the same; AWS shows what a new machine costs (launch, SSH, setup).

"Running again" for a trial: its first checkpoint written (the file's mtime, seen by a
watcher polling the storage every 0.1 s) after the new driver was started; the total is the
last trial's. Steps per trial: the last one checkpointed before the death, the last one the
old attempt checkpointed (its trainables live on a little on the workers), and the one it
resumed from (the first its restored trainable runs: the step of its first new checkpoint;
the script's summary `resumed_from` is checked against it). Lost: the steps done before the
death that were run again (0: nothing lost beyond the last checkpoint), and the old
attempt's steps run again. Each sweep runs to its end (the summary says whether every trial
finished) and each arm takes its cluster down at the end, on failure too.

Options: `--repeats N` (the arms take turns at going first), `--quick` (one repeat of a
shorter sweep), `--only ours|baseline`, `--max-load L` (before each arm, wait for this
shared machine's load to fall), `--node-setup-s N` (a setup command sleeping N s on every
node set up: what a new cloud machine costs before it runs Ray, paid by every node the
baseline makes and by ours' new head only), `--keep` (keep the work directory with the
nodes' logs and Ray's; ours then runs without --stop, which acts only after the run).
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO

from bench.common import BenchError, wait_for

REPO = Path(__file__).resolve().parent.parent

BIN = Path(sys.executable).parent
LAUNCHER = str(BIN / "launcher")
CLUSTER = REPO / "examples" / "clusters" / "local-recover.yaml"
SWEEP = REPO / "examples" / "tune_sweep.py"
NAME = "recovering-run"  # the example's cluster_name
EXPERIMENT = "bench-head-sweep"  # --name: the same experiment for every driver of a sweep
TRIALS = 3
STEP_S = 0.5
STARTUP_TIMEOUT_S = 600.0
SWEEP_TIMEOUT_S = 900.0  # from the death to the sweep's end
POLL_S = 0.1

# (label, key) of the rows, in the order of the flow; seconds after the death.
ROWS = [
    ("loss seen: ours, supervisor's seen_at; baseline, submit ended or kill done", "seen"),
    ("old head gone: ours, terminated; baseline, `launcher down` done", "old_head_gone"),
    ("new head launched", "head_launched"),
    ("Ray up on the new head", "ray_up"),
    ("workers in: ours, kept ones rejoined; baseline, `launcher up` done", "workers"),
    ("driver started: ours, on the new head; baseline, submit run", "driver_started"),
    ("script resuming the sweep (its line, as echoed)", "resuming"),
    ("first trial running again (a new checkpoint)", "first_trial"),
    ("every trial running again (the total)", "total"),
]


# -- commands --------------------------------------------------------------------------
class Background:
    """A launcher command run in the background (a session of its own): its output lines
    timestamped as they come, copied to a log, and when it ended."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self.lines: list[tuple[float, str]] = []
        self.ended_at: float | None = None
        self.started_at = time.time()
        self.process = subprocess.Popen(
            [LAUNCHER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        self._log: TextIO = log.open("w")
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            now = time.time()
            self.lines.append((now, line.rstrip("\n")))
            with contextlib.suppress(ValueError):  # closed by stop()
                self._log.write(f"{now:.3f} {line}")
                self._log.flush()

    def _wait(self) -> None:
        self.process.wait()
        self.ended_at = time.time()

    def first_line(self, pattern: str, after: float = 0.0) -> float | None:
        found = re.compile(pattern)
        return next((t for t, line in list(self.lines) if t >= after and found.search(line)), None)

    def tail(self) -> str:
        return "\n".join(line for _, line in self.lines[-60:])

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise BenchError(
                f"`launcher {' '.join(map(str, self.process.args[1:4]))} ...` ended "  # type: ignore[index]
                f"(exit {self.process.returncode}):\n{self.tail()}"
            )

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"timed out after {timeout:g} s; see {self.log_path}") from None

    def stop(self, hard: bool = False) -> None:
        """End it (its whole session) if it still runs; `hard`: with SIGKILL at once."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL if hard else signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
        self._log.close()


def launcher(env: dict[str, str], *args: str, timeout: float = 600.0) -> tuple[float, float]:
    """Run a launcher command to its end; when it started and ended. Raises if it failed."""
    started = time.time()
    done = subprocess.run(
        [LAUNCHER, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise BenchError(
            f"`launcher {' '.join(args[:2])}` failed (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
    return started, time.time()


# -- the storage and the head's record, watched ------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    trial: str  # the trial's directory name
    step: int
    written: float  # its state.json's mtime


@dataclass
class Watcher:
    """Polls the sweep's storage (every checkpoint, as first seen; Tune keeps only the last
    two) and the site's heads taken (`deaths`: head id -> when)."""

    experiment: Path
    deaths: Callable[[], Mapping[str, float]]
    checkpoints: list[Checkpoint] = field(default_factory=list)
    reclaimed: dict[str, float] = field(default_factory=dict)
    loads: list[tuple[float, float]] = field(default_factory=list)  # (time, 1-min load)
    _seen: set[tuple[str, str, int]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Watcher:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self.scan()

    def scan(self) -> None:
        found = []
        for state in self.experiment.glob("*/checkpoint_*/state.json"):
            try:
                mtime = state.stat().st_mtime_ns
                key = (state.parent.parent.name, state.parent.name, mtime)
                if key in self._seen:
                    continue
                step = int(json.loads(state.read_text())["step"])
            except (OSError, ValueError, KeyError):
                continue  # gone, or half written: seen next round
            self._seen.add(key)
            found.append(Checkpoint(key[0], step, mtime / 1e9))
        reclaimed = self.deaths()
        with self._lock:
            self.loads.append((time.time(), os.getloadavg()[0]))
            self.checkpoints.extend(found)
            for node, at in reclaimed.items():
                self.reclaimed.setdefault(node, at)

    def snapshot(self) -> list[Checkpoint]:
        with self._lock:
            return list(self.checkpoints)

    def every_trial_at(self, step: int) -> bool:
        """Every trial has checkpointed `step` (or later)."""
        best: dict[str, int] = {}
        for c in self.snapshot():
            best[c.trial] = max(best.get(c.trial, -1), c.step)
        return len(best) == TRIALS and min(best.values()) >= step

    def load_between(self, start: float, end: float) -> float:
        """The highest 1-minute load average seen from `start` to `end`."""
        with self._lock:
            return max((load for t, load in self.loads if start <= t <= end), default=0.0)

    def death(self) -> float | None:
        with self._lock:
            return min(self.reclaimed.values(), default=None)


def kill_head(env: dict[str, str], watcher: Watcher, cluster: Path) -> float:
    """`launcher kill-random-node --head --hard -y`; the head's death, as the site saw it."""
    _, ended = launcher(env, "kill-random-node", str(cluster), "--head", "--hard", "-y")
    watcher.scan()
    death = watcher.death()
    if death is None:
        print("warning: the site saw no head taken; the kill command's end taken as the "
              "death", file=sys.stderr)  # fmt: skip
        death = ended
    return death


# -- one arm's figures ----------------------------------------------------------------------
@dataclass(frozen=True)
class TrialFigures:
    at_death: int  # the last step checkpointed before the death (-1: none)
    old_last: int  # the last step the old attempt checkpointed (its trials may go on a while)
    resumed: int  # the first step run again (the step of the first new checkpoint)

    @property
    def lost_at_death(self) -> int:
        """Steps done before the death that were run again (negative: the trial gained
        steps after the death, its trainable going on on a worker that lived)."""
        return self.at_death + 1 - self.resumed

    @property
    def redone(self) -> int:
        """Steps the old attempt completed (checkpointed) that were run again."""
        return self.old_last + 1 - self.resumed


@dataclass
class Sample:
    arm: str
    times: dict[str, float]  # ROWS keys -> seconds after the death
    trials: dict[str, TrialFigures]
    finished: bool  # every trial reached its last step, no error
    load: float  # the highest 1-minute load average from the death to the total
    notes: list[str] = field(default_factory=list)


def trial_figures(
    checkpoints: list[Checkpoint], death: float, restarted: float
) -> tuple[dict[str, float], dict[str, TrialFigures]]:
    """Per trial: when it ran again (its first checkpoint written after `restarted`, the new
    driver's start), and its steps (TrialFigures)."""
    again: dict[str, Checkpoint] = {}
    at_death: dict[str, int] = {}
    old_last: dict[str, int] = {}
    for c in sorted(checkpoints, key=lambda c: c.written):
        if c.written <= restarted:
            old_last[c.trial] = max(old_last.get(c.trial, -1), c.step)
            if c.written <= death:
                at_death[c.trial] = max(at_death.get(c.trial, -1), c.step)
        else:
            again.setdefault(c.trial, c)
    running = {t: c.written for t, c in again.items()}
    figures = {
        t: TrialFigures(at_death.get(t, -1), old_last.get(t, -1), c.step) for t, c in again.items()
    }
    return running, figures


def summary_check(summary: Path, steps: int, resumed: list[int]) -> tuple[bool, list[str]]:
    """Whether every trial finished; and a note if the summary's resumed_from disagrees."""
    notes = []
    try:
        trials = json.loads(summary.read_text())
    except (OSError, ValueError):
        return False, ["no summary from the sweep"]
    finished = len(trials) == TRIALS and all(
        t["error"] is None and t["last_step"] == steps - 1 for t in trials
    )
    said = sorted(s for t in trials for s in t["resumed_from"])
    if said != sorted(resumed):
        notes.append(f"summary's resumed_from {said} != new checkpoints' first steps "
                     f"{sorted(resumed)}")  # fmt: skip
    return finished, notes


def finish_sample(
    arm: str, times: dict[str, float], watcher: Watcher, death: float, restarted: float,
    summary: Path, steps: int,
) -> Sample:  # fmt: skip
    checkpoints = watcher.snapshot()
    running, trials = trial_figures(checkpoints, death, restarted)
    notes = []
    if len(running) < TRIALS:
        notes.append(f"only {len(running)} of {TRIALS} trials seen running again")
    if running:
        times["first_trial"] = min(running.values())
    if len(running) == TRIALS:
        times["total"] = max(running.values())
    after = [c.written - death for c in checkpoints if death < c.written <= restarted]
    if after:
        notes.append(f"the old attempt's trials wrote {len(after)} checkpoint(s) after the "
                     f"death, the last {max(after):.1f} s after it")  # fmt: skip
    finished, more = summary_check(summary, steps, [f.resumed for f in trials.values()])
    load = watcher.load_between(death, times.get("total", time.time()))
    shifted = {k: v - death for k, v in times.items()}
    return Sample(arm, shifted, trials, finished, load, notes + more)


# -- where an arm's cluster runs ------------------------------------------------------------
class Site(Protocol):
    """An arm's cluster, wherever it runs (the localhost provider here; AWS on moto in
    bench/head_recovery_aws.py), opened for one arm and closed after it."""

    cluster: Path  # the cluster file
    left: list[str]  # once closed: what was left of the cluster after `launcher down`

    @property
    def env(self) -> dict[str, str]:
        """The environment of the arm's launcher commands."""
        ...

    def deaths(self) -> Mapping[str, float]:
        """Each head taken so far: its id -> when it was taken (wall clock)."""
        ...

    def wait_unlisted(self) -> None:
        """After `launcher down`: until the provider lists none of the cluster's nodes."""
        ...


OpenSite = Callable[[Path, bool], contextlib.AbstractContextManager[Site]]


def arm_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, LAUNCHER_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    return env


@dataclass
class LocalhostSite:
    cluster: Path
    home: Path
    left: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return arm_env(self.home)

    def deaths(self) -> dict[str, float]:
        """The heads the localhost provider reclaimed: the `reclaimed_at` it writes into
        the head's record just before it kills the head's processes."""
        reclaimed = {}
        nodes = self.home / "clusters" / NAME / "localhost" / "nodes"
        for record in nodes.glob("h-*/node.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                data = json.loads(record.read_text())
                if data.get("reclaimed_at") is not None:
                    reclaimed[data["id"]] = float(data["reclaimed_at"])
        return reclaimed

    def wait_unlisted(self) -> None:
        """`launcher down` returns once the localhost nodes are gone."""


def localhost_site(node_setup_s: float) -> OpenSite:
    @contextlib.contextmanager
    def opened(work: Path, keep: bool) -> Iterator[Site]:
        site = LocalhostSite(cluster_file(work, node_setup_s), work / "home")
        try:
            yield site
        finally:
            site.left += clean_up(work, site.cluster, keep)

    return opened


def cluster_file(work: Path, node_setup_s: float) -> Path:
    """The example's cluster file; with `node_setup_s`, a copy whose setup_commands sleep
    that long on every node set up (a stand-in for what a cloud machine costs before it
    runs Ray: its boot and setup), so that a node made anew costs it and a kept one not."""
    if not node_setup_s:
        return CLUSTER
    path = work / "local-recover-setup.yaml"
    path.write_text(CLUSTER.read_text() + f"setup_commands: [sleep {node_setup_s:g}]\n")
    return path


def localhost_names(home: Path) -> tuple[str, str]:
    """The cluster's process key and Ray temp dir, both derived from its LAUNCHER_HOME."""
    from launcher.providers.localhost.spec import process_key, ray_temp_dir

    os.environ["LAUNCHER_HOME"] = str(home)
    return process_key(NAME), ray_temp_dir(NAME)


def keep_logs(work: Path) -> None:
    """The nodes' setup logs and each head's autoscaler log, into the work directory."""
    cluster = work / "home" / "clusters" / NAME
    with contextlib.suppress(OSError):
        shutil.copytree(cluster / "logs", work / "logs", dirs_exist_ok=True)
    for log in cluster.glob("localhost/nodes/h-*/home/.launcher/head/monitor.log"):
        with contextlib.suppress(OSError):
            shutil.copy(log, work / f"monitor-{log.parents[3].name}.log")
    _, temp_dir = localhost_names(work / "home")
    for logs in Path(temp_dir).glob("session_2*/logs"):  # Ray's, one session per head
        with contextlib.suppress(OSError):
            shutil.copytree(logs, work / "ray" / logs.parent.name, dirs_exist_ok=True)


def clean_up(work: Path, cluster: Path, keep: bool) -> list[str]:
    """`launcher down`, then whatever is left of the cluster's processes and directories.
    What was left, if anything. `keep`: the cluster's logs kept first."""
    home = work / "home"
    env = arm_env(home)
    left = []
    if keep:
        keep_logs(work)
    try:
        launcher(env, "down", "-y", str(cluster), timeout=300)
    except (BenchError, subprocess.TimeoutExpired) as exc:
        left.append(f"`launcher down` failed: {str(exc)[:500]}")
    from launcher.providers.localhost.processes import cluster_processes, stop_processes

    key, temp_dir = localhost_names(home)
    leftovers = cluster_processes(key, temp_dir)
    if leftovers:
        left.append(f"{len(leftovers)} process(es) left after down, stopped")
        stop_processes(p.pid for p in leftovers)
    if Path(temp_dir).exists():
        left.append(f"{temp_dir} left after down, removed")
        shutil.rmtree(temp_dir, ignore_errors=True)
    if (home / "clusters" / NAME / "localhost").exists():
        left.append("the cluster's localhost state left after down")
    return left


# -- the arms -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    steps: int
    kill_at_step: int  # every trial has checkpointed this step when the head dies


def sweep_args(storage: Path, summary: Path, plan: Plan) -> list[str]:
    return [
        "--", "--trials", str(TRIALS), "--steps", str(plan.steps), "--step-seconds", str(STEP_S),
        "--checkpoint-every", "1", "--storage-path", str(storage), "--name", EXPERIMENT,
        "--summary", str(summary),
    ]  # fmt: skip


def run_record(home: Path) -> dict[str, Any]:
    (path,) = home.glob("runs/*/*/run.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def ours(work: Path, site: Site, plan: Plan, keep: bool) -> Sample:
    """`keep`: without --stop (which only acts once the run has ended), so that the
    cluster's logs can be kept before it goes down."""
    storage, summary = work / "storage", work / "summary.json"
    storage.mkdir()
    watcher = Watcher(storage / EXPERIMENT, site.deaths)
    stop = [] if keep else ["--stop"]
    args = ["submit", "--start", *stop, "--recover", "--recover-storage", str(storage),
            str(site.cluster), str(SWEEP), *sweep_args(storage, summary, plan)]  # fmt: skip
    with watcher:
        submit = Background(args, site.env, work / "submit.log")
        try:
            wait_for(
                lambda: watcher.every_trial_at(plan.kill_at_step), "the trials' checkpoints",
                STARTUP_TIMEOUT_S, poll_s=POLL_S, alive=submit.check_running,
            )  # fmt: skip
            death = kill_head(site.env, watcher, site.cluster)
            code = submit.wait(SWEEP_TIMEOUT_S)
            if code != 0:
                raise BenchError(f"the recovering run failed (exit {code}):\n{submit.tail()}")
        finally:
            submit.stop()
    recovery = run_record(Path(site.env["LAUNCHER_HOME"]))["recoveries"][-1]
    seen = float(recovery["seen_at"])
    phases = {k: seen + float(v) for k, v in recovery["phases"].items()}
    times = {"seen": seen, **phases}
    times["workers"] = times.pop("workers_rejoined", float("nan"))
    resuming = submit.first_line("resuming the sweep", after=death)
    if resuming is not None:
        times["resuming"] = resuming
    restarted = phases.get("driver_started", seen)
    sample = finish_sample("ours", times, watcher, death, restarted, summary, plan.steps)
    sample.notes.append(f"new head {recovery.get('new_head')} ({recovery.get('new_head_type')}), "
                        f"kept {len(recovery.get('adopted', []))} worker(s)")  # fmt: skip
    return sample


def baseline(work: Path, site: Site, plan: Plan, keep: bool) -> Sample:
    """Down until nothing is listed, up (which waits for min_workers), submit again, from
    when the loss is known: the attached submit ended (its driver died with the head) or
    the kill command saw the head gone, whichever came first (the best a controller polling
    the cloud could do; on AWS the submit retries its lost connection for ~14 s). A submit
    still running then is killed before `down`: its retry could reach a new head at the old
    head's address."""
    storage, summary = work / "storage", work / "summary.json"
    env, cluster = site.env, site.cluster
    watcher = Watcher(storage / EXPERIMENT, site.deaths)
    script = [str(cluster), str(SWEEP), *sweep_args(storage, summary, plan)]
    times: dict[str, float] = {}
    with watcher:
        first = Background(
            ["submit", "--start", "--no-recover", *script], env, work / "submit-1.log"
        )
        try:
            wait_for(
                lambda: watcher.every_trial_at(plan.kill_at_step), "the trials' checkpoints",
                STARTUP_TIMEOUT_S, poll_s=POLL_S, alive=first.check_running,
            )  # fmt: skip
            death = kill_head(env, watcher, cluster)
            killed, ended = time.time(), first.ended_at
        finally:
            first.stop(hard=True)
        times["seen"] = killed if ended is None else min(ended, killed)
        launcher(env, "down", "-y", str(cluster))
        site.wait_unlisted()
        times["old_head_gone"] = time.time()
        times["workers"] = launcher(env, "up", "-y", str(cluster))[1]
        second = Background(["submit", "--no-recover", *script], env, work / "submit-2.log")
        try:
            code = second.wait(SWEEP_TIMEOUT_S)
            if code != 0:
                raise BenchError(f"the resubmitted sweep failed (exit {code}):\n{second.tail()}")
        finally:
            second.stop()
    times["driver_started"] = second.started_at
    resuming = second.first_line("resuming the sweep")
    if resuming is not None:
        times["resuming"] = resuming
    sample = finish_sample("baseline", times, watcher, death, second.started_at, summary,
                           plan.steps)  # fmt: skip
    sample.notes.append(
        f"first submit ended {ended - death:.2f} s after the death" if ended is not None else
        f"first submit still running {killed - death:.2f} s after the death, when the kill "
        "was done: killed"
    )  # fmt: skip
    return sample


def wait_quiet(max_load: float, patience_s: float = 1800.0) -> None:
    """Until this machine's 1-minute load average is at most `max_load` (others' work on a
    shared machine), for up to `patience_s`; then go on and say so."""
    deadline = time.monotonic() + patience_s
    said = False
    while os.getloadavg()[0] > max_load:
        if time.monotonic() > deadline:
            print(f"the load stayed above {max_load:g}: measuring anyway", flush=True)
            return
        if not said:
            print(f"waiting for the load ({os.getloadavg()[0]:.1f}) to fall to {max_load:g}",
                  flush=True)  # fmt: skip
            said = True
        time.sleep(5)


def measure(arm: str, work: Path, open_site: OpenSite, plan: Plan, keep: bool) -> Sample | None:
    work.mkdir(parents=True)
    started = time.monotonic()
    left: list[str] = []
    try:
        with open_site(work, keep) as site:
            left = site.left
            return (ours if arm == "ours" else baseline)(work, site, plan, keep)
    except BenchError as exc:
        print(f"{arm}: failed: {exc}", file=sys.stderr, flush=True)
        return None
    finally:
        for line in left:
            print(f"{arm}: clean-up: {line}", file=sys.stderr, flush=True)
        print(f"{arm}: {time.monotonic() - started:.0f} s in all", flush=True)


# -- report -------------------------------------------------------------------------------
def cell(values: list[float]) -> str:
    if not values:
        return "n/a"
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.2f}"
    return f"{mid:.2f} [{min(values):.2f}-{max(values):.2f}]"


def values(samples: list[Sample], key: str) -> list[float]:
    return [s.times[key] for s in samples if key in s.times and s.times[key] == s.times[key]]


def show_sample(index: int, sample: Sample) -> None:
    cells = ", ".join(f"{k} {v:.2f}" for k, v in sorted(sample.times.items(), key=lambda kv: kv[1]))
    lost = ", ".join(
        f"{f.at_death}/{f.old_last}/{f.resumed}" for _, f in sorted(sample.trials.items())
    )
    print(f"repeat {index + 1} {sample.arm}: {cells}; load up to {sample.load:.1f}", flush=True)
    print(f"  steps per trial (checkpointed at the death/old attempt's last/resumed from): "
          f"{lost or 'n/a'}; sweep {'finished' if sample.finished else 'NOT finished'}",
          flush=True)  # fmt: skip
    for note in sample.notes:
        print(f"  note: {note}", flush=True)


def report(mine: list[Sample], theirs: list[Sample]) -> None:
    print(f"\n{len(mine)} + {len(theirs)} repeat(s) (ours + baseline); seconds after the "
          "head's death; median [min-max]")  # fmt: skip
    print(f"{'milestone':72} {'ours':>20} {'baseline':>20}")
    for label, key in ROWS:
        print(f"{label:72} {cell(values(mine, key)):>20} {cell(values(theirs, key)):>20}")
    for name, samples in (("ours", mine), ("baseline", theirs)):
        trials = [f for s in samples for f in s.trials.values()]
        if trials:
            at_death = sorted(f.lost_at_death for f in trials)
            redone = sorted(f.redone for f in trials)
            print(f"{name}: steps done before the death and run again, per trial: {at_death}; "
                  f"steps of the old attempt run again: {redone} (max {max(redone)})")  # fmt: skip
    ours_total, base_total = values(mine, "total"), values(theirs, "total")
    if ours_total and base_total:
        ratio = statistics.median(ours_total) / statistics.median(base_total)
        met = "met" if ratio <= 0.5 else "not met"
        print(f"\ntotal, ours / baseline: {ratio:.2f}x (medians; target <= 0.50x: {met})")
        pairs = [o.times["total"] / b.times["total"] for o, b in zip(mine, theirs, strict=False)
                 if "total" in o.times and "total" in b.times]  # fmt: skip
        if len(pairs) > 1:
            print(f"per repeat: {', '.join(f'{p:.2f}x' for p in pairs)}")


def version() -> str:
    """The commit, and whether launcher/ differs from it (others may be at work in it)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    changed = git("status", "--porcelain", "launcher", "examples")
    return git("rev-parse", "--short", "HEAD") + (" (launcher/ changed since)" if changed else "")


def ray_version() -> str:
    from importlib.metadata import version as installed

    return installed("ray")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the clean-up of whatever is running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="repeats per arm (default 1)")
    parser.add_argument(
        "--quick", action="store_true", help="one repeat of a shorter sweep (30 steps, the "
        "head killed at 6 checkpoints)"
    )  # fmt: skip
    parser.add_argument("--only", choices=("ours", "baseline"), help="measure one arm only")
    parser.add_argument(
        "--provider", choices=("localhost", "aws"), default="localhost", help="where the "
        "clusters run: this machine's localhost provider (default), or AWS on moto's EC2 "
        "server, every instance an isolated SSH host (bench/head_recovery_aws.py)"
    )  # fmt: skip
    parser.add_argument(
        "--node-setup-s", type=float, default=0.0, help="a setup command sleeping this long "
        "on every node set up (as a cloud machine's boot and setup cost; default 0: none)"
    )  # fmt: skip
    parser.add_argument(
        "--max-load", type=float, default=2.0, help="before each arm, wait (up to 30 min) "
        "for the 1-minute load average to fall to this (default 2; 0: do not wait)"
    )  # fmt: skip
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory, with the cluster's logs "
        "(ours then runs without --stop, which acts only once the run has ended)"
    )  # fmt: skip
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupted)
    print(f"launcher at {version()}; {os.cpu_count()} cores; Ray {ray_version()}; provider "
          f"{args.provider}", flush=True)  # fmt: skip
    repeats = 1 if args.quick else args.repeats
    mine: list[Sample] = []
    theirs: list[Sample] = []
    open_site = localhost_site(args.node_setup_s)
    shared = None
    if args.provider == "aws":
        from bench.head_recovery_aws import SHARED_DIR, aws_site

        open_site, shared = aws_site(args.node_setup_s, arm_env), SHARED_DIR
    # On AWS the storage must be where every host sees it (each host has its own /tmp).
    work = Path(tempfile.mkdtemp(prefix="bhead-", dir=shared))
    os.chmod(work, 0o755)
    plan = Plan(30, 5) if args.quick else Plan(40, 9)
    try:
        for i in range(repeats):
            order = ("ours", "baseline") if i % 2 == 0 else ("baseline", "ours")
            for arm in order:
                if args.only and arm != args.only:
                    continue
                if args.max_load:
                    wait_quiet(args.max_load)
                sample = measure(arm, work / f"{arm}-{i}", open_site, plan, args.keep)
                if sample is not None:
                    show_sample(i, sample)
                    (mine if arm == "ours" else theirs).append(sample)
    finally:
        if args.keep:
            print(f"work directory kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(mine, theirs)


if __name__ == "__main__":
    main()
