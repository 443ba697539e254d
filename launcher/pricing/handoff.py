"""Prices for the head's autoscaler: what `up` hands it, and how it keeps them current.

`up` hands the head the cluster's region's price cache as this machine holds it (what `plan`
just read) and the price settings of this machine's environment (`LAUNCHER_PRICES`, its
timeout, the sources' address overrides): a `PriceHandoff`, carried in the autoscaler's spec
but not in its digest (new prices alone do not restart the autoscaler).

On the head, `HeadPrices` merges the handed cache into the head's own (the newer entry of
each unit wins), plans with it from the first tick, and, in `live` mode, refreshes it in a
thread every `REFRESH_S` with the head's own credentials; a refresh that fails leaves the
prices as they were (labelled with their date), so the head never plans on prices worse than
the ones it was given.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.pricing import PriceTable, load_prices
from launcher.pricing.cache import PriceCache, cache_path, read, write
from launcher.pricing.live import cached_prices, live_prices, prices_mode

if TYPE_CHECKING:
    from launcher.config.model import ClusterConfig
    from launcher.providers.spec import ProviderSpec

# How often the head reads prices again (spot prices' cache TTL is an hour; a refresh finds
# most units fresh and fetches nothing).
REFRESH_S = 600.0
# This machine's variables the head's prices follow: the mode, its timeout, and each
# source's address override (LAUNCHER_AZURE_PRICES_URL, ...).
_PASSED = re.compile(r"LAUNCHER_(\w+_)?PRICES(_\w+)?")


@dataclass(frozen=True)
class PriceHandoff:
    environ: Mapping[str, str] = field(default_factory=dict)
    region: str = ""
    cache: Mapping[str, Any] | None = None  # the region's PriceCache, as JSON

    def to_json(self) -> dict[str, Any]:
        return {"environ": dict(self.environ), "region": self.region, "cache": self.cache}

    @staticmethod
    def from_json(data: Mapping[str, Any] | None) -> PriceHandoff:
        if not data:
            return PriceHandoff()
        return PriceHandoff(
            {str(k): str(v) for k, v in dict(data.get("environ") or {}).items()},
            str(data.get("region") or ""),
            data.get("cache"),
        )


def passed_environ(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if _PASSED.fullmatch(k)}


def handoff_for(
    config: ClusterConfig, spec: ProviderSpec, environ: Mapping[str, str] | None = None
) -> PriceHandoff:
    """What this machine knows of the cluster's prices, for its head."""
    environ = os.environ if environ is None else environ
    passed = passed_environ(environ)
    if spec.price_source is None or prices_mode(environ) == "static":
        return PriceHandoff(passed)
    request = spec.price_request(config, load_prices())
    if request is None:
        return PriceHandoff(passed)
    cache = read(cache_path(spec.type, request.region))
    shipped = PriceCache(cache.entries)  # this machine's failures are not the head's
    return PriceHandoff(passed, request.region, shipped.to_json() if cache.entries else None)


def merged(mine: PriceCache, handed: PriceCache) -> PriceCache:
    """`mine` with each unit `handed` has fetched later than `mine` taken from it."""
    entries = {market: dict(units) for market, units in mine.entries.items()}
    for market, units in handed.entries.items():
        kept = entries.setdefault(market, {})
        for unit, entry in units.items():
            if unit not in kept or entry.fetched_at > kept[unit].fetched_at:
                kept[unit] = entry
    return PriceCache(entries, mine.failures)


def receive(handoff: PriceHandoff, spec: ProviderSpec) -> None:
    """Merge the handed cache into this machine's (the head's)."""
    if handoff.cache is None or not handoff.region:
        return
    path = cache_path(spec.type, handoff.region)
    write(path, merged(read(path), PriceCache.from_json(handoff.cache)))


class HeadPrices:
    """The head's price table: the handed and kept prices at once, then refreshed in the
    background. `table()` never waits on a cloud."""

    def __init__(
        self,
        config: ClusterConfig,
        spec: ProviderSpec,
        handoff: PriceHandoff,
        clock: Callable[[], float],
        base: PriceTable | None = None,
    ) -> None:
        self.config = config
        self.spec = spec
        self.environ = {**os.environ, **handoff.environ}
        self.clock = clock
        self.base = base if base is not None else load_prices()
        receive(handoff, spec)
        self._table = cached_prices(config, spec, self.base, environ=self.environ)
        self._refreshed_at = clock() - REFRESH_S  # the first refresh at the first poll
        self._fresh: PriceTable | None = None
        self._running: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def live(self) -> bool:
        return self.spec.price_source is not None and prices_mode(self.environ) == "live"

    def table(self) -> PriceTable:
        return self._table

    def poll(self) -> PriceTable | None:
        """A newer table when a refresh has finished since the last call (None otherwise);
        starts a refresh when one is due."""
        with self._lock:
            fresh, self._fresh = self._fresh, None
        if fresh is not None:
            self._table = fresh
        now = self.clock()
        idle = self._running is None or not self._running.is_alive()
        if self.live and idle and now - self._refreshed_at >= REFRESH_S:
            self._refreshed_at = now
            self._running = threading.Thread(
                target=self._refresh, name="launcher-head-prices", daemon=True
            )
            self._running.start()
        return fresh

    def _refresh(self) -> None:
        table = live_prices(self.config, self.spec, self.base, environ=self.environ)
        with self._lock:
            self._fresh = table

    def wait(self, timeout_s: float) -> None:
        """Wait for a refresh in flight (tests use it; the daemon never waits: the thread is
        a daemon thread and its answer is simply not used once the daemon stops)."""
        if self._running is not None:
            self._running.join(timeout_s)
