"""What the remote runners (SSH, Kubernetes exec) share about running a command: the login
shell it runs in, with its environment given as `env NAME=value` arguments, and the
handling of its output lines (the node's log, the tail kept for error messages, `echo`)
and the log file itself."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from launcher.runners.base import OutputSink

TAIL_LINES = 20
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# bash prints these when started interactive (-i, to read ~/.bashrc) without a terminal.
NOISE = (
    "bash: cannot set terminal process group",
    "bash: no job control in this shell",
)


def login_shell_argv(
    command: str, base_env: Mapping[str, str], env: Mapping[str, str] | None
) -> list[str]:
    """The arguments that run `command` on a node: `env` with NAME=value arguments (`env`
    over `base_env`), then a login shell that also reads ~/.bashrc (as Ray's launcher does).
    Raises ValueError for a variable name a shell could not hold."""
    merged = {**base_env, **(env or {})}
    for name in merged:
        if not ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not valid")
    prefix = ["env", *(f"{k}={v}" for k, v in merged.items())] if merged else []
    return [*prefix, "bash", "--login", "-c", "-i", command]


class OutputLines:
    """A command's output as it arrives: each line goes to the node's log (`log`), to the
    tail kept for the result, and to `echo`, except bash's no-terminal notices."""

    def __init__(self, log: TextIO, echo: OutputSink | None) -> None:
        self.log = log
        self.echo = echo
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if text.startswith(NOISE):
            return
        self.log.write(text + "\n")
        self.log.flush()
        self.tail.append(text)
        if self.echo is not None:
            self.echo(text)

    def text(self) -> str:
        return "\n".join(self.tail)


class LineBuffer:
    """Splits one output stream into lines for `output`. With `hold_last` (for the stream
    that carries stderr) the last line waits for the next one: an interactive login shell
    prints "logout" there as it exits, which is not the command's output and is dropped
    when it is the stream's last line."""

    def __init__(self, output: OutputLines, *, hold_last: bool = True) -> None:
        self.output = output
        self.hold_last = hold_last
        self._pending = b""
        self._held: bytes | None = None

    def feed(self, chunk: bytes) -> None:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for raw in lines:
            if not self.hold_last:
                self.output.line(raw)
                continue
            if self._held is not None:
                self.output.line(self._held)
            self._held = raw

    def finish(self) -> None:
        held, pending = self._held, self._pending
        self._held, self._pending = None, b""
        if held is not None and (pending or held.rstrip(b"\r") != b"logout"):
            self.output.line(held)
        if pending:
            self.output.line(pending)


def append_to_log(path: Path, text: str) -> None:
    """Add `text` to a node's log file (its directory made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as log:
        log.write(text)
