"""Convert the older cluster format still seen in the wild into node types.

Older Ray configs describe one head and one kind of worker with top-level `head_node`,
`worker_nodes` and `min_workers`, and carry keys that no longer do anything. The
conversion records which new paths came from which old ones, so problems are reported
where the user wrote them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from launcher.config.problems import Problem, Severity, YamlPath

# Keys Ray dropped; they are accepted and ignored, with a warning.
RETIRED_KEYS = {
    "initial_workers": "workers start at min_workers",
    "autoscaling_mode": "the autoscaler always scales on Ray's pending demand",
    "target_utilization_fraction": "the autoscaler scales on Ray's pending demand",
    "worker_default_node_type": "demand picks the node types",
}
LEGACY_KEYS = ("head_node", "worker_nodes", "min_workers", *RETIRED_KEYS)
# Old names inside `docker`: renamed ones map to the new key, None means retired.
DOCKER_KEYS: dict[str, str | None] = {"pull": "pull_before_run", "install_docker": None}

Aliases = dict[YamlPath, YamlPath]


def convert_legacy(
    raw: dict[str, Any], defaults: Mapping[str, Any]
) -> tuple[Aliases, list[Problem]]:
    """Rewrite `raw` in place into the node-types form. Returns path aliases and notes."""
    aliases: Aliases = {}
    problems: list[Problem] = []
    for key, why in RETIRED_KEYS.items():
        if key in raw:
            del raw[key]
            problems.append(
                Problem(
                    (key,),
                    f"no longer has an effect ({why})",
                    "delete it",
                    severity=Severity.WARNING,
                )
            )
    problems += _convert_docker(raw)
    head_node = _pop_mapping(raw, "head_node", problems)
    worker_nodes = _pop_mapping(raw, "worker_nodes", problems)
    has_min = "min_workers" in raw
    min_workers = raw.pop("min_workers", None)
    if "available_node_types" in raw:
        if isinstance(raw["available_node_types"], Mapping):
            _merge_into_types(raw, head_node, worker_nodes, problems)
        if has_min:
            problems.append(
                Problem(
                    ("min_workers",),
                    "has no effect when available_node_types is set",
                    "set min_workers on each node type instead",
                    severity=Severity.WARNING,
                )
            )
        return aliases, problems
    if head_node is None and worker_nodes is None and not has_min:
        return aliases, problems
    head_name, worker_name = _default_type_names(defaults)
    if head_name is None or worker_name is None:
        return aliases, problems
    default_types = defaults["available_node_types"]
    new_types = {
        head_name: copy.deepcopy(default_types[head_name]),
        worker_name: copy.deepcopy(default_types[worker_name]),
    }
    for name, node_config, key in (
        (head_name, head_node, "head_node"),
        (worker_name, worker_nodes, "worker_nodes"),
    ):
        if node_config:
            # The older format wrote a node's Ray resources inside its node settings.
            resources = node_config.pop("resources", None)
            new_types[name]["node_config"] = {**new_types[name]["node_config"], **node_config}
            # A different machine: its resources come from its own size, not the default's.
            new_types[name]["resources"] = resources if resources is not None else {}
            aliases[("available_node_types", name, "node_config")] = (key,)
            if resources is not None:
                aliases[("available_node_types", name, "resources")] = (key, "resources")
    if has_min:
        new_types[worker_name]["min_workers"] = min_workers
        aliases[("available_node_types", worker_name, "min_workers")] = ("min_workers",)
    if "max_workers" in raw:
        new_types[worker_name]["max_workers"] = raw["max_workers"]
        aliases[("available_node_types", worker_name, "max_workers")] = ("max_workers",)
    raw["available_node_types"] = new_types
    raw.setdefault("head_node_type", head_name)
    return aliases, problems


def _pop_mapping(raw: dict[str, Any], key: str, problems: list[Problem]) -> dict[str, Any] | None:
    if key not in raw:
        return None
    value = raw.pop(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(
            Problem(
                (key,),
                f"expected a mapping of node settings, got {type(value).__name__}",
                "write the node_config keys under it, or remove it",
            )
        )
        return None
    return value


def _merge_into_types(
    raw: dict[str, Any],
    head_node: dict[str, Any] | None,
    worker_nodes: dict[str, Any] | None,
    problems: list[Problem],
) -> None:
    """Early multi-type configs used head_node/worker_nodes as shared node_config defaults."""
    if not head_node and not worker_nodes:
        return
    head_type = raw.get("head_node_type")
    for name, node_type in raw["available_node_types"].items():
        if not isinstance(node_type, dict):
            continue
        shared = head_node if name == head_type else worker_nodes
        if not shared:
            continue
        node_config = node_type.get("node_config")
        if isinstance(node_config, dict):
            node_type["node_config"] = {**copy.deepcopy(shared), **node_config}
    problems.append(
        Problem(
            ("head_node",) if head_node else ("worker_nodes",),
            "merged into the node_config of each node type (older format)",
            "move these keys into available_node_types.<type>.node_config",
            severity=Severity.WARNING,
        )
    )


def _default_type_names(defaults: Mapping[str, Any]) -> tuple[str | None, str | None]:
    types = defaults.get("available_node_types") or {}
    head = defaults.get("head_node_type")
    workers = [name for name in types if name != head]
    return head, (workers[0] if workers else None)


def _convert_docker(raw: dict[str, Any]) -> list[Problem]:
    docker = raw.get("docker")
    if not isinstance(docker, dict):
        return []
    problems = []
    for old, new in DOCKER_KEYS.items():
        if old not in docker:
            continue
        value = docker.pop(old)
        if new is None:
            problems.append(
                Problem(
                    ("docker", old),
                    "no longer has an effect",
                    "delete it",
                    severity=Severity.WARNING,
                )
            )
            continue
        docker.setdefault(new, value)
        problems.append(
            Problem(
                ("docker", old),
                f"is the older name of `{new}`",
                f"rename it to `{new}`",
                severity=Severity.WARNING,
            )
        )
    return problems
