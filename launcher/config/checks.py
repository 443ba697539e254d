"""Checks on a merged config that a JSON schema cannot express.

They run even when the schema found problems, so every problem is reported at once;
each check therefore skips values of the wrong shape (the schema reports those).
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from launcher.config.problems import Problem, Severity, YamlPath, did_you_mean

_RAY_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "TPU")


def as_count(value: object) -> int | None:
    """A whole number as YAML and JSON schema see it (3 and 3.0 alike), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def non_finite_problems(data: object, path: YamlPath = ()) -> list[Problem]:
    """Every .nan, .inf or -.inf anywhere in `data`: no setting takes one, and arithmetic
    on one fails or runs away far from where it was written."""
    if isinstance(data, float) and not math.isfinite(data):
        what = "is not a number (.nan)" if math.isnan(data) else f"is infinite ({_inf(data)})"
        return [Problem(path, what, "write a finite number such as 1.5")]
    if isinstance(data, Mapping):
        return [p for key, value in data.items() for p in non_finite_problems(value, (*path, key))]
    if isinstance(data, list):
        return [p for i, value in enumerate(data) for p in non_finite_problems(value, (*path, i))]
    return []


def _inf(value: float) -> str:
    return ".inf" if value > 0 else "-.inf"


def _node_types(merged: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    types = merged.get("available_node_types")
    if not isinstance(types, Mapping):
        return {}
    return {str(k): v for k, v in types.items() if isinstance(v, Mapping)}


def effective_max_workers(
    name: str, node_type: Mapping[str, Any], head_type: object, global_max: int
) -> int | None:
    """A type's max_workers, defaulting to the global cap (0 for the head's own type)."""
    if "max_workers" in node_type:
        return as_count(node_type["max_workers"])
    return 0 if name == head_type else global_max


def check_config(
    merged: Mapping[str, Any], cwd: Path, *, local_files: bool = True
) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_head_type(merged)
    problems += _check_counts(merged)
    problems += _check_resource_names(merged)
    problems += _check_mount_targets(merged)
    if local_files:
        problems += _check_files(merged, cwd)
    problems += _check_docker(merged)
    problems += _check_fallbacks(merged)
    auth = merged.get("auth")
    if (
        isinstance(auth, Mapping)
        and auth.get("ssh_proxy_use_node_id") is True
        and "ssh_proxy_command" not in auth
    ):
        problems.append(
            Problem(
                ("auth", "ssh_proxy_use_node_id"),
                "needs auth.ssh_proxy_command",
                "set ssh_proxy_command, or remove ssh_proxy_use_node_id",
            )
        )
    return problems


def _check_head_type(merged: Mapping[str, Any]) -> list[Problem]:
    types = _node_types(merged)
    head = merged.get("head_node_type")
    if not types:
        if "available_node_types" in merged and isinstance(merged["available_node_types"], Mapping):
            return [
                Problem(
                    ("available_node_types",),
                    "no node types defined",
                    "define at least the head node's type",
                )
            ]
        return []
    if head is None:
        return [
            Problem(
                ("head_node_type",),
                "is not set",
                "name the head node's type, one of: " + ", ".join(types),
            )
        ]
    if isinstance(head, str) and head not in types:
        fix = _type_hint(head, types)
        return [Problem(("head_node_type",), f"{head!r} is not in available_node_types", fix)]
    return []


def _check_counts(merged: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    global_max = as_count(merged.get("max_workers"))
    head = merged.get("head_node_type")
    total_min = 0
    for name, node_type in _node_types(merged).items():
        low = as_count(node_type.get("min_workers", 0))
        if low is None or low < 0:
            continue
        total_min += low
        explicit = "max_workers" in node_type
        if global_max is None and not explicit:
            continue
        high = effective_max_workers(name, node_type, head, global_max or 0)
        if high is not None and high >= 0 and low > high:
            problems.append(
                Problem(
                    ("available_node_types", name, "max_workers" if explicit else "min_workers"),
                    f"min_workers ({low}) is more than max_workers ({high}"
                    + ("" if explicit else ", from the cluster-wide max_workers")
                    + ")",
                    f"raise max_workers to at least {low} or lower min_workers",
                    uses=() if explicit else (("max_workers",),),
                )
            )
    if not problems and global_max is not None and 0 <= global_max < total_min:
        problems.append(
            Problem(
                ("max_workers",),
                f"{global_max} is less than the sum of min_workers over node types ({total_min})",
                f"raise max_workers to at least {total_min} or lower some min_workers",
            )
        )
    return problems


def _check_resource_names(merged: Mapping[str, Any]) -> Iterator[Problem]:
    for name, node_type in _node_types(merged).items():
        resources = node_type.get("resources")
        if not isinstance(resources, Mapping):
            continue
        for key in resources:
            guess = did_you_mean(str(key), _RAY_RESOURCES)
            if (
                key not in _RAY_RESOURCES
                and guess is not None
                and guess.lower() == str(key).lower()
            ):
                yield Problem(
                    ("available_node_types", name, "resources", key),
                    f"`{key}` is a custom resource, not Ray's `{guess}`",
                    f"write `{guess}` (resource names are case-sensitive)",
                    severity=Severity.WARNING,
                )


def _check_mount_targets(merged: Mapping[str, Any]) -> Iterator[Problem]:
    mounts = merged.get("file_mounts")
    if not isinstance(mounts, Mapping):
        return
    for remote in mounts:
        text = str(remote)
        if not (text.startswith("/") or text.startswith("~")):
            yield Problem(
                ("file_mounts", remote),
                "remote path is relative",
                "write an absolute path or one starting with ~/",
            )
        elif ".." in text.split("/"):
            yield _dotdot_target(text)


def _dotdot_target(remote: str) -> Problem:
    """A file mount target with `..`: where it climbs to, and the path to write instead.
    (A node resolves `..` after symlinks, so such a path need not land where it reads.)"""
    path = ("file_mounts", remote)
    fix = "write the target {} without `..`"
    if remote == "~" or remote.startswith("~/"):
        inside = posixpath.normpath(remote[2:] or ".")
        if inside == ".." or inside.startswith("../"):
            return Problem(
                path,
                "remote path climbs with `..` outside the home directory it starts from",
                fix.format("inside ~/, or as an absolute path,"),
            )
        meant = "~" if inside == "." else f"~/{inside}"
    else:
        meant = posixpath.normpath(remote)
        home = _named_home(remote)
        if home and meant != home and not meant.startswith(home + "/"):
            return Problem(
                path,
                f"remote path climbs with `..` out of the home directory it names ({home})",
                fix.format(f"as {meant}, if that is meant,"),
            )
    # Ray takes it, and it stays where it says unless a symlink on the node moves it: a
    # warning, not a refusal.
    return Problem(
        path,
        f"remote path has `..` (it means {meant} unless a symlink on the node leads elsewhere)",
        fix.format(f"as {meant},"),
        severity=Severity.WARNING,
    )


def _named_home(remote: str) -> str | None:
    """The home directory an absolute path starts in (`/home/u`, `/root`), if any."""
    parts = remote.split("/")
    if len(parts) > 2 and parts[1] == "home" and parts[2] not in ("", ".", ".."):
        return f"/home/{parts[2]}"
    if len(parts) > 1 and parts[1] == "root":
        return "/root"
    return None


def _check_files(merged: Mapping[str, Any], cwd: Path) -> Iterator[Problem]:
    mounts = merged.get("file_mounts")
    if isinstance(mounts, Mapping):
        for remote, local in mounts.items():
            if isinstance(local, str) and not (cwd / Path(local).expanduser()).exists():
                yield Problem(
                    ("file_mounts", remote),
                    f"local path {local} does not exist",
                    "fix the path (relative paths start from where you run launcher)",
                )
    auth = merged.get("auth")
    if isinstance(auth, Mapping):
        for key in ("ssh_private_key", "ssh_public_key"):
            value = auth.get(key)
            if isinstance(value, str) and not (cwd / Path(value).expanduser()).is_file():
                # A warning: the config may be checked on another machine than the one it
                # runs from. The commands that log in to nodes refuse (providers.factory).
                yield Problem(
                    ("auth", key),
                    f"file {value} is not on this machine",
                    "`up`, `exec` and the other commands that log in to the nodes need it "
                    "here; fix the path, or remove the key to let the launcher manage one",
                    severity=Severity.WARNING,
                )


def _check_docker(merged: Mapping[str, Any]) -> Iterator[Problem]:
    """With containers, every node needs an image and the container a name (as Ray asks)."""
    docker = merged.get("docker")
    if not isinstance(docker, Mapping):
        return
    types = _node_types(merged)
    own = {
        name: _text(node_type.get("docker"), "worker_image") for name, node_type in types.items()
    }
    image = _text(docker, "image")
    named = (image, _text(docker, "head_image"), _text(docker, "worker_image"), *own.values())
    if not any(named):
        return
    if docker.get("container_name") == "":
        yield Problem(
            ("docker", "container_name"),
            "is empty, but an image is named",
            'name the container (Ray\'s examples use "ray_container"), or remove the images',
        )
    if not (image or _text(docker, "head_image")):
        yield Problem(
            ("docker",),
            "names no image for the head node",
            "set docker.image (or docker.head_image)",
        )
    head = merged.get("head_node_type")
    global_max = as_count(merged.get("max_workers")) or 0
    for name, node_type in types.items():
        if name == head and effective_max_workers(name, node_type, head, global_max) == 0:
            continue  # only ever the head
        if not (own[name] or _text(docker, "worker_image") or image):
            yield Problem(
                ("available_node_types", name),
                f"workers of {name} have no image (docker names images for some nodes only)",
                f"set docker.image or docker.worker_image, or {name}'s docker.worker_image",
            )


def _text(section: object, key: str) -> str | None:
    value = section.get(key) if isinstance(section, Mapping) else None
    return value if isinstance(value, str) and value else None


def _check_fallbacks(merged: Mapping[str, Any]) -> Iterator[Problem]:
    """metadata.launcher.fallbacks: every name a node type, never itself, and each fallback
    a type that can launch workers (the head type's fallbacks are heads: a recovering run
    brings up its first one after a spot head is taken back)."""
    metadata = merged.get("metadata")
    own = metadata.get("launcher") if isinstance(metadata, Mapping) else None
    fallbacks = own.get("fallbacks") if isinstance(own, Mapping) else None
    types = _node_types(merged)
    if not isinstance(fallbacks, Mapping) or not types:
        return
    base: tuple[str, ...] = ("metadata", "launcher", "fallbacks")
    global_max = as_count(merged.get("max_workers")) or 0
    head = merged.get("head_node_type")
    for name, targets in fallbacks.items():
        if name not in types:
            yield _unknown_type((*base, name), str(name), types, "a fallback is listed for")
            continue
        listed = [targets] if isinstance(targets, str) else targets
        if not isinstance(listed, list):
            continue
        for index, target in enumerate(listed):
            path = (*base, name) if isinstance(targets, str) else (*base, name, index)
            if not isinstance(target, str):
                continue
            if target not in types:
                yield _unknown_type(path, target, types, "fallback")
            elif target == name:
                yield Problem(path, f"{name} falls back to itself", f"remove {name} from its list")
            elif (
                name != head and effective_max_workers(target, types[target], head, global_max) == 0
            ):
                yield Problem(
                    path,
                    f"fallback {target} can never launch: its max_workers is 0",
                    f"give {target} a max_workers above 0, or choose another fallback",
                )


def _unknown_type(
    path: tuple[str | int, ...], name: str, types: Mapping[str, Any], what: str
) -> Problem:
    message = f"{what} {name!r}, which is not in available_node_types"
    return Problem(path, message, _type_hint(name, types))


def _type_hint(name: str, types: Mapping[str, Any]) -> str:
    """The fix for a name that is not a node type: the type it probably meant, or all."""
    guess = did_you_mean(name, types)
    return f"did you mean `{guess}`?" if guess else "use one of: " + ", ".join(types)
