"""Where this machine keeps its runs: `$LAUNCHER_HOME/runs/CLUSTER/RUN/` with `run.json`
(the run, replaced whole at each change) and `driver.log` (every attempt's output, one after
the other, each begun by a line naming it). Outside the cluster's own directory, so a run's
history outlives `launcher down`."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from launcher.errors import LauncherError
from launcher.files import write_whole
from launcher.paths import launcher_home, named_file
from launcher.runs.model import Run

RUN_FILE = "run.json"
LOG_FILE = "driver.log"


def runs_root(cluster_name: str) -> Path:
    return named_file(launcher_home() / "runs", cluster_name)


def run_dir(cluster_name: str, run_id: str) -> Path:
    return runs_root(cluster_name) / run_id


def new_run_id() -> str:
    return f"r-{secrets.token_hex(3)}"


def save(run: Run) -> None:
    folder = run_dir(run.cluster_name, run.id)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_whole(folder / RUN_FILE, run.to_json(), mode=0o600)


def load(cluster_name: str, run_id: str) -> Run | None:
    try:
        text = (run_dir(cluster_name, run_id) / RUN_FILE).read_text()
    except OSError:
        return None
    try:
        return Run.from_json(text)
    except ValueError:
        return None


def local_runs(cluster_name: str) -> list[Run]:
    root = runs_root(cluster_name)
    found = []
    for path in sorted(root.glob(f"*/{RUN_FILE}")):
        run = load(cluster_name, path.parent.name)
        if run is not None:
            found.append(run)
    return sorted(found, key=lambda r: r.created_at)


CANCEL_FILE = "cancel"


def request_cancel(cluster_name: str, run_id: str) -> None:
    """Ask this machine's supervisor of the run to cancel it (a file of its own: the
    supervisor rewrites run.json as it goes)."""
    folder = run_dir(cluster_name, run_id)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    (folder / CANCEL_FILE).touch()


def cancel_requested(cluster_name: str, run_id: str) -> bool:
    return (run_dir(cluster_name, run_id) / CANCEL_FILE).exists()


def script_path(run: Run) -> Path:
    """This machine's copy of the run's script (each attempt copies it to the head)."""
    return run_dir(run.cluster_name, run.id) / "script" / run.script


def keep_script(run: Run, source: Path) -> None:
    target = script_path(run)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copyfile(source, target)


def log_path(cluster_name: str, run_id: str) -> Path:
    return run_dir(cluster_name, run_id) / LOG_FILE


def append_log(cluster_name: str, run_id: str, data: bytes) -> None:
    path = log_path(cluster_name, run_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with path.open("ab") as log:
            log.write(data)
    except OSError as exc:
        raise LauncherError(f"could not write the run's log {path}: {exc}") from exc


def attempt_banner(number: int, head_id: str, why: str) -> bytes:
    """The line that begins an attempt's output in the run's log."""
    return f"=== launcher: attempt {number} on head {head_id}{why} ===\n".encode()
