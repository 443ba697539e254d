"""What the executor remembers about failures, so it stops repeating them. Pure: time is
passed in.

- `CapacityMemory`: launches that failed for lack of capacity, and spot nodes taken back,
  per node type and zone. The zone is avoided for a while (doubling on each repeated
  failure, reset by a launch there that works); a type whose every zone is avoided is
  unavailable, and the planner launches its fallbacks instead.
- `TypeBackoff`: other failures per node type (an API error on launch, a node whose setup
  failed): after `after` failures in a row the type waits before launching again, the wait
  doubling each time; after `give_up_after` in a row it is not launched again until the
  autoscaler restarts (which `launcher up` does when the config changes).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

CAPACITY_BACKOFF_S = 120.0
CAPACITY_BACKOFF_MAX_S = 1800.0


@dataclass
class _Record:
    failures: int
    until: float
    reason: str


@dataclass
class CapacityMemory:
    base_s: float = CAPACITY_BACKOFF_S
    max_s: float = CAPACITY_BACKOFF_MAX_S
    records: dict[tuple[str, str], _Record] = field(default_factory=dict)

    def failed(self, node_type: str, zone: str, now: float, reason: str) -> float:
        """Remember a capacity failure (or preemption) of `node_type` in `zone`; returns
        how long the zone is avoided. `reason` is what happened: "capacity failure",
        "preempted"."""
        old = self.records.get((node_type, zone))
        failures = old.failures + 1 if old is not None else 1
        wait = min(self.max_s, self.base_s * 2.0 ** (failures - 1))
        self.records[node_type, zone] = _Record(failures, now + wait, reason)
        return wait

    def succeeded(self, node_type: str, zone: str) -> None:
        self.records.pop((node_type, zone), None)

    def freed(self, zones: Collection[str]) -> None:
        """Capacity came back in `zones` (a node there was terminated, on a provider where
        that frees a machine): forget their failures, for every type."""
        for key in [k for k in self.records if k[1] in zones]:
            del self.records[key]

    def avoided_zones(self, node_type: str, now: float) -> frozenset[str]:
        return frozenset(
            zone for (name, zone), r in self.records.items() if name == node_type and r.until > now
        )

    def unavailable(self, zones: Mapping[str, Collection[str]], now: float) -> dict[str, str]:
        """Types every one of whose zones is avoided now -> why, e.g. "capacity failure in
        us-west-2a, us-west-2b"."""
        out = {}
        for node_type, type_zones in zones.items():
            live = {
                zone: self.records[node_type, zone]
                for zone in type_zones
                if (node_type, zone) in self.records and self.records[node_type, zone].until > now
            }
            if not type_zones or len(live) < len(type_zones):
                continue
            by_reason: dict[str, list[str]] = {}
            for zone, record in sorted(live.items()):
                by_reason.setdefault(record.reason, []).append(zone)
            out[node_type] = "; ".join(
                f"{reason} in {', '.join(z)}" if any(z) else reason
                for reason, z in by_reason.items()
            )
        return out

    def describe(self, now: float) -> list[dict[str, object]]:
        """What is avoided now, for `launcher status`."""
        return [
            {
                "node_type": name,
                "zone": zone,
                "reason": r.reason,
                "failures": r.failures,
                "for_s": round(r.until - now),
            }
            for (name, zone), r in sorted(self.records.items())
            if r.until > now
        ]


@dataclass
class TypeBackoff:
    what: str  # "launches failed", "setups failed"
    after: int = 1
    base_s: float = 5.0
    max_s: float = 300.0
    give_up_after: int | None = None
    failures: dict[str, int] = field(default_factory=dict)
    until: dict[str, float] = field(default_factory=dict)

    def failed(self, node_type: str, now: float) -> str | None:
        """Count a failure; returns what happens next, for the decision log, or None when
        the type may simply try again."""
        count = self.failures.get(node_type, 0) + 1
        self.failures[node_type] = count
        if self.give_up_after is not None and count >= self.give_up_after:
            self.until[node_type] = float("inf")
            return (
                f"{node_type}: {count} {self.what} in a row; not launching it again until "
                "the config changes (fix it, then run `launcher up`)"
            )
        if count < self.after:
            return None
        wait = min(self.max_s, self.base_s * 2.0 ** (count - self.after))
        self.until[node_type] = now + wait
        return f"{node_type}: {count} {self.what} in a row; waiting {wait:g} s before trying again"

    def succeeded(self, node_type: str) -> None:
        self.failures.pop(node_type, None)
        self.until.pop(node_type, None)

    def blocked(self, now: float) -> dict[str, float]:
        """Types that must not launch now -> until when (inf: given up)."""
        return {name: end for name, end in self.until.items() if end > now}

    def reasons(self, now: float) -> dict[str, str]:
        """Types that must not launch now -> why, for the planner and `launcher status`."""
        return {
            name: f"{self.failures.get(name, 0)} {self.what} in a row, not launched "
            + ("until the config changes" if end == float("inf") else "for now")
            for name, end in self.blocked(now).items()
        }
