"""The `CommandRunner` protocol the updater and commands use for every provider."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

OutputSink = Callable[[str], None]


def expand_home(path: str, home: Callable[[], str]) -> str:
    """`~` and `~/...` with the node's home put in (`home` is asked only when needed)."""
    if path == "~" or path.startswith("~/"):
        return home() + path[1:]
    return path


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    output_tail: str  # the last lines of output, for error messages
    timed_out: bool = False  # stopped (its processes killed) when its time ran out

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class CommandRunner(Protocol):
    """Runs shell commands and copies files on one node.

    Environment values are passed as data, never spliced into command text by hand.
    Output goes to the node's log; `echo` also receives it line by line when given.
    """

    def check_ready(self) -> str | None:
        """None when the node accepts commands, else why not (for wait-until-ready loops)."""
        ...

    def run(
        self,
        command: str,
        env: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        echo: OutputSink | None = None,
        interactive: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run `command` with bash on the node. `interactive` connects it to this terminal.
        A command still running after `timeout` seconds is stopped, with what it started
        on the node (its process group), and its result is `timed_out`. `stdin` (not with
        `interactive`) is the command's standard input, sent as data (never in its command line,
        so secrets go there); without it the input is empty."""
        ...

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        """Copy a local file or directory to the node (rsync's trailing-slash rules)."""
        ...

    def get(self, remote: str, local: str) -> None:
        """Copy a file or directory from the node to this machine."""
        ...

    def remote_path(self, path: str) -> str:
        """`path` as the node sees it (`~` expanded to the node's home where that matters)."""
        ...


def wait_until_ready(runner: CommandRunner, timeout_s: float) -> str | None:
    """Wait, with backoff, until `runner`'s node accepts commands. None when it does, else
    the last reason it did not (after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while (problem := runner.check_ready()) is not None:
        if time.monotonic() + delay > deadline:
            return problem
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    return None
