"""A run's driver on the head: started apart from the command that started it (so it goes
on when that command's connection or machine does), its output kept in a file there and
followed from here, its exit code written beside it.

On the head, `~/.launcher/runs/RUN/` holds, for attempt K: `attempt-K.log` (the driver's
output), `attempt-K.pid` (its process, the leader of its own session), `attempt-K.exit`
(its exit code, once it exits by itself), and `cancel` once the run is cancelled.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher import secret_env as secret_env_mod
from launcher.cluster.head import HeadSession
from launcher.cluster.ops import marked_session
from launcher.errors import LauncherError
from launcher.runners.base import CommandRunner

HEAD_RUNS_DIR = "~/.launcher/runs"


def head_run_dir(run_id: str) -> str:
    return f"{HEAD_RUNS_DIR}/{run_id}"


def _files(run_id: str, attempt: int) -> tuple[str, str, str]:
    folder = head_run_dir(run_id)
    stem = f"{folder}/attempt-{attempt}"
    return f"{stem}.log", f"{stem}.pid", f"{stem}.exit"


def driver_env(
    session: HeadSession, run_id: str, attempt: int, storage_path: str | None
) -> dict[str, str]:
    env = {
        **session.env,
        "LAUNCHER_RUN_ID": run_id,
        "LAUNCHER_RUN_ATTEMPT": str(attempt),
        # Ray Tune saves its experiment's state every 10 s or more by default, and a restored
        # trial resumes from the checkpoint that state names, not from the newest one in
        # storage: after a lost head, up to that long of every trial's work was lost (all of
        # it, from step 0, when the head went before the first save; seen in
        # bench/bench_head_recovery.py). Saved every second, a run loses about one.
        "TUNE_GLOBAL_CHECKPOINT_S": "1",
    }
    if storage_path:
        env["LAUNCHER_STORAGE_PATH"] = storage_path
    return env


def start(
    session: HeadSession,
    run_id: str,
    attempt: int,
    script: str,
    args: Sequence[str],
    storage_path: str | None,
    secret_env: Mapping[str, str] | None = None,
) -> None:
    """Copy `script` to the head's home and start it there with Python, in a session of its
    own, as attempt `attempt` of run `run_id`, with the head's kept variables and
    `secret_env` (sent on standard input). Returns once it is started."""
    name = Path(script).name
    session.runner.put(script, f"~/{name}")
    log, pid, exit_file = _files(run_id, attempt)
    python = " ".join(["python", f"~/{shlex.quote(name)}", *map(shlex.quote, args)])
    body = (
        f"{python}; code=$?; echo $code > {exit_file}.partial && mv {exit_file}.partial "
        f"{exit_file}; exit $code"
    )
    # `&` on the driver alone: the commands before it must be done when its pid is kept.
    command = (
        f"{secret_env_mod.SOURCE_FILE}{secret_env_mod.LOAD_FROM_STDIN}"
        f"mkdir -p {head_run_dir(run_id)} && chmod 700 {HEAD_RUNS_DIR} && cd ~ && "
        f"rm -f {exit_file} || exit 1; "
        f"nohup setsid bash -c {shlex.quote(marked_session(body))} > {log} 2>&1 < /dev/null "
        f"& echo $! > {pid}"
    )
    result = session.runner.run(
        command,
        driver_env(session, run_id, attempt, storage_path),
        timeout=120,
        stdin=secret_env_mod.script(secret_env or {}),
    )
    if not result.ok:
        raise LauncherError(
            f"could not start the driver on head {session.head.id}: {result.output_tail}"
        )


def follow(
    runner: CommandRunner,
    env: Mapping[str, str],
    run_id: str,
    attempt: int,
    offset: int,
    on_line: Callable[[str], None],
) -> bool:
    """Send each line of the attempt's output from byte `offset` on to `on_line`, until the
    driver exits (True) or the head stops answering (False)."""
    log, pid, _ = _files(run_id, attempt)
    command = f"exec tail -c +{offset + 1} -F --pid=$(cat {pid}) {log} 2>/dev/null"
    return runner.run(command, env, echo=on_line).ok


@dataclass(frozen=True)
class Outcome:
    """What became of a driver that is no longer followed."""

    running: bool
    exit_code: int | None  # None: it did not exit by itself (killed, or still running)
    cancelled: bool


_MARK = "launcher-driver"


def outcome(runner: CommandRunner, env: Mapping[str, str], run_id: str, attempt: int) -> Outcome:
    """The driver's state on the head; LauncherError when the head does not answer."""
    _, pid, exit_file = _files(run_id, attempt)
    folder = head_run_dir(run_id)
    command = (
        f"code=$(cat {exit_file} 2>/dev/null || echo -); "
        f"p=$(cat {pid} 2>/dev/null); alive=gone; "
        f'[ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=alive; '
        f"cancel=-; [ -f {folder}/cancel ] && cancel=cancel; "
        f'echo "{_MARK} $code $alive $cancel"'
    )
    result = runner.run(command, env, timeout=60)
    line = next((s for s in result.output_tail.splitlines() if s.startswith(_MARK)), None)
    if not result.ok or line is None:
        raise LauncherError(f"the head did not answer: {result.output_tail.strip()[-200:]}")
    _, code, alive, cancel = line.split()
    return Outcome(alive == "alive", None if code == "-" else int(code), cancel == "cancel")


def cancel(runner: CommandRunner, env: Mapping[str, str], run_id: str, attempt: int) -> bool:
    """Mark the run cancelled on the head and stop its driver (its whole session: SIGTERM,
    then SIGKILL after 10 s). True once the driver is seen gone."""
    _, pid, _ = _files(run_id, attempt)
    folder = head_run_dir(run_id)
    command = (
        f"mkdir -p {folder} && touch {folder}/cancel; p=$(cat {pid} 2>/dev/null); "
        '[ -z "$p" ] && exit 0; kill -TERM -- -"$p" 2>/dev/null; '
        'for i in $(seq 100); do kill -0 "$p" 2>/dev/null || exit 0; sleep 0.1; done; '
        'kill -KILL -- -"$p" 2>/dev/null; sleep 0.5; kill -0 "$p" 2>/dev/null && exit 1; exit 0'
    )
    return runner.run(command, env, timeout=60).ok
