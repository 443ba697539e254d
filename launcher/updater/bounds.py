"""How long each command the updater runs may take, and what a failed one is reported as.

Pure decisions, for `NodeUpdater`: initialization and setup commands are bounded by
`metadata.launcher.command_timeout_s` (none by default: long installs are normal), a node's
Ray start commands by `metadata.launcher.ray_start_timeout_s` (a worker's `ray start
--address=HEAD:PORT` waits for ever for a head whose Ray is gone).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.config.model import ClusterConfig
from launcher.runners.base import CommandResult

SETUP_SETTING = "metadata.launcher.command_timeout_s"
RAY_START_SETTING = "metadata.launcher.ray_start_timeout_s"
MIN_TIMEOUT_S = 0.1  # what a command begun when its step's time is (nearly) out still gets


@dataclass(frozen=True)
class Bound:
    """The longest a step's commands may run (None: no limit): each one (`per_command`),
    or all of them together; and the setting that says so (named when it runs out)."""

    timeout_s: float | None
    setting: str
    per_command: bool = True

    def deadline(self, now: float) -> float | None:
        """When the step's time runs out, for a bound on all its commands together."""
        if self.timeout_s is None or self.per_command:
            return None
        return now + self.timeout_s

    def timeout_for_next(self, now: float, deadline: float | None) -> float | None:
        """The timeout for the step's next command, begun at `now`."""
        if deadline is None:
            return self.timeout_s
        return max(deadline - now, MIN_TIMEOUT_S)


def setup_bound(config: ClusterConfig, override_s: float | None = None) -> Bound:
    """Initialization and setup commands: `override_s` when given, else the config's."""
    chosen = override_s if override_s is not None else config.command_timeout_s
    return Bound(chosen, SETUP_SETTING)


def ray_start_bound(config: ClusterConfig) -> Bound:
    """A node's Ray start commands, all together."""
    return Bound(config.ray_start_timeout_s, RAY_START_SETTING, per_command=False)


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def joins_address(command: str, env: Mapping[str, str]) -> str | None:
    """The head address a `ray start` command joins (`--address=A` or `--address A`), with
    the variables `env` gives put in; None for a command that joins no head."""
    if "ray start" not in command and "ray\tstart" not in command:
        return None
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        words = command.split()
    for index, word in enumerate(words):
        if word.startswith("--address="):
            value = word.split("=", 1)[1]
        elif word == "--address" and index + 1 < len(words):
            value = words[index + 1]
        else:
            continue
        return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), value)
    return None


def command_problem(
    command: str, result: CommandResult, bound: Bound, head_address: str | None
) -> str:
    """One line saying why `command` failed: it ran out of time (the setting named), or
    exited non-zero (its last output line); a command joining a head names the address."""
    if result.timed_out:
        if head_address is not None:
            return (
                f"Ray did not join the head at {head_address} within {bound.timeout_s:g} s "
                f"({bound.setting}); `{command}` was stopped. Check that Ray runs on the head "
                "and that this node reaches that address"
            )
        return (
            f"`{command}` did not finish within {bound.timeout_s:g} s ({bound.setting}) "
            "and was stopped"
        )
    last = (result.output_tail.strip().splitlines() or [""])[-1]
    tried = f" (joining the head at {head_address})" if head_address is not None else ""
    return f"`{command}` exited with {result.exit_code}{tried}: {last}"
