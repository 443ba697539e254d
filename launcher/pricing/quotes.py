"""Prices read from a cloud (quotes) and the pure choices made from them: which zone's price
a cluster pays, and the price table a cluster is planned and billed with.

Nothing here fetches: the sources (`launcher.pricing.aws`, `.gcp`, `.azure`) do, the disk
cache (`launcher.pricing.cache`) keeps what they read, and `launcher.pricing.live` joins
them; the functions here only decide.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.pricing import LIVE_PREFIX, HourlyPrice, MachineInfo, PriceTable

SPOT = "spot"
ON_DEMAND = "on_demand"
MARKETS = (ON_DEMAND, SPOT)
MACHINE = "machine"
ACCELERATOR = "accelerator"


@dataclass(frozen=True)
class Quote:
    """One hourly price as a cloud published it: `machine` (an instance type, machine type,
    VM size, or accelerator with `kind` ACCELERATOR) on `market`, in `where` (a zone, or a
    region for prices that are the same in every zone), from `source`, read at
    `fetched_at` (epoch seconds)."""

    machine: str
    market: str
    usd_per_hour: float
    where: str
    source: str
    fetched_at: float
    kind: str = MACHINE

    def label(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.fetched_at))
        return f"{LIVE_PREFIX}{self.source}, {self.where}, fetched {when}"

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "market": self.market,
            "usd_per_hour": self.usd_per_hour,
            "where": self.where,
            "source": self.source,
            "fetched_at": self.fetched_at,
            "kind": self.kind,
        }

    @staticmethod
    def from_json(row: Mapping[str, Any]) -> Quote:
        return Quote(
            machine=str(row["machine"]),
            market=str(row["market"]),
            usd_per_hour=float(row["usd_per_hour"]),
            where=str(row["where"]),
            source=str(row["source"]),
            fetched_at=float(row["fetched_at"]),
            kind=str(row.get("kind", MACHINE)),
        )


@dataclass(frozen=True)
class PriceRequest:
    """The prices one cluster needs: its provider's `machines` and `accelerators` in
    `region`, preferring the price of `zones` in that order (where it runs).
    `provider_config` is the cluster's typed provider section, opaque here: a source may
    read its credentials from it. `known` are the table's rows for the machines (sizes)."""

    provider: str
    region: str
    zones: tuple[str, ...]
    machines: tuple[str, ...]
    accelerators: tuple[str, ...] = ()
    provider_config: Any = None
    known: Mapping[str, MachineInfo] = field(default_factory=dict)


def choose(quotes: Iterable[Quote], zones: tuple[str, ...]) -> dict[tuple[str, str, str], Quote]:
    """Per (kind, machine, market), the quote a cluster in `zones` pays: that of the first of
    `zones` with one (where launches go first); else a region-wide one; else the cheapest
    zone's (the cluster may run in any zone of the region)."""
    grouped: dict[tuple[str, str, str], list[Quote]] = {}
    for quote in quotes:
        grouped.setdefault((quote.kind, quote.machine, quote.market), []).append(quote)
    chosen = {}
    for key, group in grouped.items():
        by_place = {q.where: q for q in sorted(group, key=lambda q: q.fetched_at)}
        pick = next((by_place[z] for z in zones if z in by_place), None)
        if pick is None:
            pick = min(by_place.values(), key=lambda q: (q.usd_per_hour, q.where))
        chosen[key] = pick
    return chosen


def _merged(old: HourlyPrice | None, on_demand: Quote | None, spot: Quote | None) -> HourlyPrice:
    """`old` with the figures the quotes give replaced (each with its label)."""
    price = old or HourlyPrice(0.0, None)
    if on_demand is not None:
        price = replace(price, on_demand=on_demand.usd_per_hour, on_demand_source=on_demand.label())
    if spot is not None:
        price = replace(price, spot=spot.usd_per_hour, spot_source=spot.label())
    return price


def overlay(
    table: PriceTable,
    provider: str,
    quotes: Iterable[Quote],
    zones: tuple[str, ...],
    note: str,
    sizes: Mapping[str, MachineInfo] | None = None,
) -> PriceTable:
    """`table` with `provider`'s rows priced from `quotes` (see `choose`). A machine the
    table has no row for is added only when `sizes` gives its size, and with an on-demand
    price; likewise an accelerator is added only with an on-demand price."""
    chosen = choose(quotes, zones)
    machines: dict[str, MachineInfo] = {}
    accelerators: dict[str, HourlyPrice] = {}
    for kind, machine, _ in chosen:
        on_demand = chosen.get((kind, machine, ON_DEMAND))
        spot = chosen.get((kind, machine, SPOT))
        if kind == MACHINE:
            info = table.machine(provider, machine)
            if info is not None:
                machines[machine] = replace(info, price=_merged(info.price, on_demand, spot))
            elif on_demand is not None and (sized := (sizes or {}).get(machine)) is not None:
                machines[machine] = replace(sized, price=_merged(None, on_demand, spot))
        elif kind == ACCELERATOR:
            old = table.accelerator(provider, machine)
            if old is not None or on_demand is not None:
                accelerators[machine] = _merged(old, on_demand, spot)
    return table.with_prices(provider, machines, accelerators, note)
