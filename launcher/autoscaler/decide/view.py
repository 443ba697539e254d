"""Turn what the provider and Ray report into the planner's snapshot and settings (pure)."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from launcher.autoscaler.decide.demand import Demand, RayNode
from launcher.autoscaler.decide.planner import NodeView, Settings, Snapshot, TypeInfo
from launcher.config.model import ClusterConfig
from launcher.pricing import PriceTable
from launcher.providers.base import TAG_STANDS_IN_FOR, Node, NodeKind, NodeStatus
from launcher.providers.spec import ProviderSpec


@dataclass(frozen=True)
class PendingLaunch:
    """A launch the executor has under way: planned as starting nodes."""

    id: int
    node_type: str
    count: int
    stands_in_for: str | None
    started: float  # wall-clock time (epoch)
    # The provider's idempotency key: a repeat of this launch makes nothing more.
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def planner_settings(config: ClusterConfig, spec: ProviderSpec, prices: PriceTable) -> Settings:
    types = {}
    for name, node_type in config.node_types.items():
        offer = spec.node_offer(config, node_type, prices)
        price = None
        if offer.price is not None:
            price = (
                offer.price.spot
                if offer.spot and offer.price.spot is not None
                else offer.price.on_demand
            )
        types[name] = TypeInfo(
            name=name,
            resources={k: float(v) for k, v in node_type.resources.items()},
            min_workers=node_type.min_workers,
            max_workers=node_type.max_workers,
            price=price,
            idle_timeout_s=node_type.idle_timeout_s,
            priority=node_type.priority or 0,
            fallbacks=tuple(config.fallbacks.get(name, ())),
        )
    settings = Settings(
        types=types,
        max_workers=config.max_workers,
        upscaling_speed=config.upscaling_speed,
        idle_timeout_s=config.idle_timeout_minutes * 60,
    )
    if config.node_overhead is not None:
        settings = replace(settings, node_overhead=config.node_overhead)
    return settings


def price_changes(before: Settings, after: Settings) -> list[str]:
    """One phrase per node type whose planning price differs between `before` and `after`:
    "TYPE: $A/h -> $B/h" (a price not known shows as "unknown")."""

    def shown(price: float | None) -> str:
        return "unknown" if price is None else f"${price:.4f}/h"

    out = []
    for name, new in after.types.items():
        old = before.types.get(name)
        if old is not None and old.price != new.price:
            out.append(f"{name}: {shown(old.price)} -> {shown(new.price)}")
    return out


def snapshot(
    config: ClusterConfig,
    nodes: Sequence[Node],
    demand: Demand,
    leaving: Collection[str],
    pending: Sequence[PendingLaunch] = (),
    unavailable: Mapping[str, str] | None = None,
) -> Snapshot:
    """Provider nodes matched to Ray's nodes by IP, plus launches still in flight. Nodes in
    `leaving` are left out."""
    ray_by_ip: dict[str, RayNode] = {n.ip: n for n in demand.nodes if n.alive}
    views = []
    for node in nodes:
        if node.id in leaving:
            continue
        ray = ray_by_ip.get(node.ip or "")
        total = _declared(config, node.node_type)
        serving = ray is not None and node.status is NodeStatus.UP_TO_DATE
        if ray is not None:
            total = {k: v for k, v in ray.total.items() if k in total} or total
        views.append(
            NodeView(
                id=node.id,
                node_type=node.node_type,
                is_head=node.kind is NodeKind.HEAD,
                launching=not serving,
                total=total,
                available={k: v for k, v in ray.available.items() if k in total}
                if serving and ray
                else total,
                idle_s=ray.idle_s if serving and ray else None,
                stands_in_for=node.tags.get(TAG_STANDS_IN_FOR) or None,
            )
        )
    for launch in pending:
        total = _declared(config, launch.node_type)
        views += [
            NodeView(
                id=f"launch-{launch.id}-{index}",
                node_type=launch.node_type,
                launching=True,
                total=total,
                available=total,
                stands_in_for=launch.stands_in_for,
            )
            for index in range(launch.count)
        ]
    return Snapshot(
        tuple(views), demand.pending, demand.gangs, demand.constraints, dict(unavailable or {})
    )


def _declared(config: ClusterConfig, type_name: str) -> dict[str, float]:
    """The resources a node type declares (none for a type no longer in the config)."""
    declared = config.node_types.get(type_name)
    return {k: float(v) for k, v in declared.resources.items()} if declared else {}
