"""Copies of a run on the cluster's nodes, so that a machine other than the one that started
it (with the cluster file) can list it and take it up: each running node keeps
`~/.launcher/runs/RUN/run.json` and the run's script beside it. Written at each change of
the run's state (not at each heartbeat); the head's copy goes with the head, the workers'
stay."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.paths import node_log
from launcher.providers.base import Node, NodeKind, NodeProvider, NodeState
from launcher.runs import store
from launcher.runs.driver import HEAD_RUNS_DIR, head_run_dir
from launcher.runs.model import Run
from launcher.updater.runner import node_runner

_END = "@@launcher-run-end"
_PUSH_TIMEOUT_S = 60


def _running(nodes: Iterable[Node]) -> list[Node]:
    """Running nodes, the head first."""
    alive = [n for n in nodes if n.state is NodeState.RUNNING]
    return sorted(alive, key=lambda n: n.kind is not NodeKind.HEAD)


def push(provider: NodeProvider, config: ClusterConfig, run: Run) -> int:
    """Copy the run (and its script) to every running node; returns how many took it.
    A node that does not is skipped: the copies are for finding the run, not its truth."""
    nodes = _running(provider.nodes())
    if not nodes:
        return 0
    with tempfile.TemporaryDirectory() as staging:
        local = Path(staging) / store.RUN_FILE
        local.touch(mode=0o600)
        local.write_text(run.to_json())
        script = store.script_path(run)
        with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
            done = pool.map(lambda n: _push_one(provider, config, n, run, local, script), nodes)
            return sum(done)


def _push_one(
    provider: NodeProvider, config: ClusterConfig, node: Node, run: Run, local: Path, script: Path
) -> bool:
    runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
    folder = head_run_dir(run.id)
    try:
        made = runner.run(
            f"umask 077 && mkdir -p {folder} && chmod 700 {HEAD_RUNS_DIR}", timeout=_PUSH_TIMEOUT_S
        )
        if not made.ok:
            return False
        runner.put(str(local), f"{folder}/{store.RUN_FILE}")
        if script.is_file():
            runner.put(str(script), f"{folder}/{run.script}")
    except (LauncherError, OSError):
        return False
    return True


def fetch(provider: NodeProvider, config: ClusterConfig) -> list[Run]:
    """The runs the cluster's running nodes keep, the newest copy of each."""
    best: dict[str, Run] = {}
    for node in _running(provider.nodes()):
        for run in _read_node(provider, config, node):
            known = best.get(run.id)
            if known is None or run.updated_at > known.updated_at:
                best[run.id] = run
    return sorted(best.values(), key=lambda r: r.created_at)


def _read_node(provider: NodeProvider, config: ClusterConfig, node: Node) -> list[Run]:
    runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
    lines: list[str] = []
    command = (
        f'for f in {HEAD_RUNS_DIR}/*/{store.RUN_FILE}; do [ -f "$f" ] && '
        f'{{ tr -d "\\n" < "$f"; echo; echo {_END}; }}; done; true'
    )
    try:
        result = runner.run(command, timeout=_PUSH_TIMEOUT_S, echo=lines.append)
    except (LauncherError, OSError):
        return []
    if not result.ok:
        return []
    found = []
    for line in lines:
        if line.startswith("{"):
            try:
                found.append(Run.from_json(line))
            except ValueError:
                continue
    return found


def fetch_script(provider: NodeProvider, config: ClusterConfig, run: Run) -> bool:
    """Bring the run's script from a node that keeps it to this machine's copy."""
    target = store.script_path(run)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for node in _running(provider.nodes()):
        runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
        try:
            runner.get(f"{head_run_dir(run.id)}/{run.script}", str(target))
        except (LauncherError, OSError):
            continue
        if target.is_file():
            return True
    return False
