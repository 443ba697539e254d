"""The cluster's timeline on the head: what it had, what it was asked for and what the
autoscaler did, one JSON object a line in `TIMELINE_FILE` (spec.py), for the web page and
anyone with `jq`.

Four kinds of record, each a dataclass here (its `kind` is the JSON's "kind"):
```
{"kind": "sample", "t": 1733000000.0, "nodes": {"worker": {"running": 2, "launching": 1,
  "spot": true}}, "pending": {"CPU": 12.0}, "infeasible": 0, "cost_per_hour": 0.42}
{"kind": "decision", "t": ..., "action": "launch", "node_type": "worker", "count": 2,
  "reason": "placement group 6eb3 (SPREAD, 16 bundles)"}
{"kind": "reclaim", "t": ..., "node_id": "i-123", "node_type": "spot", "how": "notice",
  "replaced_by": "worker"}
{"kind": "failure", "t": ..., "node_type": "spot", "zone": "us-west-2a",
  "reason": "capacity failure"}
```
`t` is wall-clock time (epoch seconds). A sample is written when its content (all but `t`)
changed since the last one, and at least every `SAMPLE_EVERY_S`; `cost_per_hour` is null
when a node's price is not known. A reclaim's `how` is "notice" (the provider or the node
said it will be taken back), "preempted" (listed as taken back, no notice before) or "gone"
(a worker no longer listed that the autoscaler did not terminate); `replaced_by` is the type
the same tick launched in its place, null when it launched none.

Encoding and decoding are pure; `TimelineWriter` appends, rotating the file to
`timeline.1.jsonl` (one old file kept) past `ROTATE_BYTES`. Readers skip a line they cannot
parse (the last one may be torn by a writer caught mid-line) and kinds they do not know, so
fields and kinds may be added, never renamed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ROTATE_BYTES = 8 * 1024 * 1024
SAMPLE_EVERY_S = 60.0
ReclaimHow = Literal["notice", "preempted", "gone"]


@dataclass(frozen=True)
class TypeCount:
    """Nodes of one type in a sample: serving, and on their way (launched, setting up)."""

    running: int = 0
    launching: int = 0
    spot: bool = False


@dataclass(frozen=True)
class Sample:
    t: float
    nodes: Mapping[str, TypeCount] = field(default_factory=dict)
    pending: Mapping[str, float] = field(default_factory=dict)  # resource -> amount asked
    infeasible: int = 0  # requests no node type can hold
    cost_per_hour: float | None = None
    kind: Literal["sample"] = "sample"

    def same_as(self, other: Sample | None) -> bool:
        """Whether `other` says the same as this one (its time aside)."""
        return other is not None and _body(self) == _body(other)


@dataclass(frozen=True)
class Decision:
    t: float
    action: str  # an Action's value: launch, terminate, fallback, infeasible, capacity, ...
    reason: str
    node_type: str | None = None
    count: int | None = None
    kind: Literal["decision"] = "decision"


@dataclass(frozen=True)
class Reclaim:
    t: float
    node_id: str
    node_type: str
    how: ReclaimHow
    replaced_by: str | None = None
    kind: Literal["reclaim"] = "reclaim"


@dataclass(frozen=True)
class Failure:
    t: float
    node_type: str
    reason: str
    zone: str | None = None
    kind: Literal["failure"] = "failure"


Event = Sample | Decision | Reclaim | Failure


def _body(sample: Sample) -> dict[str, Any]:
    data = to_dict(sample)
    data.pop("t")
    return data


def to_dict(event: Event) -> dict[str, Any]:
    base: dict[str, Any] = {"kind": event.kind, "t": event.t}
    if isinstance(event, Sample):
        nodes = {
            name: {"running": c.running, "launching": c.launching, "spot": c.spot}
            for name, c in sorted(event.nodes.items())
        }
        pending = {k: float(v) for k, v in sorted(event.pending.items())}
        return {
            **base,
            "nodes": nodes,
            "pending": pending,
            "infeasible": event.infeasible,
            "cost_per_hour": event.cost_per_hour,
        }
    if isinstance(event, Decision):
        return {
            **base,
            "action": event.action,
            "node_type": event.node_type,
            "count": event.count,
            "reason": event.reason,
        }
    if isinstance(event, Reclaim):
        return {
            **base,
            "node_id": event.node_id,
            "node_type": event.node_type,
            "how": event.how,
            "replaced_by": event.replaced_by,
        }
    return {
        **base,
        "node_type": event.node_type,
        "zone": event.zone,
        "reason": event.reason,
    }


def encode(event: Event) -> str:
    """One line of JSON (no newline)."""
    return json.dumps(to_dict(event), separators=(",", ":"))


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def from_dict(data: Mapping[str, Any]) -> Event | None:
    """The record `data` holds; None for a kind this version does not know. Raises
    (KeyError, TypeError, ValueError) for a record of a known kind that is malformed."""
    kind, t = data.get("kind"), float(data["t"])
    if kind == "sample":
        nodes = {
            str(name): TypeCount(int(c["running"]), int(c["launching"]), bool(c["spot"]))
            for name, c in dict(data["nodes"]).items()
        }
        cost = data.get("cost_per_hour")
        return Sample(
            t,
            nodes,
            {str(k): float(v) for k, v in dict(data["pending"]).items()},
            int(data.get("infeasible", 0)),
            None if cost is None else float(cost),
        )
    if kind == "decision":
        count = data.get("count")
        return Decision(
            t,
            str(data["action"]),
            str(data["reason"]),
            _opt_str(data.get("node_type")),
            None if count is None else int(count),
        )
    if kind == "reclaim":
        how = str(data["how"])
        if how not in ("notice", "preempted", "gone"):
            raise ValueError(f"unknown reclaim how: {how!r}")
        return Reclaim(
            t,
            str(data["node_id"]),
            str(data["node_type"]),
            how,  # type: ignore[arg-type]  # checked just above
            _opt_str(data.get("replaced_by")),
        )
    if kind == "failure":
        return Failure(t, str(data["node_type"]), str(data["reason"]), _opt_str(data.get("zone")))
    return None


def decode(line: str) -> Event | None:
    """The record on `line`; None for a line that is not one (torn, blank, unknown kind)."""
    try:
        data = json.loads(line)
        return from_dict(data) if isinstance(data, dict) else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def read_timeline(lines: Iterable[str]) -> list[Event]:
    """The records in `lines`, in order; lines that hold none (a torn last line, a kind this
    version does not know) are skipped."""
    out = []
    for line in lines:
        event = decode(line) if line.strip() else None
        if event is not None:
            out.append(event)
    return out


def rotated(path: Path) -> Path:
    """Where `path` goes when it is rotated: timeline.jsonl -> timeline.1.jsonl."""
    return path.with_name(f"{path.stem}.1{path.suffix}")


def read_timeline_files(path: Path) -> list[Event]:
    """Every record kept on disk: the rotated file's, then the current one's."""
    out: list[Event] = []
    for one in (rotated(path), path):
        try:
            with one.open(encoding="utf-8", errors="replace") as lines:
                out += read_timeline(lines)
        except FileNotFoundError:
            continue
    return out


class TimelineWriter:
    """Appends records to `path` (made 0600 in a directory made if missing), rotating it
    past `rotate_bytes`. It never raises: an error writing is passed to `log` (once until
    a write succeeds again) and the record is dropped, so a full disk never stops a tick."""

    def __init__(
        self,
        path: Path,
        log: Callable[[str], None],
        rotate_bytes: int = ROTATE_BYTES,
        sample_every_s: float = SAMPLE_EVERY_S,
    ) -> None:
        self.path = path
        self.log = log
        self.rotate_bytes = rotate_bytes
        self.sample_every_s = sample_every_s
        self.last_sample: Sample | None = None
        self.failing = False
        self.written = 0  # records appended (for tests and the metrics)

    def sample(self, sample: Sample) -> bool:
        """Append `sample` if it differs from the last one written or that one is
        `sample_every_s` old; whether it was written."""
        last = self.last_sample
        if last is not None and sample.same_as(last) and sample.t - last.t < self.sample_every_s:
            return False
        if self.append(sample):
            self.last_sample = sample
            return True
        return False

    def append(self, *events: Event) -> bool:
        """Append `events`, in one write; whether they were written."""
        if not events:
            return True
        text = "".join(encode(e) + "\n" for e in events).encode()
        try:
            self._rotate_if_full(len(text))
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
        except OSError as exc:
            if not self.failing:
                self.log(f"could not write the timeline {self.path}: {exc}")
            self.failing = True
            return False
        self.failing = False
        self.written += len(events)
        return True

    def _rotate_if_full(self, adding: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return
        if size and size + adding > self.rotate_bytes:
            self.path.replace(rotated(self.path))
