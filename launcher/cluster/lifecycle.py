"""`up` and `down`: bring a cluster to its config, or take it away entirely."""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from launcher import secret_env
from launcher.autoscaler.spec import AutoscalerSpec
from launcher.cluster.head import (
    DaemonStop,
    HeadSession,
    connect,
    ensure_daemon,
    fetch_head_record,
    seconds_from_env,
    stop_daemon,
    stop_wait_s,
)
from launcher.cluster.install import PythonChoice, install_on_head, place_ssh_access
from launcher.cluster.lock import ClusterLock
from launcher.cluster.receipt import bootstrap_key, read_receipt, write_receipt
from launcher.config import validated
from launcher.config.loader import Overrides, parse_config, read_config_file
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, UsageError
from launcher.events import EventSink, Message, NodeProgress
from launcher.ledger.keeping import note_gone, note_listing
from launcher.paths import cluster_dir, launcher_home, node_log
from launcher.pricing.handoff import PriceHandoff, handoff_for
from launcher.providers.base import (
    TAG_STATUS,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    NodeStatus,
    head_of,
)
from launcher.providers.factory import make_provider
from launcher.providers.registry import provider_spec
from launcher.runners.ssh import SSHNotAnsweringError
from launcher.updater.hashing import node_hashes
from launcher.updater.updater import (
    FAILED_LINE,
    UPDATING_LINE,
    NodeUpdater,
    UpdateOptions,
    steps_for,
)

Confirm = Callable[[str], bool]


@dataclass(frozen=True)
class UpOptions:
    restart_only: bool = False
    no_restart: bool = False
    wait_for_workers: bool = True
    workers_timeout_s: float = 600.0
    ready_timeout_s: float = 300.0  # how long to wait for a node to accept commands
    head_type: str | None = None  # the type of a head that must be made (else the config's)
    # Called with the head once its Ray is up, before its autoscaler is installed or started
    # (a run's recovery starts its kept workers' Ray against the new head from here).
    on_head_ready: Callable[[Node], None] | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)  # for the head's commands
    # Variables kept on the nodes for Ray (UpdateOptions.secret_env): `--env` as given
    # (`env_options`) and the config's metadata.launcher.env, read from this machine's
    # environment; or `secret_env` when given (a run's recovery holds them already).
    env_options: tuple[str, ...] = ()
    secret_env: Mapping[str, str] | None = None
    # Skip the provider's bootstrap when the last up's receipt says it bootstrapped this
    # very config and the head is up with nothing to update (cluster/receipt.py); False:
    # `up --no-config-cache`.
    use_receipt: bool = True


SKIPPED_BOOTSTRAP = (
    "cloud resources not checked: the last up made them for this very config "
    "(--no-config-cache checks them)"
)


@dataclass(frozen=True)
class UpResult:
    config: ClusterConfig
    head: Node
    ray_address: str
    created_head: bool
    daemon: str
    workers: tuple[Node, ...] = field(default_factory=tuple)


def load_for_command(
    path: str,
    overrides: Overrides,
    *,
    validated_before: bool = False,
    pending: validated.Pending | None = None,
) -> tuple[ClusterConfig, str]:
    """The config at `path` and its text. `validated_before`: its schema validation is
    skipped if it passed it before (`up`, unless --no-config-cache); a validation that
    passes now is left in `pending` for the caller to keep."""
    text = read_config_file(path)
    config = parse_config(text, path, overrides, validated_before=validated_before, pending=pending)
    return config, text


def refuse_unsupported(config: ClusterConfig, provider: NodeProvider) -> None:
    """Refuse, before anything is created, containers this machine cannot run: where the
    nodes' containers run here (localhost), the engine must be installed here and answer."""
    images = config.docker.enabled or any(
        t.docker is not None and t.docker.worker_image for t in config.node_types.values()
    )
    if not (images and config.docker.container_name) or provider.traits.containers_run != "here":
        return
    engine = "podman" if config.docker.use_podman else "docker"
    fix = (
        "(or set docker.use_podman to use the other engine), or remove the docker section "
        '(or set image: "") to run Ray directly'
    )
    if shutil.which(engine) is None:
        raise UsageError(
            f"{config.source}: the docker section runs each node in a {engine} container on "
            f"this machine, but {engine} is not installed here; install it {fix}"
        )
    try:
        probe = subprocess.run(
            [engine, "version"], capture_output=True, text=True, timeout=30, check=False
        )
        problem = None if probe.returncode == 0 else (probe.stderr.strip().splitlines() or [""])[-1]
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    if problem is not None:
        raise UsageError(
            f"{config.source}: the docker section runs each node in a {engine} container on "
            f"this machine, but `{engine} version` fails here ({problem or 'no output'}); "
            f"start its daemon {fix}"
        )


def _secrets(config: ClusterConfig, options: UpOptions) -> Mapping[str, str] | None:
    """What `up` keeps on the nodes for Ray; None: their files are left as they are."""
    if options.secret_env is not None:
        return options.secret_env
    if not (options.env_options or config.env_names):
        return None
    return secret_env.resolve(options.env_options, config.env_names, os.environ)


def up(
    path: str, overrides: Overrides, options: UpOptions, events: EventSink, confirm: Confirm
) -> UpResult:
    passed = validated.Pending()
    config, text = load_for_command(
        path, overrides, validated_before=options.use_receipt, pending=passed
    )
    provider = make_provider(config)
    refuse_unsupported(config, provider)
    secrets = _secrets(config, options)
    passed.keep()  # accepted: its schema validation is not run again next time
    with ClusterLock(
        config.cluster_name, "launcher up", on_wait=lambda m: events(Message(m, "warning"))
    ):
        update = UpdateOptions(
            cwd=Path.cwd(),
            restart_only=options.restart_only,
            no_restart=options.no_restart,
            ready_timeout_s=options.ready_timeout_s,
            extra_env=options.extra_env,
            secret_env=secrets,
        )
        key = bootstrap_key(text, config.cluster_name)
        current = _current_listing(provider, config, update, key) if options.use_receipt else None
        if current is None:
            for made in provider.bootstrap(options.ready_timeout_s):
                events(Message(made))
        else:
            events(Message(SKIPPED_BOOTSTRAP))
        head, created, listed = _head(provider, config, events, confirm, options.head_type, current)
        note_listing(config, [*listed, head], config_text=text)
        steps = NodeUpdater(
            provider,
            config,
            head,
            None,
            update,
            events,
        ).run()
        # A head the updater left alone is as listed: its record is not read again.
        session = connect(config, provider, head if steps.nothing else None)
        if options.on_head_ready is not None:
            options.on_head_ready(session.head)
        spec = AutoscalerSpec(text, path, overrides, prices=_price_handoff(config))
        python = shlex.quote(provider.access.head_python())
        if provider.traits.installs_launcher_on_head:
            spec, python = _prepare_remote_head(
                session, spec, events, provider.access.ssh_private_key()
            )
        daemon = ensure_daemon(session, spec, python)
        events(Message(f"autoscaler {daemon} on the head"))
        write_receipt(config.cluster_name, key)
    workers: tuple[Node, ...] = ()
    if options.wait_for_workers:
        # When this up changed nothing, the workers are as listed at its start.
        known = listed if steps.nothing and daemon == "running" else None
        workers = wait_for_min_workers(
            provider,
            config,
            events,
            options.workers_timeout_s,
            known,
            functools.partial(worker_failure, session),
        )
    note_listing(config, [session.head, *workers], listed_all=False)
    return UpResult(config, session.head, session.env["RAY_ADDRESS"], created, daemon, workers)


def _price_handoff(config: ClusterConfig) -> PriceHandoff:
    spec = provider_spec(config.provider.type)
    return handoff_for(config, spec) if spec is not None else PriceHandoff()


def _prepare_remote_head(
    session: HeadSession, spec: AutoscalerSpec, events: EventSink, key: str | None
) -> tuple[AutoscalerSpec, str]:
    """Install this launcher on a head that is another machine, and give it SSH access to
    the workers. Returns the autoscaler's spec and the head's Python to run it with."""
    config = session.config
    spec_of = provider_spec(config.provider.type)
    choice = PythonChoice(config.provider.head_python, session.provider.access.ray_paths(head=True))
    wheel, outcome = install_on_head(
        session.runner,
        session.env,
        choice,
        spec_of.sdk_module if spec_of else None,
        spec_of.install_extra if spec_of else None,
    )
    events(Message(f"launcher {outcome} on the head ({wheel.digest})"))
    placed = place_ssh_access(session.runner, session.env, config.cluster_name, key)
    return dataclasses.replace(spec, launcher_digest=wheel.digest, head_key=placed), wheel.python


def _current_listing(
    provider: NodeProvider, config: ClusterConfig, update: UpdateOptions, key: str
) -> list[Node] | None:
    """The cluster's listing when this up need not bootstrap: the last up's receipt names
    `key` and the listing shows one head whose tags say it has nothing to update (as the
    updater would find). None: bootstrap first."""
    if read_receipt(config.cluster_name) != key:
        return None
    listed = provider.nodes()
    heads = [n for n in listed if n.kind is NodeKind.HEAD]
    if len(heads) != 1:
        return None
    head = heads[0]
    hashes = node_hashes(config, head.node_type, head=True, cwd=update.cwd)
    return listed if steps_for(config, head, hashes, update).nothing else None


def _head(
    provider: NodeProvider,
    config: ClusterConfig,
    events: EventSink,
    confirm: Confirm,
    head_type: str | None = None,
    listed: list[Node] | None = None,
) -> tuple[Node, bool, list[Node]]:
    """The head (created when there is none), whether it was created, and the nodes as
    listed before (`listed`: as just listed)."""
    listed = provider.nodes() if listed is None else listed
    taken = [n for n in listed if n.kind is NodeKind.HEAD and n.state is NodeState.PREEMPTED]
    if taken:
        # A head the provider took back (a spot reclaim) runs nothing: a new one replaces it.
        events(Message(f"the head {taken[0].id} was taken back (preempted); replacing it"))
        provider.terminate_nodes([n.id for n in taken])
        listed = [n for n in listed if n not in taken]
    heads = sorted((n for n in listed if n.kind is NodeKind.HEAD), key=lambda n: n.created_at)
    if len(heads) > 1:
        extra = [n.id for n in heads[1:]]
        events(
            Message(
                f"found {len(heads)} head nodes; keeping the oldest, removing " + ", ".join(extra),
                "warning",
            )
        )
        provider.terminate_nodes(extra)
    if heads:
        return heads[0], False, listed
    if not confirm(f"Create a new cluster {config.cluster_name} ({config.provider.type})?"):
        raise LauncherError("cancelled; nothing was created")
    kind = config.node_types[head_type] if head_type else config.head_type
    events(Message(f"creating the head node ({kind.name})"))
    created = provider.create_nodes(
        kind,
        NodeKind.HEAD,
        1,
        {TAG_STATUS: NodeStatus.UNINITIALIZED},
        request_id=uuid.uuid4().hex,
    )
    return created[0], True, listed


# (a worker, whether it is tagged failed) -> one line naming its failure, or None when its
# log does not end with one (a worker that vanished was preempted or removed, not failed).
FailureReader = Callable[[Node, bool], str | None]


def worker_failure(session: HeadSession, node: Node, tagged_failed: bool) -> str | None:
    """Why worker `node` failed its setup, from its log on the head (where the autoscaler
    set it up), as one line: the node, its stage and why, and where its log is."""
    local, on_head = _worker_log(session, node.id)
    if local is not None:
        text = _tail(local)
    else:
        marks = " ".join(f"-e {shlex.quote(mark)}" for mark in (FAILED_LINE, UPDATING_LINE))
        command = f"grep -a -F {marks} {on_head} 2>/dev/null | tail -n 1"
        result = session.daemon_runner.run(command, session.env, timeout=30)
        text = result.output_tail if result.ok else ""
    why = last_failure(text)
    if why is None and not tagged_failed:
        return None
    what = f"failed while {why}" if why else "failed its setup"
    where = f"full log: {on_head}" if local is not None else f"log on the head: {on_head}"
    return (
        f"worker {node.id} ({node.node_type}) {what} ({where}); the autoscaler replaces "
        f"failed workers: follow it with `launcher monitor {session.config.source}`"
    )


def last_failure(log_text: str) -> str | None:
    """The stage and reason of a node's last update, from its log, when that update failed
    (its last update line is a failure line), else None."""
    for line in reversed(log_text.splitlines()):
        if line.startswith(FAILED_LINE):
            return line[len(FAILED_LINE) :]
        if line.startswith(UPDATING_LINE):
            return None
    return None


def _worker_log(session: HeadSession, node_id: str) -> tuple[Path | None, str]:
    """A worker's log as the autoscaler writes it: a file on this machine where the
    autoscaler runs here (and its path), else its path on the head, for a shell there."""
    path = node_log(session.config.cluster_name, node_id)
    if not session.provider.traits.installs_launcher_on_head:
        return path, str(path)
    return None, "~/.launcher/" + shlex.quote(str(path.relative_to(launcher_home())))


_TAIL_BYTES = 65536


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - _TAIL_BYTES))
            return log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def wait_for_min_workers(
    provider: NodeProvider,
    config: ClusterConfig,
    events: EventSink,
    timeout_s: float,
    listed: Sequence[Node] | None = None,
    why_failed: FailureReader | None = None,
) -> tuple[Node, ...]:
    """Follow the autoscaler bringing up min_workers, reporting each worker's progress.
    `listed`: the nodes as the caller just listed them, looked at before reading again.
    A worker whose setup failed (also one the autoscaler removed before this saw it failed)
    is said as a warning, `why_failed`'s line: the autoscaler replaces it, and a failure
    that passes (a package mirror's hiccup) costs one retry. A second failure of a type in
    one wait ends it (a LauncherError with that line): a setup that failed twice will fail
    again. A wait that times out names the last failure, if any."""
    wanted = {name: t.min_workers for name, t in config.node_types.items() if t.min_workers}
    if not wanted:
        return ()
    deadline = time.monotonic() + timeout_s
    seen: dict[str, str] = {}
    in_setup: dict[str, Node] = {}
    failures = _Failures(events)
    first = [n for n in listed if n.kind is NodeKind.WORKER] if listed is not None else None
    pause = POLL_S[0]
    while True:
        workers = first if first is not None else provider.workers()
        first = None
        before = dict(seen)
        _report_changes(workers, seen, events)
        # Soon again after a change (the next stage is near), else less often: each look
        # is an API call against the account's rate limit (on EC2, DescribeInstances).
        pause = POLL_S[0] if seen != before else min(pause * 2, POLL_S[1])
        ready = [n for n in workers if n.status is NodeStatus.UP_TO_DATE]
        if all(sum(n.node_type == t for n in ready) >= c for t, c in wanted.items()):
            return tuple(ready)
        failures.forget_recovered(workers)
        for node in failure_suspects(in_setup, workers):
            if node.id in failures.read:
                continue  # its log was read once; it is read again only if it fails anew
            failures.read.add(node.id)
            tagged = node.status is NodeStatus.FAILED
            line = why_failed(node, tagged) if why_failed else None
            if line is not None or tagged:
                failures.add(node, line or f"worker {node.id} failed its setup")
        in_setup = {n.id: n for n in workers if n.status is not NodeStatus.UP_TO_DATE}
        if time.monotonic() > deadline:
            raise LauncherError(
                f"workers not ready after {timeout_s:g} s ({len(ready)} of "
                f"{sum(wanted.values())})"
                + (f"; the last failure: {failures.last}" if failures.last else "")
                + f"; see `launcher monitor {config.source}`"
            )
        time.sleep(pause)


SETUP_FAILURES_PER_TYPE = 2  # in one wait for min_workers: the first is retried
POLL_S = (0.25, 1.0)  # between looks at the workers: after a change, and at the longest


class _Failures:
    """The worker failures one wait has seen, by node type; raises at the second of a type."""

    def __init__(self, events: EventSink) -> None:
        self.events = events
        # Suspects whose log was read (over SSH, on a remote head): not read again each poll
        # while they stay listed failed, or once they are gone.
        self.read: set[str] = set()
        self.seen: set[tuple[str, str]] = set()
        self.by_type: dict[str, int] = {}
        self.last: str | None = None

    def forget_recovered(self, workers: Sequence[Node]) -> None:
        """A node listed again in another state (stopped and started again) may fail anew."""
        self.read -= {n.id for n in workers if n.status is not NodeStatus.FAILED}

    def add(self, node: Node, line: str) -> None:
        if (node.id, line) in self.seen:
            return
        self.seen.add((node.id, line))
        self.last = line
        count = self.by_type[node.node_type] = self.by_type.get(node.node_type, 0) + 1
        if count >= SETUP_FAILURES_PER_TYPE:
            raise LauncherError(f"{line} ({count} workers of type {node.node_type} failed)")
        self.events(Message(line, "warning"))


def _report_changes(workers: Sequence[Node], seen: dict[str, str], events: EventSink) -> None:
    """A progress event for each worker whose status changed since `seen` (updated)."""
    for node in workers:
        if seen.get(node.id) == node.status.value:
            continue
        seen[node.id] = node.status.value
        events(
            NodeProgress(
                node.id,
                "worker",
                node.node_type,
                node.ip,
                node.status.value.replace("-", " "),
                failed=node.status is NodeStatus.FAILED,
                done=node.status is NodeStatus.UP_TO_DATE,
            )
        )


def failure_suspects(in_setup_before: Mapping[str, Node], workers: Sequence[Node]) -> list[Node]:
    """Workers that may have failed their setup: those tagged failed (oldest first), then
    those seen being set up before that are gone now (the autoscaler removes a failed
    worker at once; one may also have been preempted: its log tells)."""
    failed = sorted(
        (n for n in workers if n.status is NodeStatus.FAILED), key=lambda n: n.created_at
    )
    listed = {n.id for n in workers}
    return failed + [n for i, n in in_setup_before.items() if i not in listed]


@dataclass(frozen=True)
class DownResult:
    terminated: tuple[str, ...]
    removed: tuple[str, ...]
    stopped_autoscaler: bool


def down(
    path: str,
    overrides: Overrides,
    *,
    workers_only: bool,
    keep_min_workers: bool,
    events: EventSink,
    confirm: Confirm,
    purge: bool = False,
) -> DownResult:
    config, _ = load_for_command(path, overrides)
    provider = make_provider(config)
    with ClusterLock(
        config.cluster_name, "launcher down", on_wait=lambda m: events(Message(m, "warning"))
    ):
        nodes = provider.nodes()
        targets = _down_targets(config, nodes, workers_only, keep_min_workers)
        if nodes and not confirm(
            f"Terminate {len(targets)} node(s) of cluster {config.cluster_name}?"
        ):
            raise LauncherError("cancelled; nothing was terminated")
        daemon = DaemonStop.NOT_RUNNING
        first: list[Node] = []
        if not workers_only:
            daemon = _stop_autoscaler(config, provider, nodes)
            if daemon is DaemonStop.STOPPED:
                events(Message("autoscaler stopped on the head"))
            if daemon is DaemonStop.UNREACHABLE:
                # An autoscaler may still run there: the head goes first, so that it cannot
                # launch a worker after the workers were terminated.
                first = [n for n in targets if n.kind is NodeKind.HEAD]
                events(
                    Message(
                        "could not reach the head to stop its autoscaler; terminating the "
                        "head first, then listing the cluster's nodes again",
                        "warning",
                    )
                )
                _terminate(provider, first, events)
            if daemon is not DaemonStop.NOT_RUNNING:
                # It may have launched nodes since the listing above: list again.
                nodes = provider.nodes()
                targets = _down_targets(config, nodes, workers_only, keep_min_workers)
        _terminate(provider, targets, events)
        done_first = {n.id for n in first}
        targets = first + [n for n in targets if n.id not in done_first]
        if daemon is DaemonStop.KILLED:
            targets += _terminate_late_arrivals(provider, {n.id for n in targets}, events)
        removed: list[str] = []
        if not workers_only:
            removed = provider.cleanup(purge=purge)
            note_gone(config, "taken down with `launcher down`")
        else:
            gone = {n.id for n in targets}
            note_listing(config, [n for n in nodes if n.id not in gone])
    if not workers_only:
        _remove_cluster_dir(config.cluster_name)
    return DownResult(
        tuple(n.id for n in targets), tuple(removed), daemon is not DaemonStop.NOT_RUNNING
    )


def _terminate(provider: NodeProvider, targets: Sequence[Node], events: EventSink) -> None:
    for node in targets:
        events(NodeProgress(node.id, node.kind.value, node.node_type, node.ip, "terminating"))
    provider.terminate_nodes([n.id for n in targets])
    left = {n.id for n in provider.nodes()} & {n.id for n in targets}
    if left:
        raise LauncherError(f"nodes still present after terminating: {', '.join(left)}")


# How long `down` watches for nodes after it had to kill the autoscaler: a launch call it
# had in flight may still be carried out that long after (the SDKs' read timeout).
# LAUNCHER_LATE_LAUNCH_WATCH_S changes it.
LATE_LAUNCH_WATCH_S = 60.0
LATE_LAUNCH_POLL_S = 5.0


def _terminate_late_arrivals(
    provider: NodeProvider, known: set[str], events: EventSink
) -> list[Node]:
    watch_s = seconds_from_env("LAUNCHER_LATE_LAUNCH_WATCH_S", LATE_LAUNCH_WATCH_S)
    events(
        Message(
            f"the autoscaler did not stop within {stop_wait_s():g} s and was killed; watching "
            f"{watch_s:g} s for instances a launch it had in flight may still make",
            "warning",
        )
    )
    found: list[Node] = []
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        time.sleep(min(LATE_LAUNCH_POLL_S, max(0.0, deadline - time.monotonic())))
        late = [n for n in provider.nodes() if n.id not in known]
        if late:
            known.update(n.id for n in late)
            found += late
            _terminate(provider, late, events)
    return found


def _down_targets(
    config: ClusterConfig, nodes: list[Node], workers_only: bool, keep_min_workers: bool
) -> list[Node]:
    workers = sorted((n for n in nodes if n.kind is NodeKind.WORKER), key=lambda n: n.created_at)
    targets = []
    kept: dict[str, int] = {}
    for node in workers:
        node_type = config.node_types.get(node.node_type)
        keep = node_type.min_workers if (keep_min_workers and node_type) else 0
        healthy = node.status is NodeStatus.UP_TO_DATE
        if healthy and kept.get(node.node_type, 0) < keep:
            kept[node.node_type] = kept.get(node.node_type, 0) + 1
            continue
        targets.append(node)
    if not workers_only:
        targets += [n for n in nodes if n.kind is NodeKind.HEAD]
    return targets


def _stop_autoscaler(
    config: ClusterConfig, provider: NodeProvider, nodes: Sequence[Node]
) -> DaemonStop:
    """Stop the autoscaler on the cluster's head, whatever the head's status tag says: a
    tag is not proof that no autoscaler runs there."""
    head = head_of(nodes)
    if head is None:
        return DaemonStop.NOT_RUNNING
    if head.ip is None:
        return DaemonStop.UNREACHABLE
    session: HeadSession = connect(config, provider, head, any_status=True)
    if head.status is not NodeStatus.UP_TO_DATE and session.daemon_runner.check_ready():
        return DaemonStop.UNREACHABLE  # one try: a head still booting is common here
    try:
        stopped = stop_daemon(session)
    except SSHNotAnsweringError:  # it accepts connections but does not answer (no banner)
        return DaemonStop.UNREACHABLE
    fetch_head_record(session)  # what the autoscaler recorded, now that it is stopped
    return stopped


def _remove_cluster_dir(cluster_name: str) -> None:
    shutil.rmtree(cluster_dir(cluster_name), ignore_errors=True)
