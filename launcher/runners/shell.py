"""What the remote runners (SSH, Kubernetes exec) share about running a command: the login
shell it runs in, with its environment given as `env NAME=value` arguments, the wrapper that
makes a command report its process group so a timeout can kill it there (closing the
connection does not stop a command), the handling of its output lines (the node's log, the
tail kept for error messages, `echo`) and the log file itself."""

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


# `sh -c START_IN_SESSION REPORT_PID ARGV...`: run ARGV in a session of its own when setsid
# can wait for it, after REPORT_PID printed the process's id (then also its process group's)
# on stdout as a line of its own: PID_MARK, the digits, and whether it runs in a session of
# its own (IN_SESSION or NOT_IN_SESSION, REPORT_PID's $0). A runner learns that from its
# first command and starts the next ones the known way (`reporting_pid`'s `setsid`), sparing
# each the probe (`setsid -w true`, a process of its own on the node).
PID_MARK = b"\x1elauncher-pid "
IN_SESSION = "s"
NOT_IN_SESSION = "n"
START_IN_SESSION = (
    f'if setsid -w true 2>/dev/null; then exec setsid -w sh -c "$0" {IN_SESSION} "$@"; fi; '
    f'exec sh -c "$0" {NOT_IN_SESSION} "$@"'
)
REPORT_PID = 'printf "\\036launcher-pid %s %s\\n" "$$" "$0"; exec "$@"'
# `sh -c KILL_GROUP PID`: kill the reported process group (the process alone without setsid).
KILL_GROUP = 'kill -KILL "-$0" 2>/dev/null || kill -KILL "$0"'


def reporting_pid(argv: list[str], setsid: bool | None = None) -> list[str]:
    """`argv` run in a session of its own (where setsid can wait for it) that first reports
    its process id (PidReport). `setsid`: whether the node has it, as a PidReport learned
    (None: not known yet, so the node is asked)."""
    if setsid is None:
        return ["sh", "-c", START_IN_SESSION, REPORT_PID, *argv]
    if setsid:
        return ["setsid", "-w", "sh", "-c", REPORT_PID, IN_SESSION, *argv]
    return ["sh", "-c", REPORT_PID, NOT_IN_SESSION, *argv]


def kill_group_argv(pid: int) -> list[str]:
    return ["sh", "-c", KILL_GROUP, str(pid)]


class PidReport:
    """Takes the process id a command started by `reporting_pid` reports out of its output.
    Lines before the report (a shell's rc file may print some) are output; everything after
    it is passed on untouched."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.in_session: bool | None = None  # whether setsid started it (None: not said)
        self.reported = False
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """The command's own output in `data` (a line that may still be the report waits)."""
        if self.reported:
            return data
        self._held += data
        passed = []
        while not self.reported:
            line, newline, rest = self._held.partition(b"\n")
            if not newline:
                break
            self._held = rest
            if line.startswith(PID_MARK):
                digits, _, how = line[len(PID_MARK) :].partition(b" ")
                self.pid = int(digits) if digits.isdigit() else None
                if how in (IN_SESSION.encode(), NOT_IN_SESSION.encode()):
                    self.in_session = how == IN_SESSION.encode()
                self.reported = True
            else:
                passed.append(line + newline)
        if self.reported:
            passed.append(self._held)
            self._held = b""
        return b"".join(passed)

    def finish(self) -> bytes:
        """What was held back when the output ends."""
        held, self._held = self._held, b""
        return held


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
