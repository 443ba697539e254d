"""Recovering runs on this machine, end to end with real Ray, on one cluster: the shipped
Tune sweep (examples/tune_sweep.py on examples/clusters/local-recover.yaml) started with
`submit --recover --stop`, its spot head reclaimed mid-sweep by `kill-random-node --head
--hard`; a new head (on-demand, the spot head type's fallback) comes up, the workers that
lived rejoin it (the same machines), and the sweep resumes from its checkpoints. On the way:
the supervising command killed mid-recovery and the run taken up with `jobs supervise`, the
head lost a second time with a worker, the user's own failure restarted only as often as
allowed, a detached run cancelled, `launcher jobs`, and nothing left after."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.paths import cluster_dir
from launcher.runs import store
from tests.cluster_helpers import (
    LAUNCHER,
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
        "--checkpoint-every", "1", "--recover-storage", str(storage), "--summary", str(summary),
    ]  # fmt: skip


def _assert_resumed(summary: Path) -> list[dict[str, Any]]:
    """Every trial reached its last step, resumed from a checkpoint, never from step 0 (the
    steps a trial reports after a restore are what Tune kept of its history: a later
    restore may keep only the last resume)."""
    trials: list[dict[str, Any]] = json.loads(summary.read_text())
    assert len(trials) == 3
    for trial in trials:
        assert trial["error"] is None and trial["last_step"] == STEPS - 1, trial
        assert trial["resumed_from"] and min(trial["resumed_from"]) > 0, trial
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


def _run_file(run_id: str) -> dict[str, Any]:
    text = (store.run_dir(NAME, run_id) / store.RUN_FILE).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def _user_failure_and_cancel(tmp_path: Path) -> None:
    """The user's own failure, restarted only as often as allowed; a detached run cancelled:
    its driver stopped, not started again, its supervisor ended. Starts the cluster."""
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nprint('bad input', flush=True)\nsys.exit(3)\n")
    failed = run(
        "submit", str(CLUSTER), str(failing), "--start", "--recover",
        "--max-restarts-on-errors", "1", timeout=400,
    )  # fmt: skip
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert "Run r-" in failed.stdout and "failed: 2 attempt(s)" in failed.stdout, failed.stdout
    assert "script's own failure" in failed.stdout
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


def test_a_sweep_survives_two_head_losses_and_its_supervisor_killed(
    example_cluster: Path, tmp_path: Path
) -> None:
    _user_failure_and_cancel(tmp_path)
    # The sweep, attached: its spot head reclaimed mid-sweep, and the command that
    # supervises it killed halfway through bringing up a new head (a laptop closed).
    storage, summary = tmp_path / "results", tmp_path / "summary.json"
    output_file = tmp_path / "attached.out"
    with output_file.open("w") as out:
        attached = subprocess.Popen(
            [
                LAUNCHER,
                "submit",
                str(CLUSTER),
                *_sweep_args(storage, summary),
                "--stop",
                "--recover",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for(lambda: _checkpointed(storage, 8), 300, "every trial's 9th checkpoint")
    run_id = store.local_runs(NAME)[-1].id
    workers = _workers()
    assert len(workers) == 2
    first_head = _reclaim("--head")
    wait_for(
        lambda: "old_head_gone" in str(_run_file(run_id).get("recoveries")),
        120,
        "the recovery to be under way",
    )
    os.kill(_run_file(run_id)["supervisor"]["pid"], signal.SIGKILL)
    attached.wait(timeout=60)
    assert f"head {first_head} lost" in output_file.read_text()
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
    _assert_resumed(summary)

    ended = {r["id"]: r for r in _runs(CLUSTER)}[run_id]
    assert ended["state"] == "succeeded" and ended["attempts"] == 3, ended
    first, second = ended["recoveries_detail"]
    assert first["lost_head"] == first_head
    assert first["new_head_type"] == "head-on-demand"  # the spot head's fallback
    assert set(first["kept_workers"]) == workers  # the same machines, no new ones
    assert set(first["phases_s"]) >= {"head_launched", "workers_rejoined", "driver_started"}
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
