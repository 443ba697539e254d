"""Operations on a running cluster: exec, submit, attach, rsync, addresses, status."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher import secret_env
from launcher.autoscaler.spec import SESSIONS_DIR, STATE_FILE
from launcher.cluster.head import (
    HeadSession,
    connect,
    daemon_running,
    fetch_head_record,
    monitor_command,
    read_head_file,
)
from launcher.config.model import ClusterConfig
from launcher.errors import NoClusterError, UsageError
from launcher.ledger.keeping import note_listing
from launcher.paths import node_log
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.factory import make_provider
from launcher.runners.base import CommandRunner, OutputSink
from launcher.runners.container import ContainerRunner, host_runner
from launcher.runners.forward import forwarding
from launcher.updater.runner import node_runner
from launcher.updater.updater import upload_excludes


@dataclass(frozen=True)
class RunOptions:
    screen: bool = False
    tmux: bool = False
    port_forward: tuple[tuple[int, int], ...] = ()
    # Where on the head: "auto" and "docker" in its container when it has one ("docker"
    # refuses a head without one), "host" on its host.
    run_env: str = "auto"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    extra_screen_args: str = ""  # added to `screen` (with screen=True), as `ray submit` does
    # `--env` and metadata.launcher.env: sent on the command's standard input, never in its
    # command line (the head's kept variables, from `up`, are exported first).
    secret_env: Mapping[str, str] = field(default_factory=dict)


def wrap_session(
    command: str,
    *,
    screen: bool,
    tmux: bool,
    folder: str = SESSIONS_DIR,
    screen_args: str = "",
) -> tuple[str, str | None]:
    """The command to run detached in tmux or screen, and the session's name. While the
    command runs there (not the shell left open after it), it counts as an open session."""
    if not (screen or tmux):
        return command, None
    name = f"launcher-{int(time.time())}"
    inner = shlex.quote(f"bash -c {shlex.quote(marked_session(command, folder))}; exec bash")
    if tmux:
        return f"tmux new-session -d -s {name} bash -c {inner}", name
    extra = f"{screen_args} " if screen_args.strip() else ""
    return f"screen {extra}-dmS {name} bash -c {inner}", name


def marked_session(command: str, folder: str = SESSIONS_DIR) -> str:
    """`command` run as an open session on the head, which autostop waits for: a file named
    by the shell's process id while it runs (its `exec` keeps that id), holding the id and
    the process's start time (so a later process given the same id is not taken for it)."""
    started = "$(sed 's/.*) //' /proc/$$/stat 2>/dev/null | cut -d' ' -f20)"
    return (
        f'mkdir -p {folder} && echo "$$ {started}" > {folder}/$$; '
        f"trap 'rm -f {folder}/$$' EXIT; {command}"
    )


@contextlib.contextmanager
def _forwarded(session: HeadSession, ports: Sequence[tuple[int, int]]) -> Iterator[None]:
    if not ports:
        yield
        return
    # To the head's host: a container shares its network (--net=host).
    opener = session.provider.access.port_opener(session.head, host_runner(session.runner))
    with forwarding(list(ports), opener):
        yield


def exec_on_head(
    config: ClusterConfig, command: str, options: RunOptions, echo: OutputSink
) -> tuple[int, str | None]:
    """Run `command` on the head with RAY_ADDRESS set. Returns exit code and tmux/screen name."""
    return _run(connect(config), command, options, echo)


def submit_script(
    config: ClusterConfig, script: str, args: Sequence[str], options: RunOptions, echo: OutputSink
) -> tuple[int, str | None]:
    """Copy `script` to the head's home and run it there with Python."""
    session = connect(config)
    name = Path(script).name
    session.runner.put(script, f"~/{name}")
    command = " ".join(["python", f"~/{shlex.quote(name)}", *map(shlex.quote, args)])
    return _run(session, command, options, echo)


def _run(
    session: HeadSession, command: str, options: RunOptions, echo: OutputSink
) -> tuple[int, str | None]:
    runner = _runner_for(session, options.run_env)
    env = {**session.env, **options.extra_env}
    if options.tmux:
        line, stdin, name = _in_tmux(command, options)
    else:
        wrapped, name = wrap_session(
            command, screen=options.screen, tmux=False, screen_args=options.extra_screen_args
        )
        line, stdin = with_secrets(marked_session(wrapped), options)
    with _forwarded(session, options.port_forward):
        result = runner.run(line, env, echo=echo, stdin=stdin)
    return result.exit_code, name


def _in_tmux(command: str, options: RunOptions) -> tuple[str, bytes | None, str | None]:
    """The line starting `command` in a detached tmux session, its standard input and the
    session's name. A tmux server already running does not take this shell's environment:
    the session reads the head's kept variables itself, and `options.secret_env` from a
    one-use file this line writes from its standard input (removed if tmux fails)."""
    if not options.secret_env:
        wrapped, name = wrap_session(secret_env.SOURCE_FILE + command, screen=False, tmux=True)
        return marked_session(wrapped), None, name
    handed = secret_env.handed_file()
    in_session = secret_env.SOURCE_FILE + secret_env.load_handed(handed) + command
    wrapped, name = wrap_session(in_session, screen=False, tmux=True)
    line = (
        f"{secret_env.store_handed(handed)} || exit 97; "
        f"{{ {marked_session(wrapped)}; }} || {{ code=$?; rm -f {handed}; exit $code; }}"
    )
    return line, secret_env.script(options.secret_env), name


def with_secrets(command: str, options: RunOptions) -> tuple[str, bytes | None]:
    """`command` exporting the head's kept variables, then `options.secret_env` from its
    standard input (returned), first."""
    if not options.secret_env:
        return secret_env.SOURCE_FILE + command, None
    line = secret_env.SOURCE_FILE + secret_env.LOAD_FROM_STDIN + command
    return line, secret_env.script(options.secret_env)


def _runner_for(session: HeadSession, run_env: str) -> CommandRunner:
    """The head's runner for `--run-env`: its container's (auto, docker) or its host's."""
    in_container = isinstance(session.runner, ContainerRunner)
    if run_env == "docker" and not in_container:
        raise UsageError(
            "--run-env docker: the head runs no container (the config has no docker "
            "section); use --run-env host or auto"
        )
    return host_runner(session.runner) if run_env == "host" else session.runner


def attach(
    config: ClusterConfig,
    *,
    screen: bool,
    tmux: bool,
    new: bool,
    port_forward: Sequence[tuple[int, int]],
    node_ip: str | None = None,
) -> int:
    session = connect(config)
    if node_ip is not None and node_ip != session.head.ip:
        session = _on_node(session, node_ip)
    if tmux:
        command = "tmux new" if new else "tmux attach || tmux new"
    elif screen:
        command = "screen -L" if new else "screen -L -xRR"
    else:
        command = "exec bash -i"
    # The shell (or a session started now) has the variables kept on the node, as exec's.
    command = secret_env.SOURCE_FILE + command
    with _forwarded(session, port_forward):
        return session.runner.run(marked_session(command), session.env, interactive=True).exit_code


def _on_node(session: HeadSession, node_ip: str) -> HeadSession:
    """`session` moved to the cluster's running node at `node_ip` (the head's address in
    its environment, as the node's own commands have it)."""
    nodes = session.provider.nodes()
    node = next((n for n in nodes if n.ip == node_ip), None)
    if node is None:
        known = ", ".join(sorted(n.ip for n in nodes if n.ip)) or "none"
        raise UsageError(
            f"--node-ip {node_ip}: no node of cluster {session.config.cluster_name} has that "
            f"IP (its nodes: {known}); see `launcher get-worker-ips`"
        )
    config, provider = session.config, session.provider
    runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
    env = provider.access.node_env(node, session.head)
    env["RAY_ADDRESS"] = session.env["RAY_ADDRESS"]
    return HeadSession(config, provider, node, runner, env, runner)


def show_ray_logs(
    config: ClusterConfig,
    node_ip: str | None,
    lines: int,
    follow: bool,
    pattern: str,
    echo: OutputSink,
) -> int:
    """Print the last `lines` of each of Ray's log files matching `pattern` on the head (or
    the node at `node_ip`), each under its name; with `follow`, then new lines as they are
    written (files made later too) until interrupted. Returns the exit code."""
    from launcher.cluster.dump_plan import ray_logs_path

    if not re.fullmatch(r"[A-Za-z0-9_.*?\[\]-]+", pattern):
        raise UsageError(
            f"--file {pattern!r}: give a file name pattern of letters, digits, '.', '_', "
            "'-' and the wildcards * ? [], such as 'raylet*'"
        )
    session = connect(config)
    if node_ip is not None and node_ip != session.head.ip:
        session = _on_node(session, node_ip)
    folder = ray_logs_path(config, session.head)
    tail = f"tail -n {lines} -v {'-F ' if follow else ''}"
    command = (  # the pattern is a glob of safe characters: expanded by the node's shell
        f"cd {folder} 2>/dev/null || {{ echo 'no Ray logs on this node yet'; exit 1; }}; "
        f"set -- {pattern}; "
        f"[ -e \"$1\" ] || {{ echo 'no log file matches {pattern}'; exit 1; }}; "
        f'exec {tail}-- "$@"'
    )
    result = session.runner.run(command, session.env, echo=echo)
    return result.exit_code


def rsync(
    config: ClusterConfig, source: str, target: str, *, up: bool, all_nodes: bool = False
) -> list[str]:
    """Copy to (`up`) or from the head; with `all_nodes` (up only), to every running node.
    Returns a line per node copied to, when more than the head."""
    session = connect(config)
    if not up:
        session.runner.get(source, target)
        return []
    local = Path(source).expanduser()
    if local.is_dir() and not source.endswith("/"):
        # The directory itself: as its contents into target/NAME, so that excludes
        # anchored at the copy's root mean the same to rsync and to SFTP.
        source, target = f"{source}/", f"{target.rstrip('/')}/{local.name}/"
    excludes = upload_excludes(config, local)
    session.runner.put(source, target, excludes=excludes)
    if not all_nodes:
        return []
    workers = [
        n
        for n in session.provider.nodes()
        if n.kind is NodeKind.WORKER and n.ip and n.state is NodeState.RUNNING
    ]

    def put(node: Node) -> None:
        runner = node_runner(session.provider, config, node, node_log(config.cluster_name, node.id))
        runner.put(source, target, excludes=excludes)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(workers)))) as pool:
        list(pool.map(put, workers))
    return [f"copied to the head and {len(workers)} worker(s)"]


def head_ip(config: ClusterConfig) -> str:
    head = make_provider(config).head()
    if head is None or head.ip is None:
        raise NoClusterError(
            f"cluster {config.cluster_name} is not running; start it with "
            f"`launcher up {config.source or 'CLUSTER.yaml'}`"
        )
    return head.ip


def worker_ips(config: ClusterConfig) -> list[str]:
    return [n.ip for n in make_provider(config).workers() if n.ip]


@dataclass(frozen=True)
class AutoscalerState:
    """What the head's autoscaler last saw and decided."""

    pending: tuple[tuple[dict[str, float], int], ...]
    placement_groups: int
    requested: int
    infeasible: tuple[dict[str, float], ...]
    decisions: tuple[tuple[float, str], ...]
    raw: dict[str, Any]
    launching: tuple[tuple[str, int], ...] = ()  # launches in flight: type, count
    unavailable: tuple[tuple[str, str], ...] = ()  # type, why

    @staticmethod
    def parse(text: str | None) -> AutoscalerState | None:
        try:
            raw = json.loads(text) if text else None
            if not isinstance(raw, dict):
                return None
            return AutoscalerState(
                pending=tuple((dict(p["resources"]), int(p["count"])) for p in raw["pending"]),
                placement_groups=len(raw["placement_groups"]),
                requested=len(raw["requested"]),
                infeasible=tuple(dict(r) for r in raw["infeasible"]),
                decisions=tuple((float(d["time"]), str(d["text"])) for d in raw["decisions"]),
                raw=raw,
                launching=tuple(
                    (str(p["node_type"]), int(p["count"])) for p in raw.get("pending_launches", [])
                ),
                unavailable=tuple(
                    (str(k), str(v)) for k, v in sorted(raw.get("unavailable", {}).items())
                ),
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class ClusterStatus:
    config: ClusterConfig
    nodes: tuple[Node, ...]
    autoscaler_running: bool
    ray_address: str | None
    autoscaler: AutoscalerState | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "cluster_name": self.config.cluster_name,
            "provider": self.config.provider.type,
            "ray_address": self.ray_address,
            "autoscaler_running": self.autoscaler_running,
            "autoscaler": None if self.autoscaler is None else self.autoscaler.raw,
            "nodes": [
                {
                    "id": n.id,
                    "kind": n.kind.value,
                    "node_type": n.node_type,
                    "ip": n.ip,
                    "state": n.state.value,
                    "reclaim_at": n.reclaim_at,
                    "status": n.status.value,
                    "resources": dict(self.config.node_types[n.node_type].resources)
                    if n.node_type in self.config.node_types
                    else {},
                }
                for n in self.nodes
            ],
        }


def status(config: ClusterConfig) -> ClusterStatus:
    provider = make_provider(config)
    nodes = tuple(
        sorted(provider.nodes(), key=lambda n: (n.kind is not NodeKind.HEAD, n.created_at))
    )
    note_listing(config, nodes)
    try:
        session = connect(config, provider)
    except NoClusterError:
        return ClusterStatus(config, nodes, False, None)
    fetch_head_record(session)
    autoscaler = AutoscalerState.parse(read_head_file(session, STATE_FILE))
    return ClusterStatus(
        config, nodes, daemon_running(session), session.env["RAY_ADDRESS"], autoscaler
    )


def monitor(config: ClusterConfig, lines: int, follow: bool, echo: OutputSink) -> int:
    session = connect(config)
    result = session.daemon_runner.run(monitor_command(lines, follow), session.env, echo=echo)
    return result.exit_code
