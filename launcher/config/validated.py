"""Configs that passed schema validation before, so `up` need not validate them again.

A no-op `up` reads the same file as the `up` before it: validating it again against the
JSON schemas costs jsonschema's imports and its run (~40 ms of a ~0.5 s no-op `up`). So
`up` keeps the digests of the configs (as merged with the provider's defaults and the
command line) that its schema validation passed, with the launcher's own digest (its code
and schemas: another launcher validates again), in `$LAUNCHER_HOME/validated`, the last
`KEEP` of them. Only the schema validation is skipped: the checks of the config's meaning
and of the files it names on this machine run every time. `up --no-config-cache` validates
again; every other command always validates.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.files import write_whole
from launcher.paths import launcher_home

KEEP = 64


def config_key(merged: Mapping[str, Any]) -> str | None:
    """The digest of `merged` validated by this launcher; None if it cannot be written out
    as JSON (then it is validated every time)."""
    from launcher.cluster.install import package_digest  # imported by `up` already

    try:
        text = json.dumps(merged, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types, a cycle
        return None
    return hashlib.sha256(f"{package_digest()}\0{text}".encode()).hexdigest()


def _kept() -> list[str]:
    try:
        return (launcher_home() / "validated").read_text().split()
    except OSError:
        return []


def passed_before(key: str) -> bool:
    return key in _kept()


def remember(key: str) -> None:
    others = [k for k in _kept() if k != key]
    kept = [*others[-(KEEP - 1) :], key]
    path = launcher_home() / "validated"
    with contextlib.suppress(OSError):  # not kept: validated again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, "\n".join(kept) + "\n")


@dataclass
class Pending:
    """A config's digest that passed validation just now, kept (`keep`) only once the
    command has accepted the config for everything else it checks: a config refused later
    (a key that is not on this machine) leaves nothing behind in $LAUNCHER_HOME."""

    key: str | None = None

    def keep(self) -> None:
        if self.key is not None:
            remember(self.key)
            self.key = None
