"""The node updater: wait for a node, sync files, run setup, start Ray; skip what is done.

The decision of what to run is a pure function of the node's tags and the desired hashes;
the updater then acts through the provider and a `CommandRunner`.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from launcher import secret_env
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, NodeUpdateError
from launcher.events import EventSink, Message, NodeProgress
from launcher.paths import node_log
from launcher.providers.base import (
    TAG_SETUP_HASH,
    TAG_START_HASH,
    TAG_STATUS,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    NodeStatus,
)
from launcher.runners.base import CommandResult, CommandRunner, wait_until_ready
from launcher.runners.container import ContainerError, ContainerRunner
from launcher.runners.filters import filter_excludes
from launcher.runners.shell import append_to_log
from launcher.updater.bootstrap import (
    BOOTSTRAP_CONFIG,
    bootstrap_config_text,
    names_bootstrap_config,
)
from launcher.updater.bounds import (
    Bound,
    command_problem,
    joins_address,
    ray_start_bound,
    setup_bound,
)
from launcher.updater.hashing import NodeHashes, node_hashes
from launcher.updater.runner import node_runner
from launcher.updater.silence import SilenceWatch

# The lines an update begins, and a failed one ends, the node's log with (what `up` reads
# back to say why a worker failed).
UPDATING_LINE = "launcher: updating "
FAILED_LINE = "launcher: failed while "


@dataclass(frozen=True)
class UpdateSteps:
    sync_files: bool
    setup: bool
    start_ray: bool

    @property
    def nothing(self) -> bool:
        return not (self.sync_files or self.setup or self.start_ray)


def upload_excludes(config: ClusterConfig, source: Path) -> tuple[str, ...]:
    """What a copy of directory `source` to a node leaves out: `rsync_exclude`, and the
    files that `rsync_filter`'s ignore files name."""
    return config.rsync_exclude + filter_excludes(source, config.rsync_filter)


def decide_steps(
    tags: Mapping[str, str],
    hashes: NodeHashes,
    *,
    ray_running: bool,
    restart_only: bool = False,
    no_restart: bool = False,
    sync_always: bool = False,
    ray_only: bool = False,
) -> UpdateSteps:
    """What a node needs, from what was last applied to it (its tags). `sync_always`
    (file_mounts_sync_continuously): file mounts are copied even when nothing changed.

    The setup hash is tagged only when a whole update succeeds, so a node carrying the
    current one has its files and setup on disk whatever its status says: a stopped worker
    started again, or a node whose Ray failed to start, only gets Ray started (a new
    container, which holds none of it, is set up again by the updater)."""
    setup_changed = tags.get(TAG_SETUP_HASH) != hashes.setup
    start_changed = tags.get(TAG_START_HASH) != hashes.start
    if ray_only:
        return UpdateSteps(sync_files=False, setup=False, start_ray=True)
    if restart_only:
        return UpdateSteps(sync_files=True, setup=False, start_ray=True)
    setup = setup_changed
    start = not ray_running or ((setup or start_changed) and not no_restart)
    return UpdateSteps(sync_files=setup or sync_always, setup=setup, start_ray=start)


def steps_for(
    config: ClusterConfig, node: Node, hashes: NodeHashes, options: UpdateOptions
) -> UpdateSteps:
    """What `node` needs to be brought up to date with `options` (`decide_steps` on what
    it is tagged with and what it runs)."""
    return decide_steps(
        node.tags,
        hashes,
        ray_running=node.state is NodeState.RUNNING and node.status is NodeStatus.UP_TO_DATE,
        restart_only=options.restart_only,
        no_restart=options.no_restart,
        sync_always=config.file_mounts_sync_continuously,
        ray_only=options.ray_only,
    )


STARTING_RAY = "starting Ray"  # the stage said as a node's start-ray commands begin


@dataclass(frozen=True)
class UpdateOptions:
    cwd: Path
    restart_only: bool = False
    no_restart: bool = False
    ray_only: bool = False  # only start Ray (its setup hash, which is the node's, kept)
    ready_timeout_s: float = 300.0
    command_timeout_s: float | None = None  # None: the config's command_timeout_s
    # False: a failure is raised, but the node is neither tagged failed nor said to have
    # failed (a first try that is tried again: a kept worker started beside its new head).
    tag_failure: bool = True
    # Added to the environment of the node's commands (`up --disable-usage-stats`: Ray's
    # RAY_USAGE_STATS_ENABLED=0 for the head's `ray start`).
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # Variables for the node's Ray whose values must stay out of command lines and logs
    # (`--env`, metadata.launcher.env): kept on the node in its 0600 secrets file, written
    # from standard input before Ray starts. None leaves the node's file as it is.
    secret_env: Mapping[str, str] | None = None


class NodeUpdater:
    def __init__(
        self,
        provider: NodeProvider,
        config: ClusterConfig,
        node: Node,
        head: Node | None,
        options: UpdateOptions,
        events: EventSink,
    ) -> None:
        self.provider = provider
        self.config = config
        self.node = node
        self.head = head if node.kind is NodeKind.WORKER else node
        self.options = options
        self.events = events
        self.log_path = node_log(config.cluster_name, node.id)
        self.runner: CommandRunner = node_runner(provider, config, node, self.log_path)
        self.is_head = node.kind is NodeKind.HEAD
        self.hashes = node_hashes(config, node.node_type, head=self.is_head, cwd=options.cwd)
        self._current = "updating"

    def run(self) -> UpdateSteps:
        """Bring the node up to date. Raises NodeUpdateError (and tags the node failed)."""
        steps = steps_for(self.config, self.node, self.hashes, self.options)
        if steps.nothing:
            self._emit("up to date (nothing to do)", done=True)
            return steps
        append_to_log(self.log_path, f"{UPDATING_LINE}{self.node.id}\n")
        try:
            self._stage(NodeStatus.WAITING, "waiting for the node")
            self._wait_ready()
            self._learn_address()
            env = {**self.provider.access.node_env(self.node, self.head), **self.options.extra_env}
            commands = self.config.commands_for(self.node.node_type, head=self.is_head)
            initialization = commands.initialization
            if isinstance(self.runner, ContainerRunner):
                # On the host, before the container exists (as in Ray); then the container.
                # A new container holds nothing of an earlier setup, nor Ray.
                if self._start_container(self.runner, initialization if steps.setup else (), env):
                    steps = UpdateSteps(sync_files=True, setup=True, start_ray=True)
                initialization = ()
            if steps.sync_files:
                self._stage(NodeStatus.SYNCING, "syncing files")
                self._sync_files()
            if steps.setup:
                self._stage(NodeStatus.SETTING_UP, "running setup commands")
                self._run_all((*initialization, *commands.setup), env, self._setup_bound)
            if steps.start_ray:
                self._start_ray(commands.start_ray, env)
        except NodeUpdateError as exc:
            self._failed(exc)
            raise
        except LauncherError as exc:  # the runner's (a host key, a host that is no SSH server)
            failure = self._fail(str(exc))
            self._failed(failure)
            raise failure from exc
        done = {TAG_STATUS: NodeStatus.UP_TO_DATE, TAG_START_HASH: self.hashes.start}
        if not self.options.ray_only:
            done[TAG_SETUP_HASH] = self.hashes.setup
        self.provider.set_tags(self.node.id, done)
        self._emit("up to date", done=True)
        return steps

    def _start_ray(self, start_commands: Sequence[str], env: Mapping[str, str]) -> None:
        self._stage(NodeStatus.STARTING_RAY, STARTING_RAY)
        self._place_bootstrap_config(start_commands)
        bound = ray_start_bound(self.config)
        with self.provider.access.ray_start_guard(self.node):
            problem = self.provider.access.before_ray_start(self.node, self.runner)
            if problem is not None:
                raise self._fail(problem)
            start_env = {**env, **self.provider.access.ray_start_env(self.node)}
            self._keep_secrets()
            # Each start command exports the node's kept variables first (Ray inherits them).
            self._run_all(start_commands, start_env, bound, prefix=secret_env.SOURCE_FILE)
        self._run_all(self.provider.access.after_ray_start(self.node), env, bound)

    def _keep_secrets(self) -> None:
        """Write the node's secrets file from standard input (values in no command line)."""
        if self.options.secret_env is None:
            return
        data = secret_env.script(self.options.secret_env)
        runners = [self.runner]
        if isinstance(self.runner, ContainerRunner):
            runners.append(self.runner.host)  # where the head's autoscaler may run
        for runner in runners:
            result = runner.run(secret_env.WRITE_FILE, stdin=data, timeout=60)
            if not result.ok:
                raise self._fail(
                    f"could not write {secret_env.SECRETS_FILE}: {result.output_tail.strip()}"
                )

    @property
    def _setup_bound(self) -> Bound:
        return setup_bound(self.config, self.options.command_timeout_s)

    def _failed(self, exc: NodeUpdateError) -> None:
        """Say why in the node's log (its last line, read back by `up`), then tag it."""
        if not self.options.tag_failure:
            append_to_log(self.log_path, f"launcher: this try failed ({exc.stage}): {exc.detail}\n")
            return
        append_to_log(self.log_path, f"{FAILED_LINE}{exc.stage}: {exc.detail}\n")
        self.provider.set_tags(self.node.id, {TAG_STATUS: NodeStatus.FAILED})
        self._emit(f"failed while {exc.stage}", detail=str(exc), failed=True)

    def _learn_address(self) -> None:
        """A node whose address was not known when it was listed (a pod gets its IP once it
        runs) is read again now that it answers."""
        if self.node.ip is not None:
            return
        again = next((n for n in self.provider.nodes() if n.id == self.node.id), None)
        if again is not None and again.ip is not None:
            self.node = again
            if self.is_head:
                self.head = again

    def _stage(self, status: NodeStatus, text: str) -> None:
        self.provider.set_tags(self.node.id, {TAG_STATUS: status})
        self._current = text
        self._emit(text)

    def _emit(self, stage: str, detail: str = "", failed: bool = False, done: bool = False) -> None:
        self.events(
            NodeProgress(
                self.node.id,
                self.node.kind.value,
                self.node.node_type,
                self.node.ip,
                stage,
                detail,
                failed,
                done,
            )
        )

    def _fail(self, detail: str) -> NodeUpdateError:
        return NodeUpdateError(self.node.id, self._current, detail, str(self.log_path))

    def _silent(self, command: str, seconds: float) -> None:
        """`command` has printed nothing for `seconds`: say so in its log and to the user."""
        text = (
            f"node {self.node.id} ({self._current}): `{command}` has printed nothing for "
            f"{seconds:g} s and is still running (log: {self.log_path})"
        )
        append_to_log(self.log_path, f"launcher: {text}\n")
        self.events(Message(text, "warning"))

    def _wait_ready(self) -> None:
        problem = wait_until_ready(self.runner, self.options.ready_timeout_s)
        if problem is not None:
            raise self._fail(
                f"not reachable after {self.options.ready_timeout_s:g} s (last error: {problem})"
            )

    def _start_container(
        self, runner: ContainerRunner, on_host: Sequence[str], env: Mapping[str, str]
    ) -> bool:
        """Run `on_host` on the host, then start (or keep) the container. Returns whether
        the container is a new one."""
        if on_host:
            self._stage(NodeStatus.SETTING_UP, "running initialization commands on the host")
            self._run_all(on_host, env, self._setup_bound, runner.host)
        self._stage(NodeStatus.SETTING_UP, f"starting container {runner.spec.name}")
        try:
            started = runner.ensure()
        except ContainerError as exc:
            raise self._fail(str(exc)) from exc
        self._emit(started.message)
        return started.fresh

    def _place_bootstrap_config(self, start_commands: Sequence[str]) -> None:
        """The head's start command may name the config Ray's own autoscaler reads."""
        if not (self.is_head and names_bootstrap_config(start_commands)):
            return
        with tempfile.TemporaryDirectory() as staging:
            local = Path(staging) / "ray_bootstrap_config.yaml"
            local.write_text(bootstrap_config_text(self.config.cluster_name))
            try:
                self.runner.put(str(local), BOOTSTRAP_CONFIG)
            except OSError as exc:
                raise self._fail(str(exc)) from exc

    def _run_all(
        self,
        commands: Sequence[str],
        env: Mapping[str, str],
        bound: Bound,
        runner: CommandRunner | None = None,
        *,
        prefix: str = "",
    ) -> None:
        """Run `commands` in order (each after `prefix`, which errors do not show)."""
        deadline = bound.deadline(time.monotonic())
        for command in commands:
            timeout = bound.timeout_for_next(time.monotonic(), deadline)
            result = self._run_one(command, env, timeout, runner or self.runner, prefix)
            if not result.ok:
                address = joins_address(command, env) if not self.is_head else None
                raise self._fail(command_problem(command, result, bound, address))

    def _run_one(
        self,
        command: str,
        env: Mapping[str, str],
        timeout: float | None,
        runner: CommandRunner,
        prefix: str = "",
    ) -> CommandResult:
        """`command`, stopped after `timeout` s, watched for long silences."""
        silent = functools.partial(self._silent, command)
        with SilenceWatch(self.config.silence_warning_s, silent) as watch:
            return runner.run(prefix + command, env, timeout=timeout, echo=watch.heard)

    def sync_files(self) -> None:
        """Only copy the file mounts (and cluster_synced_files) again; no commands run."""
        self._current = "syncing files"
        self._sync_files()

    def _sync_files(self) -> None:
        try:
            for remote, local in sorted(self.config.file_mounts.items()):
                source = self.options.cwd / Path(local).expanduser()
                if source.is_dir():
                    excludes = upload_excludes(self.config, source)
                    self.runner.put(str(source) + "/", remote.rstrip("/") + "/", excludes=excludes)
                else:
                    self.runner.put(str(source), remote)
            if not self.is_head and self.config.cluster_synced_files and self.head:
                self._sync_from_head()
        except OSError as exc:
            raise self._fail(str(exc)) from exc

    def _sync_from_head(self) -> None:
        assert self.head is not None
        head_runner = node_runner(
            self.provider, self.config, self.head, node_log(self.config.cluster_name, self.head.id)
        )
        with tempfile.TemporaryDirectory() as staging:
            for index, path in enumerate(self.config.cluster_synced_files):
                local = str(Path(staging) / str(index))
                head_runner.get(path.rstrip("/") + "/", local + "/")
                self.runner.put(local + "/", path.rstrip("/") + "/")
