"""What `up` would do for a config, computed without changing anything.

`plan_from_prices` is pure: it reads the config, the provider's spec and the price table.
`make_plan` first lays the cluster's live prices over the table where the cloud publishes
them (launcher/pricing/live.py: read-only price calls, cached on disk, bounded in time, the
static table when offline), then plans.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from launcher.config.model import ClusterConfig, NodeCommands, NodeType, ResourceSource
from launcher.pricing import HourlyPrice, PriceTable
from launcher.pricing.live import live_prices
from launcher.providers.spec import NodeOffer, PlannedResource, ProviderSpec
from launcher.runners.container import ContainerSpec, container_for


@dataclass(frozen=True)
class NodeGroupPlan:
    node_type: NodeType
    role: str  # "head" or "worker"
    at_start: int
    at_most: int
    offer: NodeOffer
    commands: NodeCommands
    container: ContainerSpec | None = None  # what setup and Ray run in, if not the host

    @property
    def price(self) -> HourlyPrice | None:
        """Per-node price as configured: spot types at the spot price."""
        price = self.offer.price
        if price is None:
            return None
        if self.offer.spot:
            return None if price.spot is None else HourlyPrice(price.spot, price.spot)
        return price


@dataclass(frozen=True)
class CostEstimate:
    """Hourly cost of the cluster. `None` totals mean some price is unknown."""

    billed: bool
    workers_at_start: int
    workers_at_max: int
    at_start: float | None
    at_start_on_demand: float | None
    at_max: float | None
    at_max_on_demand: float | None
    unpriced_types: tuple[str, ...]
    as_of: str
    reference_region: str | None
    note: str
    # What became of live prices ("live prices: ..." or why the static table was used);
    # "" where none are published for the provider.
    live_note: str = ""


@dataclass(frozen=True)
class ClusterPlan:
    config: ClusterConfig
    head: NodeGroupPlan
    workers: tuple[NodeGroupPlan, ...]
    resources: tuple[PlannedResource, ...]
    cost: CostEstimate

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster_name": self.config.cluster_name,
            "provider": self.config.provider.type,
            "head_node_type": self.head.node_type.name,
            "max_workers": self.config.max_workers,
            "nodes": [_group_json(g) for g in (self.head, *self.workers)],
            "resources": [r.__dict__ for r in self.resources],
            "cost_per_hour": self.cost.__dict__
            | {"unpriced_types": list(self.cost.unpriced_types)},
            "warnings": [w.to_json() for w in self.config.warnings],
        }


def _group_json(group: NodeGroupPlan) -> dict[str, Any]:
    offer = group.offer
    return {
        "role": group.role,
        "node_type": group.node_type.name,
        "count_at_start": group.at_start,
        "max_count": group.at_most,
        "machine": offer.description,
        "market": "spot" if offer.spot else "on-demand",
        "price_on_demand": offer.price.on_demand if offer.price else None,
        "price_spot": offer.price.spot if offer.price else None,
        "price_on_demand_source": offer.price.on_demand_source if offer.price else None,
        "price_spot_source": offer.price.spot_source if offer.price else None,
        "resources": dict(group.node_type.resources),
        "resource_source": group.node_type.resource_source.value,
        "commands": {
            "initialization": list(group.commands.initialization),
            "setup": list(group.commands.setup),
            "start_ray": list(group.commands.start_ray),
        },
        "container": _container_json(group.container),
    }


def _container_json(spec: ContainerSpec | None) -> dict[str, Any] | None:
    return None if spec is None else dataclasses.asdict(spec)


def make_plan(config: ClusterConfig, spec: ProviderSpec, prices: PriceTable) -> ClusterPlan:
    """The plan at the cluster's live prices where there are any (`LAUNCHER_PRICES`)."""
    return plan_from_prices(config, spec, live_prices(config, spec, prices))


def plan_from_prices(config: ClusterConfig, spec: ProviderSpec, prices: PriceTable) -> ClusterPlan:
    head_type = config.head_type
    head = NodeGroupPlan(
        head_type,
        "head",
        1,
        1,
        spec.node_offer(config, head_type, prices),
        config.commands_for(head_type.name, head=True),
        container_for(config, head_type.name, head=True),
    )
    workers = tuple(
        NodeGroupPlan(
            t,
            "worker",
            t.min_workers,
            min(t.max_workers, config.max_workers),
            spec.node_offer(config, t, prices),
            config.commands_for(t.name, head=False),
            container_for(config, t.name, head=False),
        )
        for t in config.node_types.values()
        if t.max_workers > 0 or t.min_workers > 0
    )
    return ClusterPlan(
        config,
        head,
        workers,
        tuple(spec.bootstrap_plan(config)),
        _cost(config, head, workers, prices, spec),
    )


def _cost(
    config: ClusterConfig,
    head: NodeGroupPlan,
    workers: tuple[NodeGroupPlan, ...],
    prices: PriceTable,
    spec: ProviderSpec,
) -> CostEstimate:
    groups = (head, *workers)
    billed = any(g.offer.billed for g in groups)
    unpriced = tuple(g.node_type.name for g in groups if g.offer.billed and g.price is None)
    at_start = [(head, 1)] + [(g, g.at_start) for g in workers]
    at_max = [(head, 1), *_most_expensive_fill(workers, config.max_workers, configured=True)]
    at_max_od = [(head, 1), *_most_expensive_fill(workers, config.max_workers, configured=False)]
    region = prices.reference_regions.get(spec.type) if billed else None
    return CostEstimate(
        billed=billed,
        workers_at_start=sum(count for _, count in at_start[1:]),
        workers_at_max=sum(count for _, count in at_max[1:]),
        at_start=_total(at_start, configured=True),
        at_start_on_demand=_total(at_start, configured=False),
        at_max=_total(at_max, configured=True),
        at_max_on_demand=_total(at_max_od, configured=False),
        unpriced_types=unpriced,
        as_of=prices.dated(spec.type),
        reference_region=region,
        note=prices.note,
        live_note=prices.live_notes.get(spec.type, ""),
    )


def _unit_price(group: NodeGroupPlan, *, configured: bool) -> HourlyPrice | None:
    return group.price if configured else group.offer.price


def _most_expensive_fill(
    workers: tuple[NodeGroupPlan, ...], cap: int, *, configured: bool
) -> list[tuple[NodeGroupPlan, int]]:
    """The costliest mix of workers allowed by per-type and global maxima: a bound on spend."""

    def rank(group: NodeGroupPlan) -> float:
        price = _unit_price(group, configured=configured)
        return price.on_demand if price else float("inf")

    left = cap - sum(g.at_start for g in workers)
    counts = {g.node_type.name: g.at_start for g in workers}
    for group in sorted(workers, key=rank, reverse=True):
        extra = max(0, min(group.at_most - group.at_start, left))
        counts[group.node_type.name] += extra
        left -= extra
    return [(g, counts[g.node_type.name]) for g in workers]


def _total(items: list[tuple[NodeGroupPlan, int]], *, configured: bool) -> float | None:
    total = 0.0
    for group, count in items:
        if count == 0 or not group.offer.billed:
            continue
        price = _unit_price(group, configured=configured)
        if price is None:
            return None
        total += price.on_demand * count
    return round(total, 4)


def describe_resources(node_type: NodeType) -> str:
    """`CPU 4, GPU 1, memory 11.2 GiB` for display."""
    if not node_type.resources:
        return "detected when the node starts"
    parts = []
    for key, value in sorted(node_type.resources.items(), key=lambda kv: _resource_order(kv[0])):
        if key in ("memory", "object_store_memory"):
            parts.append(f"{key} {value / 2**30:.1f} GiB")
        else:
            parts.append(f"{key} {value}")
    text = ", ".join(parts)
    if node_type.resource_source is ResourceSource.INSTANCE_TABLE:
        text += " (from the instance size)"
    return text


def _resource_order(key: str) -> tuple[int, str]:
    order = {"CPU": 0, "GPU": 1, "memory": 2, "object_store_memory": 3}
    return order.get(key, 9), key
