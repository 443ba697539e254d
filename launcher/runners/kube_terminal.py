"""An exec with a TTY connected to this terminal (`attach`, `exec --interactive`): the
terminal in raw mode while it runs, keys sent on the stdin channel, output written as it
comes, the terminal's size sent at the start and whenever it changes (SIGWINCH)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from types import FrameType

from launcher.runners.kube_session import RESIZE, STDIN, ExecSession

_READ_BYTES = 65536


def relay(session: ExecSession, stdin_fd: int | None = None, stdout_fd: int | None = None) -> None:
    """Relay between the descriptors (this process's stdin and stdout by default) and the
    exec until it ends. Raises ConnectionLost if its connection breaks."""
    in_fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    out_fd = sys.stdout.fileno() if stdout_fd is None else stdout_fd
    resized = threading.Event()
    with _raw(in_fd), _on_resize(resized):
        _send_size(session, out_fd)
        _loop(session, in_fd, out_fd, resized)


def _loop(session: ExecSession, in_fd: int, out_fd: int, resized: threading.Event) -> None:
    reading = True
    while session.is_open:
        if resized.is_set():
            resized.clear()
            _send_size(session, out_fd)
        watched = [session.fileno(), *([in_fd] if reading else [])]
        try:
            ready, _, _ = select.select(watched, [], [], 0.5)
        except InterruptedError:  # a signal (SIGWINCH) came
            continue
        if in_fd in ready:
            data = os.read(in_fd, _READ_BYTES)
            if data:
                session.write(STDIN, data)
            else:
                reading = False  # the input ended: tell the command (v5)
                session.close_stdin()
        out, err = session.pump(0)
        for chunk in (out, err):
            if chunk:
                _write_all(out_fd, chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _send_size(session: ExecSession, fd: int) -> None:
    """The terminal's size on the resize channel (nothing when `fd` is no terminal)."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return
    message = {"Width": size.columns, "Height": size.lines}
    session.write(RESIZE, json.dumps(message).encode())


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """The terminal at `fd` in raw mode (keys as typed, no echo), restored afterwards."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)  # keep what was typed ahead (TCSAFLUSH drops it)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _on_resize(resized: threading.Event) -> Iterator[None]:
    """`resized` set on each SIGWINCH (only the main thread can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        resized.set()

    previous = signal.signal(signal.SIGWINCH, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)
