"""Dated tables of instance sizes and hourly prices, for estimates in `plan`.

Each cloud provider ships its table in its own package (its spec's `price_file`): indicative
list prices in one reference region, with when it was compiled and where its figures come
from; everything shown from it carries that date.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class HourlyPrice:
    on_demand: float
    spot: float | None

    def __add__(self, other: HourlyPrice) -> HourlyPrice:
        spot = None if self.spot is None or other.spot is None else self.spot + other.spot
        return HourlyPrice(self.on_demand + other.on_demand, spot)

    def times(self, count: int) -> HourlyPrice:
        return HourlyPrice(self.on_demand * count, None if self.spot is None else self.spot * count)


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

    def dated(self, provider: str) -> str:
        """The date of `provider`'s prices (the whole table's where it has none of its own)."""
        return self.dates.get(provider, self.as_of)

    def machine(self, provider: str, name: str) -> MachineInfo | None:
        return self.machines.get(provider, {}).get(name)

    def accelerator(self, provider: str, name: str) -> HourlyPrice | None:
        return self.accelerators.get(provider, {}).get(name)


def _machine(name: str, row: Mapping[str, Any]) -> MachineInfo:
    return MachineInfo(
        name=name,
        vcpus=int(row["vcpus"]),
        memory_gib=float(row["memory_gib"]),
        gpus=int(row.get("gpus", 0)),
        gpu_model=row.get("gpu_model"),
        price=HourlyPrice(float(row["on_demand"]), row.get("spot")),
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
            t: {k: _machine(k, v) for k, v in rows["machines"].items()}
            for t, (_, rows) in tables.items()
        },
        accelerators={
            t: {
                k: HourlyPrice(float(v["on_demand"]), v.get("spot"))
                for k, v in rows.get("accelerators", {}).items()
            }
            for t, (_, rows) in tables.items()
        },
    )
