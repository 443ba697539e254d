"""A recovering run, as the supervisor keeps it: its attempts (one driver each), its
recoveries (one new head each) and who supervises it. Plain data, read and written as JSON.

A run lives on after its head: every attempt's driver resumes from the run's storage, and
the run is one row in `launcher jobs list` whichever head its driver ran on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

# A supervisor that has not written its heartbeat for this long is gone: another may take
# the run up (on the machine it ran on, at once once its process is seen gone).
LEASE_S = 30.0


class RunState(StrEnum):
    RUNNING = "running"
    RECOVERING = "recovering"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class AttemptEnd(StrEnum):
    """How one attempt (one driver) ended."""

    SUCCEEDED = "succeeded"
    USER_ERROR = "failed"  # the user's code exited non-zero, no node was lost
    NODE_LOST = "node lost"  # it failed while a worker was lost: recoverable
    HEAD_LOST = "head lost"  # the head (and the driver with it) went
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Attempt:
    number: int
    head_id: str
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    end: AttemptEnd | None = None
    log_bytes: int = 0  # how much of the attempt's log on the head is copied here
    saw_node_lost: bool = False  # the supervisor saw a node of the cluster lost meanwhile


@dataclass(frozen=True)
class Recovery:
    """One head lost and replaced. `phases`: seconds after the loss was seen that each step
    was done (old_head_gone, head_launched, ray_up, workers_rejoined, driver_started)."""

    lost_head: str
    why: str
    seen_at: float
    new_head: str | None = None
    new_head_type: str | None = None
    adopted: tuple[str, ...] = ()  # workers kept: their Ray restarted against the new head
    phases: Mapping[str, float] = field(default_factory=dict)
    ended_at: float | None = None


# Set for a supervisor on a run's controller (launcher/runs/controller.py): the name its
# lease gives its machine, "controller USER@HOST:PORT", as the laptop reaches it. Its host
# name alone may be the laptop's own (a container, a copied image), and its process ids
# are not the laptop's to look up.
CONTROLLER_ENV = "LAUNCHER_CONTROLLER"


def this_host() -> str:
    """The name a lease gives the machine its supervisor runs on."""
    return os.environ.get(CONTROLLER_ENV) or socket.gethostname()


@dataclass(frozen=True)
class Lease:
    host: str
    pid: int
    heartbeat: float

    @staticmethod
    def mine(now: float) -> Lease:
        return Lease(this_host(), os.getpid(), now)

    def live(self, now: float) -> bool:
        """Whether this supervisor may still be at work: its heartbeat is recent, and on
        this machine its process still runs."""
        if now - self.heartbeat > LEASE_S:
            return False
        if self.host == this_host() and self.pid != os.getpid():
            return _process_runs(self.pid)
        return True

    def is_mine(self) -> bool:
        return self.host == this_host() and self.pid == os.getpid()


def _process_runs(pid: int) -> bool:
    """Whether process `pid` of this machine runs (a zombie, killed and not yet reaped by
    a parent that is gone, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        stat = ""
    if stat:
        return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Run:
    id: str
    cluster_name: str
    config_path: str
    script: str  # its name on the head (copied there for each attempt)
    args: tuple[str, ...]
    created_at: float
    storage_path: str | None = None
    max_restarts_on_errors: int = 0
    stop: bool = False  # take the cluster down when the run ends
    same_head_type: bool = False  # a reclaimed spot head comes back as spot, not a fallback
    state: RunState = RunState.RUNNING
    attempts: tuple[Attempt, ...] = ()
    recoveries: tuple[Recovery, ...] = ()
    restarts_on_errors: int = 0
    cancel_requested: bool = False
    message: str = ""  # the last thing said about it (why it failed, where it stands)
    ended_at: float | None = None
    supervisor: Lease | None = None
    updated_at: float = 0.0  # when a supervisor last changed it (the newest copy wins)
    # "USER@HOST:PORT" of the machine that supervises it (launcher/runs/controller.py), or
    # None: supervised where it was started (or wherever `jobs supervise` runs)
    controller: str | None = None

    @property
    def attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def with_attempt(self, attempt: Attempt) -> Run:
        """This run with its last attempt replaced by `attempt` (same number) or added."""
        kept = [a for a in self.attempts if a.number != attempt.number]
        return dataclasses.replace(self, attempts=(*kept, attempt))

    def with_recovery(self, recovery: Recovery) -> Run:
        """This run with its open recovery (the last, not ended) replaced, or one added."""
        last = self.recoveries[-1] if self.recoveries else None
        if last is not None and last.ended_at is None:
            return dataclasses.replace(self, recoveries=(*self.recoveries[:-1], recovery))
        return dataclasses.replace(self, recoveries=(*self.recoveries, recovery))

    @property
    def open_recovery(self) -> Recovery | None:
        last = self.recoveries[-1] if self.recoveries else None
        return last if last is not None and last.ended_at is None else None

    def time_lost(self, now: float) -> float:
        """Seconds with no driver running since the first attempt began: between one
        attempt's end and the next one's start (and since the last end, while recovering)."""
        lost = 0.0
        for before, after in zip(self.attempts, self.attempts[1:], strict=False):
            if before.ended_at is not None:
                lost += max(0.0, after.started_at - before.ended_at)
        last = self.attempt
        if last is not None and last.ended_at is not None and not self.state.ended:
            lost += max(0.0, now - last.ended_at)
        return lost

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, indent=1)

    @staticmethod
    def from_json(text: str) -> Run:
        """A run from its JSON; ValueError when the text is not one."""
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            return _run(raw)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a run: {exc}") from None


def _run(raw: Mapping[str, Any]) -> Run:
    lease = raw.get("supervisor")
    return Run(
        id=str(raw["id"]),
        cluster_name=str(raw["cluster_name"]),
        config_path=str(raw["config_path"]),
        script=str(raw["script"]),
        args=tuple(str(a) for a in raw.get("args", ())),
        created_at=float(raw["created_at"]),
        storage_path=raw.get("storage_path"),
        max_restarts_on_errors=int(raw.get("max_restarts_on_errors", 0)),
        stop=bool(raw.get("stop", False)),
        same_head_type=bool(raw.get("same_head_type", False)),
        state=RunState(raw.get("state", RunState.RUNNING)),
        attempts=tuple(_attempt(a) for a in raw.get("attempts", ())),
        recoveries=tuple(_recovery(r) for r in raw.get("recoveries", ())),
        restarts_on_errors=int(raw.get("restarts_on_errors", 0)),
        cancel_requested=bool(raw.get("cancel_requested", False)),
        message=str(raw.get("message", "")),
        ended_at=_float_or_none(raw.get("ended_at")),
        updated_at=float(raw.get("updated_at", 0.0)),
        controller=None if raw.get("controller") is None else str(raw["controller"]),
        supervisor=None
        if not lease
        else Lease(str(lease["host"]), int(lease["pid"]), float(lease["heartbeat"])),
    )


def _attempt(raw: Mapping[str, Any]) -> Attempt:
    end = raw.get("end")
    code = raw.get("exit_code")
    return Attempt(
        number=int(raw["number"]),
        head_id=str(raw["head_id"]),
        started_at=float(raw["started_at"]),
        ended_at=_float_or_none(raw.get("ended_at")),
        exit_code=None if code is None else int(code),
        end=None if end is None else AttemptEnd(end),
        log_bytes=int(raw.get("log_bytes", 0)),
        saw_node_lost=bool(raw.get("saw_node_lost", False)),
    )


def _recovery(raw: Mapping[str, Any]) -> Recovery:
    return Recovery(
        lost_head=str(raw["lost_head"]),
        why=str(raw["why"]),
        seen_at=float(raw["seen_at"]),
        new_head=raw.get("new_head"),
        new_head_type=raw.get("new_head_type"),
        adopted=tuple(str(a) for a in raw.get("adopted", ())),
        phases={str(k): float(v) for k, v in (raw.get("phases") or {}).items()},
        ended_at=_float_or_none(raw.get("ended_at")),
    )


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def latest(runs: Sequence[Run]) -> Run | None:
    return max(runs, key=lambda r: r.created_at, default=None)
