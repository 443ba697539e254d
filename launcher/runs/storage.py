"""A run's storage path, checked before the run starts: a run that outlives its head resumes
from it, so every node must reach the same place there, and write to it.

The check runs on the head (storage_probe.py, copied there): the head writes a token under
the path, a task pinned to each alive Ray node reads it and writes one of its own, the head
reads those back, and the probe's files are removed. A relative path is refused here,
without touching the cluster.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from pathlib import Path
from typing import Any

from launcher.cluster.head import HeadSession
from launcher.errors import LauncherError, UsageError

PROBE_SCRIPT = Path(__file__).with_name("storage_probe.py")
HEAD_PROBE = "~/.launcher/runs/storage_probe.py"
MARK = "launcher-storage-probe "  # storage_probe.MARK (the script imports nothing of ours)
# Beyond the probe's own budget: starting Python and Ray on the head, and the round trip.
OVERHEAD_S = 30.0

WHERE_SET = "set with --recover-storage or metadata.launcher.recover.storage_path"
SHARED_FIX = (
    "use a path every node reaches (s3://BUCKET/PATH, gs://BUCKET/PATH, or a shared file "
    f"system such as NFS), {WHERE_SET}"
)


def check_storage(session: HeadSession, storage_path: str, timeout_s: float = 120.0) -> str:
    """Check that `storage_path` is writable from the head and shared by every alive node
    of the cluster. Returns one line saying what was checked (or, for a URI the head has
    no pyarrow to open, that it could not be checked). Raises UsageError, with one line
    naming the problem and the fix, for a path the run cannot use; LauncherError when the
    check itself could not be made (no Ray on the head, a node that does not answer)."""
    require_usable_form(storage_path)
    try:
        session.runner.put(str(PROBE_SCRIPT), HEAD_PROBE)
    except (OSError, LauncherError) as error:
        raise LauncherError(
            f"could not copy the storage check to head {session.head.id}: {error}"
        ) from None
    command = (
        f"chmod 700 {posixpath.dirname(HEAD_PROBE)}; "
        f"python {HEAD_PROBE} {shlex.quote(storage_path)} {timeout_s:g}"
    )
    result = session.runner.run(command, session.env, timeout=timeout_s + OVERHEAD_S)
    if result.timed_out:
        raise LauncherError(
            f"could not check storage path {storage_path}: the check on head "
            f"{session.head.id} did not finish within {timeout_s + OVERHEAD_S:g} s"
        )
    return verdict(storage_path, parse_report(result.output_tail, session.head.id))


def require_usable_form(storage_path: str) -> None:
    """Refuse a path that cannot name one place for every node: empty or relative."""
    path = storage_path
    if "://" in path:
        scheme = path.split("://", 1)[0]
        if scheme and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
            return
    elif path.startswith("/") or path.startswith("~"):
        return
    shown = storage_path if storage_path else '""'
    raise UsageError(
        f"storage path {shown} is not absolute: give an absolute path or a URI such as "
        f"s3://bucket/path, {WHERE_SET}"
    )


def parse_report(output: str, head_id: str) -> dict[str, Any]:
    """The probe's report, from the last line that carries it."""
    lines = output.splitlines()
    line = next((s for s in reversed(lines) if s.startswith(MARK)), None)
    if line is None:
        last = lines[-1].strip() if lines else "no output"
        raise LauncherError(f"could not check the storage path on head {head_id}: {last}")
    try:
        report: dict[str, Any] = json.loads(line[len(MARK) :])
    except ValueError:
        raise LauncherError(f"the storage check on head {head_id} said: {line[:200]}") from None
    return report


def verdict(path: str, report: dict[str, Any]) -> str:
    """The line to show for a passed check, or the error for the first problem found."""
    if report.get("unchecked"):
        return f"cannot check storage {path}: {report['unchecked']}; the run will use it unchecked"
    problems: list[dict[str, Any]] = report.get("problems") or []
    if problems:
        raise problem_error(path, problems[0], len(problems) - 1)
    workers = int(report.get("workers", 0))
    warnings: list[dict[str, Any]] = report.get("warnings") or []
    if workers == 0:
        line = f"storage {path} is writable from the head (no worker is up to check it is shared)"
    else:
        nodes = "1 worker" if workers == 1 else f"{workers} workers"
        line = f"storage {path} is shared by the head and {nodes} and writable"
    if warnings:
        first = warnings[0]
        line += f" (not checked from {node_name(first.get('node'))}: {first.get('detail')})"
    return line


def node_name(node: dict[str, Any] | None) -> str:
    if not node:
        return "the head"
    role = "the head" if node.get("head") else "the worker"
    return f"{role} at {node.get('ip')} (Ray node {str(node.get('id'))[:12]}, {node.get('host')})"


_HEAD_FIXES = {
    "write": f"give a path the head may write, or make it writable, {WHERE_SET}",
    "open": f"check the path and the head's access to it, {WHERE_SET}",
    "read": f"check the path and the head's access to it, {WHERE_SET}",
}
_STATES = {"write": "writable", "open": "usable", "read": "readable"}


def problem_error(path: str, problem: dict[str, Any], more: int) -> LauncherError:
    kind, node, detail = problem["kind"], problem.get("node"), problem.get("detail") or ""
    where = node_name(node)
    others = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    prefix = f"storage path {path}"
    if kind == "unseen":
        home = f" ({detail}: each node has its own ~)" if path.startswith("~") else ""
        return UsageError(
            f"{prefix} is not shared by every node: {where} does not see what the head wrote "
            f"there{home}{others}; {SHARED_FIX}"
        )
    if kind == "head-unseen":
        return UsageError(
            f"{prefix} is not shared by every node: the head does not see what {where} wrote "
            f"there{others}; {SHARED_FIX}"
        )
    if kind in _STATES:
        fix = _HEAD_FIXES[kind] if node is None else f"make it {_STATES[kind]} by every node"
        return UsageError(f"{prefix} is not {_STATES[kind]} from {where} ({detail}){others}; {fix}")
    if kind == "unanswered":
        return LauncherError(
            f"could not check {prefix}: {where} did not answer in time{others}; "
            "see `launcher status` for the state of its nodes"
        )
    return LauncherError(f"could not check {prefix} from {where}: {detail}{others}")
