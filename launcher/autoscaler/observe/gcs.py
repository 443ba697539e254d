"""Reading Ray's demand without letting the GCS stall or end the autoscaler.

Ray's GCS client blocks for 40 s when the GCS is not there, blocks a read indefinitely when
the GCS dies under it, and after 60 s ends the whole process it runs in. So demand is read
in a child process (`python -m launcher.autoscaler.observe.ray_state`), one request per tick, each
answered within READ_TIMEOUT_S or the child is killed. Before each read the GCS port is
probed, so a GCS that is down costs one refused TCP connection per tick, not a timeout.

While the GCS cannot be read, `read` returns None (no demand this tick: the autoscaler keeps
min_workers and replaces dead workers), and `on_change` is told once when the outage
starts and once when it ends.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import IO

from launcher.autoscaler.decide.demand import READY_LINE, Demand, decode, request_line

READ_TIMEOUT_S = 15.0  # one read of the demand (a live GCS answers in milliseconds)
READ_TIMEOUT_ENV = "LAUNCHER_GCS_READ_TIMEOUT_S"  # another, in seconds (> 0)
START_TIMEOUT_S = 60.0  # the child importing Ray (seconds on a busy machine)
PROBE_TIMEOUT_S = 1.0
RETRY_S = (5.0, 10.0, 20.0, 40.0, 60.0)  # after a read timed out or the child died


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def gcs_accepts(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when something accepts TCP connections at `address`, else why not."""
    try:
        host, port = split_address(address)
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except ValueError:
        return f"{address!r} is not host:port"
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


class _Child:
    """The reading process: requests on its stdin, one JSON reply line each on stdout."""

    def __init__(self, address: str) -> None:
        # Ray's own complaints, for the message when the child ends; closed in stop().
        self.errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "launcher.autoscaler.observe.ray_state", "--gcs", address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            start_new_session=True,  # a Ctrl-C meant for the daemon is the daemon's to handle
        )
        self.pending = b""

    def line(self, timeout_s: float) -> str:
        """The next line of output; raises TimeoutError or EOFError."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {timeout_s:g} s")
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError(self._ended())
                self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace")

    def ask(
        self, timeout_s: float, forget: Sequence[str] = (), metrics_address: str | None = None
    ) -> str:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(request_line(forget, metrics_address).encode())
            self.process.stdin.flush()
        except OSError as exc:
            raise EOFError(self._ended()) from exc
        return self.line(timeout_s)

    def _ended(self) -> str:
        code = self.process.poll()
        self.errors.seek(0)
        last = [line for line in self.errors.read().decode(errors="replace").splitlines() if line]
        said = f": {last[-1][:300]}" if last else ""
        return f"the reading process ended (exit {code}){said}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.errors):
            if stream is not None:
                stream.close()


class GcsDemandReader:
    def __init__(
        self,
        address: str,
        on_change: Callable[[str], None],
        read_timeout_s: float = READ_TIMEOUT_S,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.address = address
        self.on_change = on_change
        self.read_timeout_s = read_timeout_s
        self.start_timeout_s = start_timeout_s
        self.child: _Child | None = None
        self.outage: str | None = None  # why demand cannot be read, while that lasts
        self.failures = 0  # reads that timed out or died in a row
        self.retry_at = 0.0
        # Where the autoscaler serves its metrics: each read keeps Ray's discovery naming it.
        self.metrics_address: str | None = None

    def read(self, forget_notices: Sequence[str] = ()) -> Demand | None:
        """Ray's demand now, or None when it cannot be read (never blocks longer than the
        child's start and one read, and only when the GCS accepts connections). The
        notices of `forget_notices` (node ids) are deleted first."""
        if time.monotonic() < self.retry_at:
            return None
        refused = gcs_accepts(self.address)
        if refused is not None:
            self._stop_child()  # its client would wait for this GCS, then end itself
            self._down(f"not accepting connections: {refused}")
            return None
        try:
            if self.child is None:
                self.child = _Child(self.address)
                if self.child.line(self.start_timeout_s) != READY_LINE:
                    raise EOFError("the reading process did not start")
            asked = self.child.ask(self.read_timeout_s, forget_notices, self.metrics_address)
            reply = json.loads(asked)
        except (TimeoutError, EOFError, ValueError) as exc:
            self._stop_child()
            self.failures += 1
            self.retry_at = time.monotonic() + RETRY_S[min(self.failures, len(RETRY_S)) - 1]
            self._down(f"{exc}; trying again in {self.retry_at - time.monotonic():.0f} s")
            return None
        if "error" in reply:  # Ray's client reported it: the child stays for the next tick
            self._down(str(reply["error"]))
            return None
        self.failures = 0
        if self.outage is not None:
            self.outage = None
            self.on_change(f"Ray's GCS at {self.address} answers again; scaling on its demand")
        return decode(reply["demand"])

    def _down(self, why: str) -> None:
        if self.outage is None:
            self.on_change(
                f"cannot read Ray's demand from the GCS at {self.address} ({why}); until it "
                "answers, the autoscaler keeps min_workers and replaces dead workers, but "
                "does not scale on demand"
            )
        self.outage = why

    def _stop_child(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None

    def close(self) -> None:
        self._stop_child()


def read_timeout_s() -> float:
    """How long one read of the demand may take: READ_TIMEOUT_S, or the head's
    LAUNCHER_GCS_READ_TIMEOUT_S when that is a positive number of seconds."""
    try:
        value = float(os.environ.get(READ_TIMEOUT_ENV, ""))
    except ValueError:
        return READ_TIMEOUT_S
    return value if math.isfinite(value) and value > 0 else READ_TIMEOUT_S
