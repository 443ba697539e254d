"""An exec session: a command run in a container's namespaces (nsenter into its PID 1's
mount, PID and UTS namespaces, in its working directory, with the container's
environment), its stdio carried over a channel websocket.

Without a tty, stdin (if asked for) is a pipe that gets its end of file when the client
closes channel 0 (v5) or the connection; stdout and stderr are pipes read in 64 KiB
chunks, each sent as it comes (a send waits for the client, so a slow reader slows the
command instead of filling memory). With a tty, the command gets a real pseudo-terminal as
its controlling terminal (its session's), stdout and stderr merged into channel 1, and
resize messages become TIOCSWINSZ on it.

When the command has ended and its output is drained, the error channel carries the
result (Success, or NonZeroExitCode with the code) and the websocket closes. Output from
processes that outlive the command while holding its stdout (daemons that did not redirect
it) is waited for DRAIN_S at most, so a forgotten `&` does not hang the client forever as
it would with containerd; such a case is reported through `on_undrained` (the kubelet
lists them in `FakeKubelet.undrained`, for tests to check).
A client that goes away leaves the command running with stdin closed (a tty hangs up), as
a container runtime does; its output is then discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import termios
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fakes.kube.channels import (
    CLOSE,
    RESIZE,
    STDERR,
    STDIN,
    STDOUT,
    Channels,
    exit_status,
    status,
)

NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
SETSID = shutil.which("setsid") or "/usr/bin/setsid"
CHUNK = 64 * 1024
DRAIN_S = 2.0

_background: set[asyncio.Task[None]] = set()  # sessions whose client has gone


@dataclass(frozen=True)
class ExecRequest:
    command: Sequence[str]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def nsenter_argv(target_pid: int, command: Sequence[str]) -> list[str]:
    return [
        NSENTER,
        f"--target={target_pid}",
        "--mount",
        "--pid",
        "--uts",
        "--wd",
        "--",
        *command,
    ]


def set_window(fd: int, width: int, height: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _wake, ready)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def read_fd(fd: int, size: int) -> bytes:
    """Read from a non-blocking fd in the event loop; b"" at its end (for a pty master:
    once every slave side is closed, EIO)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _readable(fd)
        except OSError as error:
            if error.errno == errno.EIO:
                return b""
            raise


async def write_fd(fd: int, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, _wake, ready)
            try:
                await ready
            finally:
                loop.remove_writer(fd)


class Session:
    """One exec over `channels`. The command is a plain subprocess whose end is seen
    through a pidfd (asyncio's subprocess.wait also waits for its pipes to close, which a
    daemon it left behind may never do)."""

    def __init__(
        self,
        channels: Channels,
        request: ExecRequest,
        argv: Sequence[str],
        env: Mapping[str, str],
        on_undrained: Callable[[str], None] | None = None,
    ) -> None:
        self.on_undrained = on_undrained
        self.channels = channels
        self.request = request
        self.argv = list(argv)
        self.env = dict(env)
        self.process: subprocess.Popen[bytes] | None = None
        self.master: int | None = None  # the pty, with a tty
        self.stdin: int | None = None  # the pipe to the command's stdin, without one
        self.outputs: list[tuple[int, int]] = []  # (fd, channel) to read from
        self.gone = False  # the client has closed the connection

    async def run(self) -> None:
        try:
            self._start()
        except OSError as error:
            await self.channels.send_error(status(500, "InternalError", str(error)))
            await self.channels.close()
            return
        # The lowest writable channel gets an empty message once the stream is set up.
        first = STDOUT if self.request.stdout else STDERR if self.request.stderr else None
        if first is not None:
            await self._send(first, b"")
        work = asyncio.ensure_future(self._finish())
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            # The handler was cancelled (the client went away): let the command run out.
            self.gone = True
            self._hang_up()
            _background.add(work)
            work.add_done_callback(_background.discard)
            raise

    def _start(self) -> None:
        if self.request.tty:
            master, slave = os.openpty()
            self.master = master
            set_window(master, 80, 24)
            self.env.setdefault("TERM", "xterm")
            try:
                # setsid makes the command a session of its own, the pty its terminal.
                self.process = subprocess.Popen(
                    [SETSID, "--ctty", *self.argv],
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    env=self.env,
                )
            finally:
                os.close(slave)
            os.set_blocking(master, False)
            self.outputs = [(os.dup(master), STDOUT)]
            return
        wanted = self.request
        pipe, devnull = subprocess.PIPE, subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.argv,
            stdin=pipe if wanted.stdin else devnull,
            stdout=pipe if wanted.stdout else devnull,
            stderr=pipe if wanted.stderr else devnull,
            env=self.env,
            start_new_session=True,
        )
        process = self.process
        if process.stdin is not None:
            self.stdin = os.dup(process.stdin.fileno())
        for stream, channel in ((process.stdout, STDOUT), (process.stderr, STDERR)):
            if stream is not None:
                self.outputs.append((os.dup(stream.fileno()), channel))
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        for fd in [self.stdin, *(fd for fd, _ in self.outputs)]:
            if fd is not None:
                os.set_blocking(fd, False)

    async def _wait(self) -> int:
        assert self.process is not None
        pidfd = os.pidfd_open(self.process.pid)
        try:
            while self.process.poll() is None:
                await _readable(pidfd)
        finally:
            os.close(pidfd)
        return self.process.returncode

    async def _finish(self) -> None:
        pumps = [asyncio.ensure_future(self._pump(fd, channel)) for fd, channel in self.outputs]
        inbound = asyncio.ensure_future(self._inbound())
        code = await self._wait()
        if pumps:
            _, pending = await asyncio.wait(pumps, timeout=DRAIN_S)
            for task in pending:
                task.cancel()
            if pending and self.on_undrained is not None:
                self.on_undrained(
                    f"exec {self.request.command}: its output was still open {DRAIN_S:g} s "
                    "after it ended (a process it started holds it; a real kubelet would wait)"
                )
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await inbound
        self._close_stdin()
        if self.master is not None:
            os.close(self.master)
            self.master = None
        code = 128 - code if code < 0 else code
        if not self.gone:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.channels.send_error(exit_status(code))
                await self.channels.close()

    async def _pump(self, fd: int, channel: int) -> None:
        try:
            while data := await read_fd(fd, CHUNK):
                await self._send(channel, data)
        finally:
            os.close(fd)

    async def _send(self, channel: int, data: bytes) -> None:
        if self.gone or self.channels.closed:
            return  # nobody to send to: discard, keep draining
        try:
            await self.channels.send(channel, data)
        except (ConnectionError, RuntimeError):
            self.gone = True

    async def _inbound(self) -> None:
        """Messages from the client: stdin data, its close, resizes."""
        while True:
            message = await self.channels.receive()
            if message is None:
                self.gone = True
                self._hang_up()
                return
            channel, data = message
            if channel == STDIN and self.request.stdin:
                await self._write_stdin(data)
            elif channel == CLOSE and data[:1] == bytes((STDIN,)):
                if self.master is not None:
                    # A terminal has no end of file of its own: send what ^D would.
                    with contextlib.suppress(OSError):
                        os.write(self.master, b"\x04")
                self._close_stdin()
            elif channel == RESIZE and self.master is not None:
                with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
                    size = json.loads(data)
                    set_window(self.master, int(size["Width"]), int(size["Height"]))

    async def _write_stdin(self, data: bytes) -> None:
        fd = self.master if self.master is not None else self.stdin
        if fd is None:
            return
        try:
            await write_fd(fd, data)
        except (BrokenPipeError, ConnectionResetError):
            self._close_stdin()  # the command has closed its stdin: drop the rest

    def _close_stdin(self) -> None:
        if self.stdin is not None:
            os.close(self.stdin)
            self.stdin = None

    def _hang_up(self) -> None:
        self._close_stdin()
        if self.master is not None and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGHUP)
