"""The typed, immutable cluster config that every command works from after validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from launcher.config.frozen import thaw
from launcher.config.problems import Problem

# Ray's AUTOSCALER_METRIC_PORT (ray/autoscaler/_private/constants.py): where Ray's metrics
# discovery expects the autoscaler's metrics by default.
DEFAULT_METRICS_PORT = 44217


class ResourceSource(StrEnum):
    """Where a node type's resources come from."""

    DECLARED = "declared"  # written in the config
    INSTANCE_TABLE = "instance table"  # filled in from the known size of the instance type
    DETECTED = "detected at start"  # Ray detects them when the node starts


@dataclass(frozen=True)
class AuthConfig:
    ssh_user: str | None = None
    ssh_private_key: str | None = None
    ssh_public_key: str | None = None
    ssh_proxy_command: str | None = None
    ssh_proxy_use_node_id: bool = False


@dataclass(frozen=True)
class DockerConfig:
    image: str | None = None
    head_image: str | None = None
    worker_image: str | None = None
    container_name: str = "ray_container"
    pull_before_run: bool = True
    run_options: tuple[str, ...] = ()
    head_run_options: tuple[str, ...] = ()
    worker_run_options: tuple[str, ...] = ()
    disable_automatic_runtime_detection: bool = False
    disable_shm_size_detection: bool = False
    use_podman: bool = False

    @property
    def enabled(self) -> bool:
        """Containers are used when any image is named."""
        return bool(self.image or self.head_image or self.worker_image)


@dataclass(frozen=True)
class NodeTypeDocker:
    pull_before_run: bool | None = None
    worker_image: str | None = None
    worker_run_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeType:
    """One kind of node. `node_config` is opaque here: only its provider reads it."""

    name: str
    node_config: Mapping[str, Any]
    resources: Mapping[str, int]
    resource_source: ResourceSource
    min_workers: int
    max_workers: int
    labels: Mapping[str, str] = field(default_factory=dict)
    idle_timeout_s: float | None = None
    priority: int | None = None
    initialization_commands: tuple[str, ...] | None = None
    worker_setup_commands: tuple[str, ...] | None = None
    docker: NodeTypeDocker | None = None

    def node_config_copy(self) -> dict[str, Any]:
        """A mutable deep copy of `node_config`, for handing to a cloud SDK."""
        result: dict[str, Any] = thaw(self.node_config)
        return result


@dataclass(frozen=True)
class ProviderConfig:
    """The `provider` section. Each provider has a subclass with its own typed fields."""

    type: str
    extra: Mapping[str, Any]
    # The head's Python with Ray, for the launcher's autoscaler there (providers whose head
    # is another machine); None: found on the head (see launcher/runners/ray_node.py).
    head_python: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class Autostop:
    """metadata.launcher.autostop, or what `up --idle-minutes-to-autostop` / `autostop` set."""

    idle_minutes: float
    down: bool = False

    def describe(self) -> str:
        what = "down" if self.down else "stop"
        return f"{what} after {self.idle_minutes:g} min idle"


@dataclass(frozen=True)
class ControllerSettings:
    """metadata.launcher.recover.controller: an always-on machine, reached over SSH, that
    runs a recovering run's supervisor (launcher/runs/controller.py)."""

    host: str
    ssh_user: str
    ssh_port: int = 22
    ssh_private_key: str | None = None  # the cluster's auth.ssh_private_key by default
    python: str | None = None  # a Python 3.11+ there with the launcher's dependencies

    def __str__(self) -> str:  # as `submit --controller` reads it (loader.split_controller)
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.ssh_user}@{host}:{self.ssh_port}"


@dataclass(frozen=True)
class RecoverSettings:
    """metadata.launcher.recover: how `launcher submit` runs recover (see runs/)."""

    enabled: bool = False
    max_restarts_on_errors: int = 0
    storage_path: str | None = None
    same_head_type: bool = False
    controller: ControllerSettings | None = None


@dataclass(frozen=True)
class NodeCommands:
    """What the updater runs on one node, in order."""

    initialization: tuple[str, ...]
    setup: tuple[str, ...]
    start_ray: tuple[str, ...]


@dataclass(frozen=True)
class ClusterConfig:
    cluster_name: str
    provider: ProviderConfig
    max_workers: int
    upscaling_speed: float
    idle_timeout_minutes: float
    auth: AuthConfig
    docker: DockerConfig
    node_types: Mapping[str, NodeType]
    head_node_type: str
    file_mounts: Mapping[str, str]
    cluster_synced_files: tuple[str, ...]
    file_mounts_sync_continuously: bool
    rsync_exclude: tuple[str, ...]
    rsync_filter: tuple[str, ...]
    initialization_commands: tuple[str, ...]
    setup_commands: tuple[str, ...]
    head_setup_commands: tuple[str, ...]
    worker_setup_commands: tuple[str, ...]
    head_start_ray_commands: tuple[str, ...]
    worker_start_ray_commands: tuple[str, ...]
    metadata: Mapping[str, Any]
    # metadata.launcher.fallbacks: node type -> types to launch instead, in order.
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    autostop: Autostop | None = None  # metadata.launcher.autostop
    recover: RecoverSettings = field(default_factory=RecoverSettings)
    # metadata.launcher.env: names of variables passed from this machine (values never here)
    env_names: tuple[str, ...] = ()
    node_overhead: float | None = None  # metadata.launcher.node_overhead (None: the planner's)
    # metadata.launcher: bounds on what runs on nodes (None: no limit on setup commands)
    command_timeout_s: float | None = None
    silence_warning_s: float = 300.0
    ray_start_timeout_s: float = 300.0
    # metadata.launcher.metrics_port: the autoscaler's Prometheus endpoint (0: none); Ray's
    # AUTOSCALER_METRIC_PORT by default.
    metrics_port: int = DEFAULT_METRICS_PORT
    no_restart: bool = False
    source: str | None = None
    warnings: tuple[Problem, ...] = ()

    @property
    def head_type(self) -> NodeType:
        return self.node_types[self.head_node_type]

    def commands_for(self, node_type: str, *, head: bool) -> NodeCommands:
        """The commands a node of `node_type` runs, with per-type overrides applied.

        A node type's `initialization_commands` replace the cluster-wide ones; on workers a
        node type's `worker_setup_commands` replace both `setup_commands` and
        `worker_setup_commands`.
        """
        kind = self.node_types[node_type]
        init = (
            kind.initialization_commands
            if kind.initialization_commands is not None
            else self.initialization_commands
        )
        if head:
            return NodeCommands(
                init, self.setup_commands + self.head_setup_commands, self.head_start_ray_commands
            )
        setup = (
            kind.worker_setup_commands
            if kind.worker_setup_commands is not None
            else self.setup_commands + self.worker_setup_commands
        )
        return NodeCommands(init, setup, self.worker_start_ray_commands)
