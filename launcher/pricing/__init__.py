"""Dated tables of instance sizes and hourly prices, for estimates in `plan`.

Each cloud provider ships its table in its own package (its spec's `price_file`): indicative
list prices in one reference region, with when it was compiled and where its figures come
from; everything shown from it carries that date.

Where the cloud publishes prices, `launcher.pricing.live.live_prices` lays the prices read
from it (cached on disk with their date) over this table for one cluster. Every price says
where it comes from (`HourlyPrice.on_demand_source`, `spot_source`): "static table DATE
(REGION)" or "live: SOURCE, WHERE, fetched DATE".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

LIVE_PREFIX = "live: "


def static_label(as_of: str, region: str) -> str:
    """The source of a price from a provider's shipped table."""
    return f"static table {as_of} ({region})" if region else f"static table {as_of}"


def _joined(first: str, second: str) -> str:
    return " + ".join(dict.fromkeys(s for s in (first, second) if s))


@dataclass(frozen=True)
class HourlyPrice:
    on_demand: float
    spot: float | None
    # Where each figure comes from ("" where unknown); not part of the price's value.
    on_demand_source: str = field(default="", compare=False)
    spot_source: str = field(default="", compare=False)

    @property
    def live(self) -> bool:
        """Both figures (the spot one where there is one) were read from the cloud."""
        return self.on_demand_source.startswith(LIVE_PREFIX) and (
            self.spot is None or self.spot_source.startswith(LIVE_PREFIX)
        )

    def __add__(self, other: HourlyPrice) -> HourlyPrice:
        spot = None if self.spot is None or other.spot is None else self.spot + other.spot
        return HourlyPrice(
            self.on_demand + other.on_demand,
            spot,
            _joined(self.on_demand_source, other.on_demand_source),
            _joined(self.spot_source, other.spot_source) if spot is not None else "",
        )

    def times(self, count: int) -> HourlyPrice:
        return HourlyPrice(
            self.on_demand * count,
            None if self.spot is None else self.spot * count,
            self.on_demand_source,
            self.spot_source,
        )


@dataclass(frozen=True)
class MachineInfo:
    """Size and price of one instance or machine type."""

    name: str
    vcpus: int
    memory_gib: float
    gpus: int
    gpu_model: str | None
    price: HourlyPrice


@dataclass(frozen=True)
class PriceTable:
    as_of: str
    note: str
    source: str  # the pricing pages the figures were read from
    reference_regions: Mapping[str, str]
    machines: Mapping[str, Mapping[str, MachineInfo]]
    accelerators: Mapping[str, Mapping[str, HourlyPrice]]
    # Each provider's table's own date (`as_of` is the oldest of them).
    dates: Mapping[str, str] = field(default_factory=dict)
    # Per provider, what became of live prices where they were asked for (`live_prices`):
    # "live prices from ..." or why the static table was used instead.
    live_notes: Mapping[str, str] = field(default_factory=dict)

    def dated(self, provider: str) -> str:
        """The date of `provider`'s prices (the whole table's where it has none of its own)."""
        return self.dates.get(provider, self.as_of)

    def machine(self, provider: str, name: str) -> MachineInfo | None:
        return self.machines.get(provider, {}).get(name)

    def accelerator(self, provider: str, name: str) -> HourlyPrice | None:
        return self.accelerators.get(provider, {}).get(name)

    def static_source(self, provider: str) -> str:
        """The label of `provider`'s shipped table's prices."""
        return static_label(self.dated(provider), self.reference_regions.get(provider, ""))

    def with_prices(
        self,
        provider: str,
        machines: Mapping[str, MachineInfo],
        accelerators: Mapping[str, HourlyPrice],
        note: str,
    ) -> PriceTable:
        """This table with `provider`'s rows replaced or added from `machines` and
        `accelerators`, and `note` said of its live prices."""
        return replace(
            self,
            machines={**self.machines, provider: {**self.machines.get(provider, {}), **machines}},
            accelerators={
                **self.accelerators,
                provider: {**self.accelerators.get(provider, {}), **accelerators},
            },
            live_notes={**self.live_notes, provider: note},
        )


def _price(row: Mapping[str, Any], label: str) -> HourlyPrice:
    spot = row.get("spot")
    return HourlyPrice(float(row["on_demand"]), spot, label, label if spot is not None else "")


def _machine(name: str, row: Mapping[str, Any], label: str = "") -> MachineInfo:
    return MachineInfo(
        name=name,
        vcpus=int(row["vcpus"]),
        memory_gib=float(row["memory_gib"]),
        gpus=int(row.get("gpus", 0)),
        gpu_model=row.get("gpu_model"),
        price=_price(row, label),
    )


@lru_cache(maxsize=1)
def load_prices() -> PriceTable:
    """The price tables the providers ship in their packages (each spec's `price_file`),
    read once (they never change at run time). The table's date is its oldest one's; each
    provider's own is `dated(type)`."""
    from launcher.providers.registry import SPECS  # the registry's specs import this module

    tables: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for spec in SPECS.values():
        rows = spec.price_rows()
        if rows is not None and spec.package not in {t[0] for t in tables.values()}:
            tables[spec.type] = (spec.package, rows)
    return PriceTable(
        as_of=min((rows["as_of"] for _, rows in tables.values()), default=""),
        note=" ".join(dict.fromkeys(rows["note"] for _, rows in tables.values())),
        source=" ".join(rows["source"] for _, rows in tables.values()),
        reference_regions={t: rows["reference_region"] for t, (_, rows) in tables.items()},
        dates={t: rows["as_of"] for t, (_, rows) in tables.items()},
        machines={
            t: {k: _machine(k, v, _label(rows)) for k, v in rows["machines"].items()}
            for t, (_, rows) in tables.items()
        },
        accelerators={
            t: {k: _price(v, _label(rows)) for k, v in rows.get("accelerators", {}).items()}
            for t, (_, rows) in tables.items()
        },
    )


def _label(rows: Mapping[str, Any]) -> str:
    return static_label(str(rows["as_of"]), str(rows.get("reference_region", "")))
