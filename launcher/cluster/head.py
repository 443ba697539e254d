"""The head node of a running cluster: reaching it, and running its autoscaler daemon."""

from __future__ import annotations

import enum
import math
import os
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path

from launcher.autoscaler.spec import (
    HEAD_DIR,
    LOG_FILE,
    PID_FILE,
    SPEC_FILE,
    STARTED_LINE,
    AutoscalerSpec,
)
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, NoClusterError, UsageError
from launcher.ledger.keeping import note_copy
from launcher.ledger.store import head_record_path, parse_record
from launcher.paths import node_log
from launcher.providers.base import Node, NodeProvider, NodeStatus
from launcher.providers.factory import make_provider
from launcher.runners.base import CommandRunner
from launcher.runners.container import host_runner
from launcher.updater.runner import node_runner

DIGEST_FILE = f"{HEAD_DIR}/autoscaler.digest"


@dataclass
class HeadSession:
    """The head node and how to run things on it, with Ray's address in the environment."""

    config: ClusterConfig
    provider: NodeProvider
    head: Node
    runner: CommandRunner  # in the head's container, when it has one
    env: dict[str, str]
    # Where the autoscaler runs: with the head's Ray (in its container) where the head is a
    # machine of its own; on this machine's host where the head shares this machine.
    daemon_runner: CommandRunner


def connect(
    config: ClusterConfig,
    provider: NodeProvider | None = None,
    head: Node | None = None,
    *,
    any_status: bool = False,
) -> HeadSession:
    """The head of a running cluster. `head`: its node when the caller just listed it (the
    provider's nodes are not read again). `any_status`: whatever its status tag says (a
    tag a killed launcher's late call overwrote can say "setting-up" on a head that runs
    the autoscaler)."""
    provider = provider or make_provider(config)
    head = head or provider.head()
    if head is None or (head.status is not NodeStatus.UP_TO_DATE and not any_status):
        state = "is not running" if head is None else f"head is {head.status.value}"
        raise NoClusterError(
            f"cluster {config.cluster_name} {state}; start it with "
            f"`launcher up {config.source or 'CLUSTER.yaml'}`"
        )
    # Through the head's container when it has one: Ray, and the autoscaler, are in it.
    runner = node_runner(provider, config, head, node_log(config.cluster_name, head.id))
    env = provider.access.node_env(head, head)
    env["RAY_ADDRESS"] = provider.access.ray_address(head)
    # Ray's own autoscaler runs read-only beside ours and would tell drivers that no node
    # type fits their demand; that is our job, so its scheduler events are turned off.
    env["RAY_SCHEDULER_EVENTS"] = "0"
    return HeadSession(config, provider, head, runner, env, daemon_runner_of(provider, runner))


def daemon_runner_of(provider: NodeProvider, head_runner: CommandRunner) -> CommandRunner:
    """Where the autoscaler (and its files) are, given the head's runner: with the head's
    Ray (in its container) where the head is a machine of its own; on this machine's host
    where the head shares this machine."""
    return head_runner if provider.traits.installs_launcher_on_head else host_runner(head_runner)


def read_head_file(session: HeadSession, path: str) -> str | None:
    result = session.daemon_runner.run(f"cat {path} 2>/dev/null", session.env)
    return result.output_tail if result.ok else None


# The autoscaler runs: its pid file names a process that is the autoscaler (after the head
# was stopped and started, the file's pid may be another process's).
DAEMON_ALIVE = (
    f"test -f {PID_FILE} && grep -qa launcher.autoscaler /proc/$(cat {PID_FILE})/cmdline "
    "2>/dev/null"
)


def daemon_running(session: HeadSession) -> bool:
    check = DAEMON_ALIVE
    return session.daemon_runner.run(check, session.env).ok


def running_daemon_digest(session: HeadSession) -> str | None:
    """The spec digest of the autoscaler running on the head ("" when not recorded), or
    None when none runs. One command."""
    check = f"{DAEMON_ALIVE} || exit 3; cat {DIGEST_FILE} 2>/dev/null; true"
    result = session.daemon_runner.run(check, session.env)
    if not result.ok:
        return None
    lines = result.output_tail.strip().splitlines()
    return lines[-1].strip() if lines else ""


def ensure_daemon(session: HeadSession, spec: AutoscalerSpec, python: str) -> str:
    """Start the autoscaler on the head with `python` (a shell word), or restart it if its
    spec changed. Returns what was done: "started", "restarted" or "running"."""
    digest = running_daemon_digest(session)
    running = digest is not None
    if digest == spec.digest:
        return "running"
    if running:
        stop_daemon(session)
    write_spec(session, spec)
    # `&` on the daemon alone, so the shell holds no pipe of ours open while it runs.
    # Started once its first log line is written after the lines already there; a daemon
    # that dies at once is reported with the end of its log.
    # The spec's copy has the runner's mode: made 0600 here, in the same round trip.
    start = (
        f"cd ~ || exit 1; chmod 600 {SPEC_FILE} || exit 3; "
        f"touch {LOG_FILE}; before=$(wc -l < {LOG_FILE}); "
        f"nohup {python} -m launcher.autoscaler --spec {SPEC_FILE} "
        f">> {LOG_FILE} 2>&1 < /dev/null & pid=$!; echo $pid > {PID_FILE}; "
        f"echo {spec.digest} > {DIGEST_FILE}; "
        "for i in $(seq 150); do "
        f"tail -n +$((before + 1)) {LOG_FILE} | grep -q '{STARTED_LINE}' && exit 0; "
        f"kill -0 $pid 2>/dev/null || {{ tail -n +$((before + 1)) {LOG_FILE} | tail -n 20; "
        "exit 4; }; sleep 0.1; done; echo 'it did not report starting within 15 s'; exit 5"
    )
    result = session.daemon_runner.run(start, session.env)
    if not result.ok:
        raise LauncherError(f"could not start the autoscaler on the head: {result.output_tail}")
    return "restarted" if running else "started"


# The head's directory of the launcher, and its autoscaler's: only its user may enter them.
_PRIVATE_DIRS = f"{posixpath.dirname(HEAD_DIR)} {HEAD_DIR}"


def write_spec(session: HeadSession, spec: AutoscalerSpec) -> None:
    """Put the autoscaler's spec on the head. It holds the whole config, with any
    credentials it names: in a 0700 directory (made so in the same command, and made so
    again if an earlier version left it open), as every secret we write; the command that
    starts the daemon makes the file itself 0600 (the copy's mode is the runner's)."""
    private = session.daemon_runner.run(
        f"umask 077 && mkdir -p {HEAD_DIR} && chmod 700 {_PRIVATE_DIRS}", session.env
    )
    if not private.ok:
        raise LauncherError(f"could not make {HEAD_DIR} on the head: {private.output_tail}")
    with tempfile.TemporaryDirectory() as staging:
        local = Path(staging) / "autoscaler.json"
        local.touch(mode=0o600)
        local.write_text(spec.to_json())
        session.daemon_runner.put(str(local), SPEC_FILE)


# The autoscaler exits once the cloud has answered its launches in flight. Killed in the
# middle of one, it would let the cloud make instances after `down` has listed the nodes:
# so it is given as long as one call may take (the SDKs' read timeouts are about a minute).
# LAUNCHER_AUTOSCALER_STOP_WAIT_S changes it.
STOP_WAIT_S = 90.0


class DaemonStop(enum.Enum):
    NOT_RUNNING = "not running"
    STOPPED = "stopped"  # exited by itself once asked
    KILLED = "killed"  # did not exit in time: a launch it had in flight may still land
    UNREACHABLE = "unreachable"  # the head did not answer: it may still be running


def stop_wait_s() -> float:
    return seconds_from_env("LAUNCHER_AUTOSCALER_STOP_WAIT_S", STOP_WAIT_S)


def seconds_from_env(name: str, default: float) -> float:
    """A number of seconds from environment variable `name`, else `default`."""
    value = os.environ.get(name, "")
    try:
        seconds = float(value) if value else default
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a number of seconds") from None
    if not math.isfinite(seconds):
        raise UsageError(f"{name}={value!r} is not a number of seconds")
    return max(0.0, seconds)


def stop_daemon(session: HeadSession) -> DaemonStop:
    """Stop the autoscaler and wait for it to exit (killing it after `stop_wait_s()`)."""
    tenths = max(1, round(stop_wait_s() * 10))
    stop = (
        f"{DAEMON_ALIVE} || exit 3; pid=$(cat {PID_FILE}); kill $pid 2>/dev/null || exit 3; "
        f"for i in $(seq {tenths}); do kill -0 $pid 2>/dev/null || exit 0; "
        "sleep 0.1; done; kill -9 $pid 2>/dev/null; exit 4"
    )
    code = session.daemon_runner.run(stop, session.env).exit_code
    return _STOP_CODES.get(code, DaemonStop.UNREACHABLE)


_STOP_CODES = {0: DaemonStop.STOPPED, 3: DaemonStop.NOT_RUNNING, 4: DaemonStop.KILLED}


def monitor_command(lines: int, follow: bool) -> str:
    return f"tail -n {int(lines)} {'-F' if follow else ''} {LOG_FILE}"


def fetch_head_record(session: HeadSession) -> None:
    """Merge the head's copy of the cluster's record (kept by the autoscaler there) into
    this machine's. A head sharing this machine's records (localhost) has no copy."""
    name = session.config.cluster_name
    copy = parse_record(read_head_file(session, head_record_path(name)))
    if copy is not None:
        note_copy(name, copy)
