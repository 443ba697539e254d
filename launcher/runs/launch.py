"""Starting a recovering run: its settings (command line over the config), its record and
script kept here, and a supervisor of its own when it is to run detached."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from launcher import secret_env
from launcher.config.model import ClusterConfig, RecoverSettings
from launcher.errors import LauncherError
from launcher.runs import store
from launcher.runs.model import Run

SUPERVISOR_LOG = "supervisor.log"


def settings_for(
    config: ClusterConfig,
    recover: bool | None,
    storage_path: str | None,
    max_restarts_on_errors: int | None,
) -> RecoverSettings | None:
    """What a `submit` recovers with, or None when it does not recover: the command line
    wins over `metadata.launcher.recover`."""
    base = config.recover
    enabled = base.enabled if recover is None else recover
    if not enabled:
        return None
    return dataclasses.replace(
        base,
        enabled=True,
        storage_path=storage_path or base.storage_path,
        max_restarts_on_errors=base.max_restarts_on_errors
        if max_restarts_on_errors is None
        else max_restarts_on_errors,
    )


def create_run(
    config: ClusterConfig,
    script: Path,
    args: Sequence[str],
    settings: RecoverSettings,
    *,
    stop: bool,
    controller: str | None = None,
) -> Run:
    """A new run, kept on this machine with a copy of its script; `controller` names the
    machine that is to supervise it (launcher/runs/controller.py)."""
    run = Run(
        id=store.new_run_id(),
        cluster_name=config.cluster_name,
        config_path=str(Path(config.source).absolute()) if config.source else "",
        script=script.name,
        args=tuple(args),
        created_at=time.time(),
        storage_path=settings.storage_path,
        max_restarts_on_errors=settings.max_restarts_on_errors,
        stop=stop,
        same_head_type=settings.same_head_type,
        updated_at=time.time(),
        controller=controller,
    )
    store.keep_script(run, script)
    store.save(run)
    return run


def discard_run(run: Run) -> None:
    """Forget a run that never got a supervisor: its directory here (record, script, log)."""
    shutil.rmtree(store.run_dir(run.cluster_name, run.id), ignore_errors=True)


def supervise_argv(run: Run, cluster_name_override: str | None) -> list[str]:
    argv = [sys.executable, "-m", "launcher", "jobs", "supervise", run.config_path, run.id]
    if cluster_name_override:
        argv += ["--cluster-name", cluster_name_override]
    return argv


def spawn_supervisor(
    run: Run, cluster_name_override: str | None, secrets: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A supervisor of its own for `run`, in a session of its own (it outlives this
    command, its terminal and the user's login), writing to the run's supervisor.log;
    `secrets` reach it in its environment (never its command line)."""
    log_path = store.run_dir(run.cluster_name, run.id) / SUPERVISOR_LOG
    with log_path.open("ab") as log:
        return subprocess.Popen(
            supervise_argv(run, cluster_name_override),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
            env={**os.environ, **secret_env.for_child(secrets or {})},
        )


def wait_first_attempt(run: Run, process: subprocess.Popen[bytes], timeout_s: float = 600.0) -> Run:
    """Until the detached supervisor has started the run's first attempt (or ended it).
    LauncherError (with the end of its log) when it exits first or takes too long."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = store.load(run.cluster_name, run.id) or run
        if current.attempts or current.state.ended:
            return current
        if process.poll() is not None:
            break
        time.sleep(0.2)
    tail = supervisor_log_tail(run)
    what = "exited" if process.poll() is not None else f"did not start it in {timeout_s:g} s"
    raise LauncherError(f"the run's supervisor {what}: {tail}")


def supervisor_log_tail(run: Run, lines: int = 5) -> str:
    path = store.run_dir(run.cluster_name, run.id) / SUPERVISOR_LOG
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"
