"""Typed errors raised by library code; only the CLI turns them into messages and exit codes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.config.problems import Problem


class LauncherError(Exception):
    """Base of every error the launcher raises on purpose. `exit_code` is what the CLI returns."""

    exit_code = 1


class UsageError(LauncherError):
    """The user asked for something that cannot be done as asked (bad flag, bad path)."""

    exit_code = 2


class ConfigError(LauncherError):
    """A cluster config has one or more problems. All of them are in `problems`."""

    exit_code = 2

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        first = self.problems[0].render(source) if self.problems else "invalid config"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(first + more)


class ProviderError(LauncherError):
    """A provider could not do what was asked (no capacity, no free address, API refused)."""


class CapacityError(ProviderError):
    """A launch failed for lack of capacity in every zone it tried (`zones`); `created`
    holds the nodes made before it ran out. Distinct from other provider errors because
    the autoscaler answers it by avoiding those zones and using the type's fallbacks.

    `scope` says how far the shortage reaches: "zone" (those zones had no room), or
    "quota" (a limit of the account or region that no other zone lifts: the type is out
    everywhere, and `zones` names every zone it may use)."""

    def __init__(
        self,
        node_type: str,
        zones: Sequence[str],
        detail: str,
        created: Sequence[Any] = (),
        scope: str = "zone",
    ) -> None:
        self.node_type = node_type
        self.zones = tuple(zones)
        self.created = list(created)
        self.scope = scope
        where = ", ".join(self.zones) or "every zone"
        what = "over its quota" if scope == "quota" else "no capacity"
        super().__init__(f"{node_type}: {what} in {where}: {detail}")


class HostKeyError(LauncherError):
    """A node presented a host key other than the one recorded on first contact."""


class NodeUpdateError(LauncherError):
    """A node failed to set up: which node, which step, and where its full log is."""

    def __init__(self, node_id: str, stage: str, detail: str, log_path: str) -> None:
        self.node_id = node_id
        self.stage = stage
        self.detail = detail
        self.log_path = log_path
        super().__init__(f"node {node_id} failed while {stage}: {detail} (full log: {log_path})")


class ClusterBusyError(LauncherError):
    """Another launcher holds this cluster's lock."""


class NoClusterError(LauncherError):
    """The command needs a running cluster and there is none."""
