"""The disk cache of prices read from clouds: `$LAUNCHER_HOME/prices/PROVIDER-REGION.json`.

A source fetches in units (an instance type's spot prices; a whole region's catalogue) and
the cache keeps, per (market, unit), when it was fetched and the quotes it gave (none is an
answer too: the cloud has no such price). An entry is fresh for its market's TTL. A failed
fetch is remembered for `RETRY_AFTER_S`, so an offline machine does not wait on every
`plan`. The file is replaced whole (write, then rename), so a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.paths import launcher_home, named_file
from launcher.pricing.quotes import ON_DEMAND, SPOT, Quote

# How long a fetched price is used before it is fetched again, by market.
TTL_S: Mapping[str, float] = {SPOT: 3600.0, ON_DEMAND: 86400.0}
RETRY_AFTER_S = 300.0
_VERSION = 1


def cache_path(provider: str, region: str) -> Path:
    return named_file(launcher_home() / "prices", f"{provider}-{region}", ".json")


@dataclass(frozen=True)
class Entry:
    fetched_at: float
    quotes: tuple[Quote, ...]


@dataclass(frozen=True)
class Failure:
    at: float
    reason: str


@dataclass(frozen=True)
class PriceCache:
    """What one provider's region's file holds; pure: `read` and `write` do the I/O."""

    entries: Mapping[str, Mapping[str, Entry]] = field(default_factory=dict)  # market, unit
    failures: Mapping[str, Failure] = field(default_factory=dict)  # by market

    def stale(self, market: str, units: Iterable[str], now: float) -> tuple[str, ...]:
        """The units of `market` not fetched within its TTL of `now`."""
        kept = self.entries.get(market, {})
        ttl = TTL_S[market]
        return tuple(u for u in units if u not in kept or not 0 <= now - kept[u].fetched_at < ttl)

    def failed_recently(self, market: str, now: float) -> Failure | None:
        failure = self.failures.get(market)
        return failure if failure and 0 <= now - failure.at < RETRY_AFTER_S else None

    def quotes(self, market: str, units: Iterable[str]) -> list[Quote]:
        """The kept quotes of `units` (however old: a stale price beats none)."""
        kept = self.entries.get(market, {})
        return [q for u in units if u in kept for q in kept[u].quotes]

    def fetched(self, market: str, found: Mapping[str, Iterable[Quote]], now: float) -> PriceCache:
        """This cache after `found` (quotes by unit) was fetched at `now`."""
        kept = dict(self.entries.get(market, {}))
        kept.update({u: Entry(now, tuple(q)) for u, q in found.items()})
        failures = {m: f for m, f in self.failures.items() if m != market}
        return PriceCache({**self.entries, market: kept}, failures)

    def failed(self, market: str, reason: str, now: float) -> PriceCache:
        return PriceCache(self.entries, {**self.failures, market: Failure(now, reason)})

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "entries": {
                market: {
                    unit: {
                        "fetched_at": e.fetched_at,
                        "quotes": [q.to_json() for q in e.quotes],
                    }
                    for unit, e in units.items()
                }
                for market, units in self.entries.items()
            },
            "failures": {m: {"at": f.at, "reason": f.reason} for m, f in self.failures.items()},
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PriceCache:
        if data.get("version") != _VERSION:
            return PriceCache()
        entries = {
            str(market): {
                str(unit): Entry(
                    float(e["fetched_at"]), tuple(Quote.from_json(q) for q in e["quotes"])
                )
                for unit, e in units.items()
            }
            for market, units in data.get("entries", {}).items()
        }
        failures = {
            str(m): Failure(float(f["at"]), str(f["reason"]))
            for m, f in data.get("failures", {}).items()
        }
        return PriceCache(entries, failures)


def read(path: Path) -> PriceCache:
    """The cache in `path`; empty when there is none or it cannot be read (it is a cache)."""
    try:
        return PriceCache.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return PriceCache()


def write(path: Path, cache: PriceCache) -> None:
    """Replace `path` with `cache`; a cache that cannot be written is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(cache.to_json(), f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        return
