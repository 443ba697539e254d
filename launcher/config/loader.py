"""Load a cluster YAML: parse, convert the older format, merge defaults, validate, build.

Every problem in the file is collected and raised together in one `ConfigError`;
warnings travel with the resulting `ClusterConfig`.
"""

from __future__ import annotations

import copy
import os
import select
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config import validated
from launcher.config.build import build_config
from launcher.config.checks import check_config, non_finite_problems
from launcher.config.defaults import merge_defaults
from launcher.config.legacy import Aliases, convert_legacy
from launcher.config.model import ClusterConfig
from launcher.config.problems import Problem, YamlPath, describe_value, did_you_mean
from launcher.config.schema import schema_problems, typo_problems
from launcher.config.yamlsource import YamlDocument, parse_yaml
from launcher.errors import ConfigError, UsageError

# The module, not its names: the registry's specs import launcher.config, so whichever of
# the two is imported first, the other is still being initialized.
from launcher.providers import registry
from launcher.providers.spec import ProviderSpec
from launcher.runs.controller_secrets import no_controller

_EMPTY_MEANS_UNSET = ("available_node_types", "head_node_type")


@dataclass(frozen=True)
class Overrides:
    """Command-line values that replace what the file says (`up --max-workers` and such)."""

    cluster_name: str | None = None
    min_workers: int | None = None
    max_workers: int | None = None
    no_restart: bool = False
    controller: str | None = None  # `submit --controller [USER@]HOST[:PORT]`


# No cluster config comes near this (Kubernetes keeps a whole ConfigMap under 1 MiB); the cap
# keeps a wrong path (a log, an image) from filling memory before YAML says it is not YAML.
MAX_CONFIG_BYTES = 4 * 1024 * 1024

# A pipe (`launcher up <(envsubst < c.yaml)`, `... | launcher up /dev/stdin`) is read as it
# comes; one that stays silent this long is refused rather than waited on for ever.
PIPE_WAIT_S = 10.0

_NOT_READABLE = (
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def read_config_file(path: str | Path) -> str:
    """The text of the config file at `path`: a regular file, or a pipe or character device
    read as it comes, of at most MAX_CONFIG_BYTES. Opened without blocking, and a pipe that
    has nothing to say for PIPE_WAIT_S is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; give the path to a cluster YAML file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        _check_kind(path, info)
        try:
            if stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode):
                data = _read_stream(path, file.fileno())
            else:
                data = file.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror})") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(_too_large(path, max(info.st_size, len(data))))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc


def _read_stream(path: str | Path, fd: int) -> bytes:
    """What a pipe or character device gives until its end (or past MAX_CONFIG_BYTES)."""
    chunks: list[bytes] = []
    total = 0
    while total <= MAX_CONFIG_BYTES:
        ready, _, _ = select.select([fd], [], [], PIPE_WAIT_S)
        if not ready:
            raise UsageError(
                f"{path}: nothing came through it for {PIPE_WAIT_S:g} s; give the path to a "
                "cluster YAML file, or write the config to the pipe"
            )
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _check_kind(path: str | Path, info: os.stat_result) -> None:
    for test, what in _NOT_READABLE:
        if test(info.st_mode):
            raise UsageError(
                f"{path}: is {what}, not a regular file; give the path to a cluster YAML file"
            )
    if info.st_size > MAX_CONFIG_BYTES:
        raise UsageError(_too_large(path, info.st_size))


def _too_large(path: str | Path, size: int) -> str:
    limit = MAX_CONFIG_BYTES // (1024 * 1024)
    return (
        f"{path}: is {size / (1024 * 1024):.1f} MiB, more than the {limit} MiB a cluster config "
        "may be; check the path (cluster configs are a few KB)"
    )


def load_config(
    path: str | Path, overrides: Overrides | None = None, cwd: Path | None = None
) -> ClusterConfig:
    """Read, validate and build the config at `path`. Raises ConfigError or UsageError."""
    return parse_config(read_config_file(path), str(path), overrides, cwd)


def parse_config(
    text: str,
    source: str,
    overrides: Overrides | None = None,
    cwd: Path | None = None,
    *,
    local_files: bool = True,
    validated_before: bool = False,
    pending: validated.Pending | None = None,
) -> ClusterConfig:
    """`local_files=False` skips checks of paths on the launcher's machine (file mount
    sources, keys): the head node's autoscaler reads the config where they do not exist.
    `validated_before`: skip the schema validation of a config that passed it before with
    this launcher, and remember one that passes (`up`: launcher/config/validated.py) once
    the whole config is accepted; with `pending`, left there for the caller to keep after
    its own checks."""
    document, problems = parse_yaml(text)
    if document is None:
        raise ConfigError(source, problems)
    raw = _top_level(document, problems, source)
    # Refused before anything computes with them, providers' checks included.
    numbers = non_finite_problems(raw)
    if numbers:
        raise ConfigError(source, _locate(numbers, document, {}))
    merged, spec, aliases, more = _prepare(raw, overrides or Overrides())
    problems += more
    passed: str | None = None  # the digest to remember once the whole config is accepted
    if validated_before:
        found, passed = _validate_once(merged, spec)
        problems += found
    else:
        problems += _validate(merged, spec)
    problems += check_config(merged, cwd or Path.cwd(), local_files=local_files)
    if spec is not None:
        problems += spec.check(merged)
        problems += controller_problems(merged, spec, local_files=local_files)
    located = _locate(problems, document, aliases)
    errors = [p for p in located if p.is_error]
    if errors or spec is None:
        raise ConfigError(source, errors)
    config = build_config(merged, spec, source, [p for p in located if not p.is_error])
    if pending is not None:
        pending.key = passed
    elif passed is not None:  # a refused config leaves nothing behind
        validated.remember(passed)
    return config


def _top_level(document: YamlDocument, problems: list[Problem], source: str) -> dict[str, Any]:
    if document.data is None:
        problems.append(
            Problem(
                (),
                "the file is empty",
                "a cluster config needs at least `cluster_name` and `provider`",
            )
        )
        raise ConfigError(source, problems)
    if not isinstance(document.data, dict):
        problems.append(
            Problem(
                (),
                f"the top level is {describe_value(document.data)}, not a mapping",
                "write `key: value` lines such as `cluster_name: demo` and `provider:`",
                line=1,
            )
        )
        raise ConfigError(source, problems)
    return copy.deepcopy(document.data)


def _prepare(
    raw: dict[str, Any], overrides: Overrides
) -> tuple[dict[str, Any], ProviderSpec | None, Aliases, list[Problem]]:
    problems: list[Problem] = []
    for key in _EMPTY_MEANS_UNSET:
        if raw.get(key) == {}:
            del raw[key]
    spec = _find_spec(raw, problems)
    if spec is None:
        # Still convert the older format, so its keys are not reported as unknown.
        aliases, more = convert_legacy(raw, {})
        return raw, None, aliases, problems + more
    defaults = spec.defaults()
    problems += spec.prepare(raw)
    aliases, more = convert_legacy(raw, defaults)
    problems += more
    merged = merge_defaults(raw, defaults)
    _apply_overrides(merged, overrides)
    problems += spec.complete(merged)
    return merged, spec, aliases, problems


def _find_spec(raw: Mapping[str, Any], problems: list[Problem]) -> ProviderSpec | None:
    provider = raw.get("provider")
    if not isinstance(provider, Mapping):
        return None  # the schema reports a missing or malformed provider
    kind = provider.get("type")
    spec = registry.provider_spec(kind) if isinstance(kind, str) else None
    if spec is None and isinstance(kind, str):
        guess = did_you_mean(kind, registry.SPECS)
        problems.append(
            Problem(
                ("provider", "type"),
                f"{kind!r} is not a provider the launcher supports",
                f"did you mean `{guess}`?" if guess else "use one of: " + ", ".join(registry.SPECS),
            )
        )
    return spec


def _apply_overrides(merged: dict[str, Any], overrides: Overrides) -> None:
    if overrides.cluster_name is not None:
        merged["cluster_name"] = overrides.cluster_name
    if overrides.max_workers is not None:
        merged["max_workers"] = overrides.max_workers
    if overrides.no_restart:
        merged["no_restart"] = True
    if overrides.controller is not None:
        _override_controller(merged, overrides.controller)
    if overrides.min_workers is not None and isinstance(merged.get("available_node_types"), dict):
        head = merged.get("head_node_type")
        for name, node_type in merged["available_node_types"].items():
            if name != head and isinstance(node_type, dict):
                node_type["min_workers"] = overrides.min_workers


def split_controller(text: str) -> tuple[str | None, str, int | None]:
    """`[USER@]HOST[:PORT]` as (user or None, host, port or None); an IPv6 address is given
    in brackets when a port follows (`[::1]:2222`, host `::1`), or bare. UsageError for a
    port that is not a number. The one reading of that string: `--controller`, and a run's
    `controller` field (launcher/runs/controller.py)."""
    user, _, rest = text.rpartition("@")
    port_text: str | None = None
    if rest.startswith("["):
        host, closed, after = rest[1:].partition("]")
        if not closed or (after and not after.startswith(":")):
            raise UsageError(
                f"--controller {text}: give an IPv6 address as [ADDRESS] or [ADDRESS]:PORT, "
                "such as root@[2001:db8::5]:22"
            )
        port_text = after[1:] if after else None
    elif rest.count(":") == 1:  # an IPv6 address without brackets has more: no port then
        host, _, port_text = rest.partition(":")
    else:
        host = rest
    if port_text is not None and not port_text.isdigit():
        raise UsageError(
            f"--controller {text}: the port {port_text!r} is not a number; give "
            "[USER@]HOST[:PORT], such as ubuntu@ctl.example.com:22"
        )
    return user or None, host, None if port_text is None else int(port_text)


def parse_controller(text: str) -> dict[str, Any]:
    """`[USER@]HOST[:PORT]` as metadata.launcher.recover.controller keys (the schema judges
    the values; an IPv6 host is written there in brackets, which config/build.py takes
    off). UsageError for a port that is not a number."""
    user, host, port = split_controller(text)
    found: dict[str, Any] = {"host": f"[{host}]" if ":" in host else host}
    if user:
        found["ssh_user"] = user
    if port is not None:
        found["ssh_port"] = port
    return found


def _override_controller(merged: dict[str, Any], text: str) -> None:
    metadata = merged.setdefault("metadata", {})
    own = metadata.setdefault("launcher", {}) if isinstance(metadata, dict) else None
    if not isinstance(own, dict):
        return
    recover = own.get("recover")
    if not isinstance(recover, dict):
        recover = {"enabled": bool(recover)} if recover is not None else {"enabled": False}
        own["recover"] = recover
    current = recover.get("controller")
    base = dict(current) if isinstance(current, Mapping) else {}
    recover["controller"] = {**base, **parse_controller(text)}


def _validate_once(
    merged: dict[str, Any], spec: ProviderSpec | None
) -> tuple[list[Problem], str | None]:
    """`_validate`, skipped for a config that passed it before (validated.py); with the
    digest to remember when it passes now (the caller does, once nothing else refused it)."""
    key = validated.config_key(merged)
    if key is not None and validated.passed_before(key):
        return [], None
    problems = _validate(merged, spec)
    return problems, (key if not problems else None)


def _validate(merged: dict[str, Any], spec: ProviderSpec | None) -> list[Problem]:
    provider = merged.get("provider")
    # A string provider.type is judged by the registry, with its own suggestion.
    named = isinstance(provider, Mapping) and isinstance(provider.get("type"), str)
    problems = [
        p
        for p in schema_problems(merged, "cluster")
        if not (named and p.path == ("provider", "type"))
    ]
    if spec is None:
        return problems
    name = spec.schema_name
    problems += schema_problems(provider, name, ("provider",), "provider")
    problems += typo_problems(provider, name, ("provider",), "provider")
    types = merged.get("available_node_types")
    if isinstance(types, Mapping):
        for type_name, node_type in types.items():
            if isinstance(node_type, Mapping) and "node_config" in node_type:
                base: YamlPath = ("available_node_types", type_name, "node_config")
                node_config = node_type["node_config"]
                problems += schema_problems(node_config, name, base, "node_config")
                problems += typo_problems(node_config, name, base, "node_config")
    return problems


def _locate(problems: list[Problem], document: YamlDocument, aliases: Aliases) -> list[Problem]:
    """Give each problem the user's path and file line; drop knock-on problems of typos."""
    typo_targets = {(*p.path[:-1], p.meant) for p in problems if p.meant}
    located = []
    for problem in problems:
        path = _unalias(problem.path, aliases)
        if any(p in typo_targets and not document.contains(p) for p in (path, *problem.uses)):
            continue  # e.g. the default max_workers, in force only because of `max_worker:`
        if problem.line is not None:
            located.append(problem.at(path, problem.line, problem.column))
            continue
        prefer_key = problem.meant is not None or problem.message == "unknown key"
        position = document.locate(path, prefer_key=prefer_key)
        line, column = position if position else (None, None)
        located.append(problem.at(path, line, column))
    unique = list(dict.fromkeys(located))
    return sorted(unique, key=lambda p: (p.line or 0, p.column or 0))


def _unalias(path: YamlPath, aliases: Aliases) -> YamlPath:
    for prefix, original in aliases.items():
        if path[: len(prefix)] == prefix:
            return original + path[len(prefix) :]
    return path


_CONTROLLER: YamlPath = ("metadata", "launcher", "recover", "controller")


def controller_problems(
    merged: Mapping[str, Any], spec: ProviderSpec, *, local_files: bool = True
) -> list[Problem]:
    """metadata.launcher.recover.controller: refused for a provider that declares no
    credentials for a controller (its nodes are this machine's processes), and a key file
    it names must exist here."""
    own = (merged.get("metadata") or {}).get("launcher") or {}
    recover = own.get("recover") if isinstance(own, Mapping) else None
    controller = recover.get("controller") if isinstance(recover, Mapping) else None
    if not isinstance(controller, Mapping):
        return []
    refused = no_controller(spec)
    if refused is not None:
        return [Problem(_CONTROLLER, *refused)]
    key = controller.get("ssh_private_key")
    if local_files and isinstance(key, str) and not Path(key).expanduser().is_file():
        return [
            Problem(
                (*_CONTROLLER, "ssh_private_key"),
                f"{key} is not a file on this machine",
                "name the private key that logs in on the controller",
            )
        ]
    return []
