"""Turn a validated, merged config dict into the typed `ClusterConfig`."""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from typing import Any

from launcher.config.checks import as_count, effective_max_workers
from launcher.config.frozen import freeze
from launcher.config.model import (
    DEFAULT_METRICS_PORT,
    AuthConfig,
    Autostop,
    ClusterConfig,
    ControllerSettings,
    DockerConfig,
    NodeType,
    NodeTypeDocker,
    RecoverSettings,
    ResourceSource,
)
from launcher.config.problems import Problem
from launcher.providers.spec import ProviderSpec


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _optional_strings(value: object) -> tuple[str, ...] | None:
    return None if value is None else _strings(value)


def build_config(
    merged: Mapping[str, Any], spec: ProviderSpec, source: str, warnings: list[Problem]
) -> ClusterConfig:
    global_max = as_count(merged["max_workers"]) or 0
    head = str(merged["head_node_type"])
    node_types = {
        name: _node_type(name, raw, spec, effective_max_workers(name, raw, head, global_max))
        for name, raw in merged["available_node_types"].items()
    }
    return ClusterConfig(
        cluster_name=str(merged["cluster_name"]),
        provider=spec.build_provider(merged["provider"]),
        max_workers=global_max,
        upscaling_speed=float(merged["upscaling_speed"]),
        idle_timeout_minutes=float(merged["idle_timeout_minutes"]),
        auth=AuthConfig(**merged.get("auth", {})),
        docker=_docker(merged.get("docker") or {}),
        node_types=freeze(node_types),
        head_node_type=head,
        file_mounts=freeze(merged.get("file_mounts", {})),
        cluster_synced_files=_strings(merged.get("cluster_synced_files")),
        file_mounts_sync_continuously=bool(merged.get("file_mounts_sync_continuously", False)),
        rsync_exclude=_strings(merged.get("rsync_exclude")),
        rsync_filter=_strings(merged.get("rsync_filter")),
        initialization_commands=_strings(merged.get("initialization_commands")),
        setup_commands=_strings(merged.get("setup_commands")),
        head_setup_commands=_strings(merged.get("head_setup_commands")),
        worker_setup_commands=_strings(merged.get("worker_setup_commands")),
        head_start_ray_commands=_strings(merged.get("head_start_ray_commands")),
        worker_start_ray_commands=_strings(merged.get("worker_start_ray_commands")),
        metadata=freeze(merged.get("metadata", {})),
        fallbacks=freeze(_fallbacks(merged)),
        autostop=_autostop(merged),
        recover=_recover(merged),
        env_names=_strings(_own(merged).get("env")),
        node_overhead=_own_number(merged, "node_overhead"),
        command_timeout_s=_own_number(merged, "command_timeout_s"),
        silence_warning_s=_own_number(merged, "silence_warning_s") or 300.0,
        ray_start_timeout_s=_own_number(merged, "ray_start_timeout_s") or 300.0,
        metrics_port=int(_own(merged).get("metrics_port", DEFAULT_METRICS_PORT)),
        no_restart=bool(merged.get("no_restart", False)),
        source=source,
        warnings=tuple(warnings),
    )


def _own(merged: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config's `metadata.launcher` section: this launcher's own settings."""
    own = (merged.get("metadata") or {}).get("launcher") or {}
    return own if isinstance(own, Mapping) else {}


def _autostop(merged: Mapping[str, Any]) -> Autostop | None:
    raw = _own(merged).get("autostop")
    if not raw:
        return None
    return Autostop(float(raw["idle_minutes"]), bool(raw.get("down", False)))


def _recover(merged: Mapping[str, Any]) -> RecoverSettings:
    raw = _own(merged).get("recover")
    if raw is None or raw is False:
        return RecoverSettings()
    if raw is True:
        return RecoverSettings(enabled=True)
    path = raw.get("storage_path")
    return RecoverSettings(
        enabled=bool(raw.get("enabled", True)),
        max_restarts_on_errors=int(raw.get("max_restarts_on_errors", 0)),
        storage_path=None if path is None else str(path),
        same_head_type=bool(raw.get("same_head_type", False)),
        controller=_controller(raw.get("controller"), merged.get("auth") or {}),
    )


def _controller(raw: object, auth: Mapping[str, Any]) -> ControllerSettings | None:
    if not isinstance(raw, Mapping):
        return None
    key = raw.get("ssh_private_key") or auth.get("ssh_private_key")
    python = raw.get("python")
    return ControllerSettings(
        host=str(raw["host"]).removeprefix("[").removesuffix("]"),  # [::1] as ::1
        ssh_user=str(raw.get("ssh_user") or getpass.getuser()),
        ssh_port=int(raw.get("ssh_port", 22)),
        ssh_private_key=None if key is None else str(key),
        python=None if python is None else str(python),
    )


def _own_number(merged: Mapping[str, Any], key: str) -> float | None:
    raw = _own(merged).get(key)
    return None if raw is None else float(raw)


def _fallbacks(merged: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    return {
        str(name): (str(targets),) if isinstance(targets, str) else _strings(targets)
        for name, targets in (_own(merged).get("fallbacks") or {}).items()
    }


def _node_type(
    name: str, raw: Mapping[str, Any], spec: ProviderSpec, max_workers: int | None
) -> NodeType:
    node_config = raw.get("node_config") or {}
    declared = {k: as_count(v) or 0 for k, v in (raw.get("resources") or {}).items()}
    # Declared resources win; what they leave out comes from the instance size, as in Ray.
    known = spec.known_resources(node_config) or {}
    resources = {**known, **declared}
    if set(known) - set(declared):
        source = ResourceSource.INSTANCE_TABLE
    else:
        source = ResourceSource.DECLARED if declared else ResourceSource.DETECTED
    docker = raw.get("docker")
    return NodeType(
        name=name,
        node_config=freeze(node_config),
        resources=freeze(resources),
        resource_source=source,
        min_workers=as_count(raw.get("min_workers", 0)) or 0,
        max_workers=int(max_workers or 0),
        labels=freeze(raw.get("labels", {})),
        idle_timeout_s=raw.get("idle_timeout_s"),
        priority=raw.get("priority"),
        initialization_commands=_optional_strings(raw.get("initialization_commands")),
        worker_setup_commands=_optional_strings(raw.get("worker_setup_commands")),
        docker=None
        if docker is None
        else NodeTypeDocker(
            pull_before_run=docker.get("pull_before_run"),
            worker_image=docker.get("worker_image"),
            worker_run_options=_strings(docker.get("worker_run_options")),
        ),
    )


def _docker(raw: Mapping[str, Any]) -> DockerConfig:
    lists = ("run_options", "head_run_options", "worker_run_options")
    fields: dict[str, Any] = {k: v for k, v in raw.items() if k not in lists}
    fields.update({k: _strings(raw[k]) for k in lists if k in raw})
    return DockerConfig(**fields)
