"""Noticing a command on a node that has printed nothing for a long time.

A hung setup command looks like a slow one; after `metadata.launcher.silence_warning_s`
without output the updater says so, once per silence (output again starts a new one), in the
node's log and to the user, and lets the command go on (its own bound, if any, stops it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

Clock = Callable[[], float]


def silence_due(last_output: float, now: float, after_s: float, warned: bool) -> bool:
    """Whether a silence that began at `last_output` is to be reported at `now`."""
    return not warned and now - last_output >= after_s


def next_check_s(last_output: float, now: float, after_s: float, warned: bool) -> float:
    """How long to wait before looking again: until this silence would be due, or (once
    reported) a while, since only new output can start another one."""
    if warned:
        return after_s
    return max(0.0, last_output + after_s - now)


class SilenceWatch:
    """While entered, calls `on_silence(seconds)` from a thread of its own when `heard` was
    not called for `after_s` seconds, once per silence. `heard` takes an output line (an
    `echo` for a `CommandRunner`)."""

    def __init__(
        self, after_s: float, on_silence: Callable[[float], None], clock: Clock = time.monotonic
    ) -> None:
        self.after_s = after_s
        self.on_silence = on_silence
        self.clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._warned = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="silence-watch", daemon=True)

    def heard(self, _line: str = "") -> None:
        with self._lock:
            self._last = self.clock()
            self._warned = False

    def __enter__(self) -> SilenceWatch:
        self.heard()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while True:
            with self._lock:
                now = self.clock()
                due = silence_due(self._last, now, self.after_s, self._warned)
                if due:
                    self._warned = True
                wait = next_check_s(self._last, now, self.after_s, self._warned)
            if due:
                self.on_silence(self.after_s)
            if self._stop.wait(wait):
                return
