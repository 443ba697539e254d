"""Live prices for one cluster: read from the cloud where it publishes them, kept in the disk
cache with their date, laid over the provider's static table.

    prices = live_prices(config, spec, load_prices())

A provider takes part by naming its source (`ProviderSpec.price_source`, a module of this
package with `SOURCE`, a `PriceSource`) and saying what a cluster needs
(`ProviderSpec.price_request`). Fetching is bounded: one deadline for all of it
(`LAUNCHER_PRICES_TIMEOUT`, seconds, default 5), short timeouts on each call, no retries;
whatever is not in by then, or fails, or whose SDK is not installed, is priced from the
static table, and the table's note says why. `LAUNCHER_PRICES` chooses: `live` (the
default: fetch what the cache lacks or holds past its TTL), `cached` (the cache only, never
fetch) or `static` (the shipped table only).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from launcher.pricing import PriceTable
from launcher.pricing.cache import PriceCache, cache_path, read, write
from launcher.pricing.quotes import MARKETS, PriceRequest, Quote, overlay

if TYPE_CHECKING:
    from launcher.config.model import ClusterConfig
    from launcher.providers.spec import ProviderSpec

MODES = ("live", "cached", "static")
DEFAULT_TIMEOUT_S = 5.0


class PriceSource(Protocol):
    """A cloud's published prices. `fetch` may raise anything: the caller keeps the table."""

    title: str  # what `plan` names: "EC2 spot price history, AWS Price List API"

    def units(self, request: PriceRequest, market: str) -> tuple[str, ...]:
        """What `request` needs fetched of `market`, in the units the cache keeps."""
        ...

    def fetch(
        self, request: PriceRequest, market: str, units: Sequence[str], timeout_s: float
    ) -> dict[str, list[Quote]]:
        """The quotes of each of `units` (every unit a key, with no quotes where the cloud
        has no price), each call within `timeout_s`."""
        ...

    def derive(self, quotes: Sequence[Quote], request: PriceRequest) -> list[Quote]:
        """The machines' and accelerators' quotes from the fetched ones."""
        ...


@dataclass
class _Fetched:
    """What the fetching thread hands back."""

    found: dict[str, dict[str, list[Quote]]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


def prices_mode(environ: Mapping[str, str]) -> str:
    mode = environ.get("LAUNCHER_PRICES", "live").strip().lower() or "live"
    return mode if mode in MODES else "live"


def _timeout(environ: Mapping[str, str]) -> float:
    try:
        value = float(environ.get("LAUNCHER_PRICES_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def _source(name: str) -> PriceSource | str:
    """The source module's SOURCE, or why there is none (its SDK is not installed)."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        return f"its SDK is not installed ({exc.name or exc})"
    source: PriceSource = module.SOURCE
    return source


def _fetch_all(
    source: PriceSource, request: PriceRequest, wanted: Mapping[str, Sequence[str]], budget: float
) -> _Fetched:
    """Fetch `wanted` (units by market) in a thread, waiting at most `budget` seconds."""
    out = _Fetched()
    deadline = time.monotonic() + budget

    def run() -> None:
        for market, units in wanted.items():
            left = deadline - time.monotonic()
            if left <= 0.05:
                out.failures[market] = f"no answer within {budget:g} s"
                continue
            try:
                out.found[market] = source.fetch(request, market, units, min(left, 3.0))
            except Exception as exc:  # a source's SDK raises its own kinds; all mean "not now"
                out.failures[market] = _reason(exc)

    worker = threading.Thread(target=run, name="launcher-prices", daemon=True)
    worker.start()
    worker.join(budget)
    if worker.is_alive():  # left to finish on its own; its answer comes too late
        return _Fetched(failures=dict.fromkeys(wanted, f"no answer within {budget:g} s"))
    return out


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def live_prices(
    config: ClusterConfig,
    spec: ProviderSpec,
    table: PriceTable,
    *,
    now: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> PriceTable:
    """`table` with the cluster's prices read from its cloud laid over it (see the module)."""
    environ = os.environ if environ is None else environ
    mode = prices_mode(environ)
    if mode == "static" or spec.price_source is None:
        return table
    request = spec.price_request(config, table)
    if request is None or not (request.machines or request.accelerators):
        return table
    now = time.time() if now is None else now
    fallback = f"static table {table.dated(spec.type)}"
    source = _source(spec.price_source)
    if isinstance(source, str):
        note = f"no live prices: {source}; {fallback} used"
        return table.with_prices(spec.type, {}, {}, note)
    path = cache_path(spec.type, request.region)
    cache = read(path)
    units = {market: source.units(request, market) for market in MARKETS}
    problems: list[str] = []
    if mode == "live":
        cache, problems = _refresh(cache, source, request, units, now, _timeout(environ))
        write(path, cache)
    quotes = [q for market in MARKETS for q in cache.quotes(market, units[market])]
    derived = source.derive(quotes, request)
    note = f"live prices: {source.title}" if derived else f"no live prices; {fallback} used"
    if problems:
        note += f" ({'; '.join(problems)}; {fallback} used where no live price is kept)"
    return overlay(table, spec.type, derived, request.zones, note, request.known)


def cached_prices(
    config: ClusterConfig,
    spec: ProviderSpec,
    table: PriceTable,
    *,
    environ: Mapping[str, str] | None = None,
) -> PriceTable:
    """As `live_prices`, from the disk cache only (however old): never fetches."""
    environ = os.environ if environ is None else environ
    if prices_mode(environ) == "static":
        return table
    return live_prices(config, spec, table, environ={**environ, "LAUNCHER_PRICES": "cached"})


def _refresh(
    cache: PriceCache,
    source: PriceSource,
    request: PriceRequest,
    units: Mapping[str, Sequence[str]],
    now: float,
    budget: float,
) -> tuple[PriceCache, list[str]]:
    """The cache with its stale units fetched; and what went wrong, one phrase each."""
    problems = []
    wanted = {}
    for market in MARKETS:
        stale = cache.stale(market, units[market], now)
        if not stale:
            continue
        failure = cache.failed_recently(market, now)
        if failure is not None:
            problems.append(f"{market.replace('_', '-')} prices unavailable: {failure.reason}")
            continue
        wanted[market] = stale
    if not wanted:
        return cache, problems
    fetched = _fetch_all(source, request, wanted, budget)
    for market, found in fetched.found.items():
        cache = cache.fetched(market, found, now)
    for market, reason in fetched.failures.items():
        cache = cache.failed(market, reason, now)
        problems.append(f"{market.replace('_', '-')} prices unavailable: {reason}")
    return cache, problems
