"""A small dated table of instance sizes and hourly prices, for estimates in `plan`.

Prices are indicative list prices in one reference region per provider; the table says
when it was compiled and where its figures come from, and everything shown from it carries
that date.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
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
    """The table shipped with the package (read once; it never changes at run time)."""
    raw = json.loads(resources.files(__package__).joinpath("prices.json").read_text())
    aws, gcp = raw["aws"], raw["gcp"]
    return PriceTable(
        as_of=raw["as_of"],
        note=raw["note"],
        source=raw["source"],
        reference_regions={"aws": aws["reference_region"], "gcp": gcp["reference_region"]},
        machines={
            "aws": {k: _machine(k, v) for k, v in aws["instance_types"].items()},
            "gcp": {k: _machine(k, v) for k, v in gcp["machine_types"].items()},
        },
        accelerators={
            "gcp": {
                k: HourlyPrice(float(v["on_demand"]), v.get("spot"))
                for k, v in gcp["accelerators"].items()
            }
        },
    )
