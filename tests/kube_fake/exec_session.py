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
it) is waited for DRAIN_S at most, so a forgotten `&` does not hang the client forever.
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
import termios
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from tests.kube_fake.channels import (
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


class FdReader:
    """Non-blocking reads of a file descriptor (a pty master) in the event loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)

    async def read(self, size: int) -> bytes:
        loop = asyncio.get_running_loop()
        while True:
            try:
                return os.read(self.fd, size)
            except BlockingIOError:
                ready: asyncio.Future[None] = loop.create_future()
                loop.add_reader(self.fd, ready.set_result, None)
                try:
                    await ready
                finally:
                    loop.remove_reader(self.fd)
            except OSError as error:
                if error.errno == errno.EIO:  # every slave side is closed
                    return b""
                raise


class Session:
    """One exec (or attach) over `channels`."""

    def __init__(
        self,
        channels: Channels,
        request: ExecRequest,
        argv: Sequence[str],
        env: Mapping[str, str],
    ) -> None:
        self.channels = channels
        self.request = request
        self.argv = list(argv)
        self.env = dict(env)
        self.process: asyncio.subprocess.Process | None = None
        self.master: int | None = None
        self.gone = False  # the client has closed the connection

    async def run(self) -> None:
        try:
            await self._start()
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

    async def _start(self) -> None:
        request = self.request
        if request.tty:
            master, slave = os.openpty()
            self.master = master
            set_window(master, 80, 24)
            self.env.setdefault("TERM", "xterm")
            try:
                self.process = await asyncio.create_subprocess_exec(
                    SETSID,
                    "--ctty",
                    *self.argv,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    env=self.env,  # setsid makes its own session: not start_new_session
                )
            finally:
                os.close(slave)
            return
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE if request.stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if request.stdout else asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE if request.stderr else asyncio.subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )

    async def _finish(self) -> None:
        assert self.process is not None
        pumps = self._pumps()
        inbound = asyncio.ensure_future(self._inbound())
        code = await self.process.wait()
        if pumps:
            _, pending = await asyncio.wait(pumps, timeout=DRAIN_S)
            for task in pending:
                task.cancel()
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await inbound
        if self.master is not None:
            os.close(self.master)
            self.master = None
        code = 128 - code if code < 0 else code
        if not self.gone:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.channels.send_error(exit_status(code))
                await self.channels.close()

    def _pumps(self) -> list[asyncio.Task[None]]:
        assert self.process is not None
        pumps = []
        if self.master is not None:
            reader = FdReader(os.dup(self.master))
            pumps.append(asyncio.ensure_future(self._pump(reader.read, STDOUT, reader.fd)))
        else:
            if self.process.stdout is not None:
                pumps.append(asyncio.ensure_future(self._pump(self.process.stdout.read, STDOUT)))
            if self.process.stderr is not None:
                pumps.append(asyncio.ensure_future(self._pump(self.process.stderr.read, STDERR)))
        return pumps

    async def _pump(
        self, read: Callable[[int], Awaitable[bytes]], channel: int, fd: int | None = None
    ) -> None:
        try:
            while data := await read(CHUNK):
                await self._send(channel, data)
        finally:
            if fd is not None:
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
        stdin = self.process.stdin if self.process is not None else None
        while True:
            message = await self.channels.receive()
            if message is None:
                self.gone = True
                self._hang_up()
                return
            channel, data = message
            if channel == STDIN and self.request.stdin:
                await self._write_stdin(stdin, data)
            elif channel == CLOSE and data[:1] == bytes((STDIN,)):
                self._close_stdin(stdin)
            elif channel == RESIZE and self.master is not None:
                with contextlib.suppress(ValueError, KeyError, TypeError, OSError):
                    size = json.loads(data)
                    set_window(self.master, int(size["Width"]), int(size["Height"]))

    async def _write_stdin(self, stdin: asyncio.StreamWriter | None, data: bytes) -> None:
        if self.master is not None:
            await _write_fd(self.master, data)
        elif stdin is not None and not stdin.is_closing():
            try:
                stdin.write(data)
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                stdin.close()

    def _close_stdin(self, stdin: asyncio.StreamWriter | None) -> None:
        if self.master is not None:
            # A terminal has no end of file of its own: send what ^D would.
            with contextlib.suppress(OSError):
                os.write(self.master, b"\x04")
        elif stdin is not None:
            stdin.close()

    def _hang_up(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()
        if self.master is not None and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGHUP)


async def _write_fd(fd: int, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
            view = view[written:]
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, ready.set_result, None)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
