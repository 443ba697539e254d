"""Recovering runs on this machine, end to end with real Ray: the shipped Tune sweep
(examples/tune_sweep.py on examples/clusters/local-recover.yaml) started with
`submit --recover`, its head reclaimed mid-sweep by `kill-random-node --head --hard`; a new
head (on-demand, the spot head type's fallback) comes up, the workers that lived rejoin it
(the same machines), and the sweep resumes from its checkpoints. Also: detached, the
supervisor killed mid-recovery and taken up again, the head lost twice, a worker lost with
it, the user's own failure restarted only as often as allowed, and `launcher jobs`."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.paths import cluster_dir
from launcher.runs import store
from tests.cluster_helpers import (
    kill_cluster,
    leftover_processes,
    run,
    start,
    status,
    temp_dir_of,
    wait_for,
)

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "examples" / "clusters" / "local-recover.yaml"
SWEEP = REPO / "examples" / "tune_sweep.py"
NAME = "recovering-run"  # the example's cluster_name
STEPS = 40


@pytest.fixture
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "launcher-home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    return home


@pytest.fixture
def example_cluster(launcher_home: Path) -> Iterator[Path]:
    yield CLUSTER
    run("down", "-y", str(CLUSTER), timeout=120)
    kill_cluster(NAME)


def _checkpointed(storage: Path, at_least: int) -> bool:
    """Every one of the 3 trials has written checkpoint number `at_least` (or later)."""
    trials = [p for p in storage.glob("*/objective_*") if p.is_dir()]
    if len(trials) != 3:
        return False
    return all(
        any(int(c.name.rsplit("_", 1)[1]) >= at_least for c in t.glob("checkpoint_*"))
        for t in trials
    )


def _reclaim(*extra: str) -> str:
    killed = run("kill-random-node", str(CLUSTER), "--hard", "-y", *extra, timeout=180)
    assert killed.returncode == 0, killed.stdout + killed.stderr
    found = re.search(r"(?:Reclaimed|Terminated) (?:head|worker) (\S+)", killed.stdout)
    assert found, killed.stdout
    return found.group(1)


def _sweep_args(storage: Path, summary: Path) -> list[str]:
    return [
        str(SWEEP), "--trials", "3", "--steps", str(STEPS), "--step-seconds", "0.5",
        "--checkpoint-every", "1", "--storage-path", str(storage), "--summary", str(summary),
    ]  # fmt: skip


def _assert_resumed(summary: Path, losses: int) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = json.loads(summary.read_text())
    assert len(trials) == 3
    for trial in trials:  # every trial reached its last step, none started again from 0
        assert trial["error"] is None and trial["last_step"] == STEPS - 1, trial
        assert len(trial["resumed_from"]) >= losses and min(trial["resumed_from"]) > 0, trial
    return trials


def _runs(config: Path) -> list[dict[str, Any]]:
    listed = run("jobs", "list", "--json", str(config), timeout=60)
    assert listed.returncode == 0, listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


def _assert_no_cluster_left() -> None:
    wait_for(lambda: not leftover_processes(NAME), 30, "the cluster's processes to exit")
    assert not (cluster_dir(NAME) / "localhost").exists()
    assert not Path(temp_dir_of(NAME)).exists()


def _workers() -> set[str]:
    return {n["id"] for n in status(CLUSTER)["nodes"] if n["kind"] == "worker"}


def test_a_sweep_survives_its_spot_head_reclaimed_keeping_its_workers(
    example_cluster: Path, tmp_path: Path
) -> None:
    storage, summary = tmp_path / "results", tmp_path / "summary.json"
    process = start(
        "submit", str(CLUSTER), *_sweep_args(storage, summary), "--start", "--stop", "--recover"
    )
    wait_for(lambda: _checkpointed(storage, 10), 300, "every trial's 11th checkpoint")
    workers = _workers()
    assert len(workers) == 2
    lost_head = _reclaim("--head")
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-5000:]
    _assert_resumed(summary, losses=1)
    assert f"head {lost_head} lost" in output
    (ended,) = _runs(CLUSTER)
    assert ended["state"] == "succeeded" and ended["attempts"] == 2, ended
    (recovery,) = ended["recoveries_detail"]
    assert recovery["lost_head"] == lost_head
    assert recovery["new_head_type"] == "head-on-demand"  # the spot head's fallback
    assert set(recovery["kept_workers"]) == workers  # the same machines, no new ones
    assert set(recovery["phases_s"]) >= {"head_launched", "workers_rejoined", "driver_started"}
    assert "Terminated" in output  # --stop took the cluster down
    _assert_no_cluster_left()


def _run_file(run_id: str) -> dict[str, Any]:
    text = (store.run_dir(NAME, run_id) / store.RUN_FILE).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def test_a_detached_run_survives_two_head_losses_and_its_supervisor_killed(
    example_cluster: Path, tmp_path: Path
) -> None:
    # The user's own failure first, on the same cluster: restarted only as often as allowed.
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nprint('bad input', flush=True)\nsys.exit(3)\n")
    failed = run(
        "submit", str(CLUSTER), str(failing), "--start", "--recover",
        "--max-restarts-on-errors", "1", timeout=400,
    )  # fmt: skip
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert "Run r-" in failed.stdout and "failed: 2 attempt(s)" in failed.stdout, failed.stdout
    assert "script's own failure" in failed.stdout

    # A run cancelled: its driver stopped, not started again; its supervisor ends.
    sleeper = tmp_path / "sleeps.py"
    sleeper.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n")
    detached = run("submit", str(CLUSTER), str(sleeper), "--recover", "--detach", timeout=300)
    assert detached.returncode == 0, detached.stdout + detached.stderr
    sleeping = re.search(r"Run (r-\w+) started", detached.stdout).group(1)  # type: ignore[union-attr]
    cancelled = run("jobs", "cancel", str(CLUSTER), sleeping, "-y", timeout=120)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert "its driver is stopped" in cancelled.stdout
    wait_for(lambda: _run_file(sleeping)["state"] == "cancelled", 60, "the run cancelled")
    again = run("jobs", "cancel", str(CLUSTER), sleeping, "-y", timeout=60)
    assert again.returncode == 1 and "already ended (cancelled)" in again.stderr

    storage, summary = tmp_path / "results", tmp_path / "summary.json"
    submitted = run(
        "submit", str(CLUSTER), *_sweep_args(storage, summary), "--stop", "--recover",
        "--detach", timeout=300,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = re.search(r"Run (r-\w+) started", submitted.stdout).group(1)  # type: ignore[union-attr]
    wait_for(lambda: _checkpointed(storage, 8), 300, "every trial's 9th checkpoint")
    workers = _workers()

    # First loss: the head; the supervisor is killed halfway through bringing up a new one.
    _reclaim("--head")
    wait_for(
        lambda: "old_head_gone" in str(_run_file(run_id).get("recoveries")),
        120,
        "the recovery to be under way",
    )
    supervisor = _run_file(run_id)["supervisor"]
    os.kill(supervisor["pid"], signal.SIGKILL)
    listed = {r["id"]: r for r in _runs(CLUSTER)}
    assert listed[run_id]["state"] == "recovering" and not listed[run_id]["supervised"]
    taken_up = start("jobs", "supervise", str(CLUSTER), run_id)

    # Second loss, once it runs again and has gone further: the head and a worker together.
    wait_for(lambda: len(_run_file(run_id)["attempts"]) == 2, 300, "the second attempt")
    wait_for(lambda: _checkpointed(storage, 20), 300, "every trial's 21st checkpoint")
    lost_worker = _reclaim()
    _reclaim("--head")
    output, _ = taken_up.communicate(timeout=600)
    assert taken_up.returncode == 0, output[-5000:]
    _assert_resumed(summary, losses=2)

    ended = {r["id"]: r for r in _runs(CLUSTER)}[run_id]
    assert ended["state"] == "succeeded" and ended["attempts"] == 3, ended
    first, second = ended["recoveries_detail"]
    assert set(first["kept_workers"]) == workers
    # The worker that lived is kept again; the lost one is not (its replacement may be).
    assert workers - {lost_worker} <= set(second["kept_workers"])
    assert lost_worker not in second["kept_workers"]
    logs = run("jobs", "logs", str(CLUSTER), run_id, timeout=60)
    assert logs.returncode == 0
    assert [f"attempt {n}" in logs.stdout for n in (1, 2, 3)] == [True] * 3
    assert logs.stdout.count("resuming the sweep") == 2
    unknown = run("jobs", "logs", str(CLUSTER), "r-000000", timeout=60)
    assert unknown.returncode == 1 and "no run r-000000" in unknown.stderr
    _assert_no_cluster_left()  # the run was started with --stop
