"""The planner's values: what it is given (the node types as `Settings`, a `Snapshot` of
nodes and pending demand) and what it returns (a `Plan` of typed `Decision`s and
`Placement`s). Plain frozen data, shared by the planner, the daemon and the simulator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.autoscaler.decide.actions import Action
from launcher.autoscaler.decide.packing import Resources
from launcher.autoscaler.decide.plan_mix import NODE_OVERHEAD


@dataclass(frozen=True)
class TypeInfo:
    name: str
    resources: Resources
    min_workers: int
    max_workers: int
    price: float | None = None  # per hour, as configured (spot price for spot types)
    idle_timeout_s: float | None = None
    priority: int = 0
    fallbacks: tuple[str, ...] = ()  # launched instead while this type is unavailable

    @property
    def has_gpu(self) -> bool:
        return self.resources.get("GPU", 0) > 0


@dataclass(frozen=True)
class NodeView:
    id: str
    node_type: str
    is_head: bool = False
    launching: bool = False  # created, not yet serving Ray
    total: Resources = field(default_factory=dict)
    available: Resources = field(default_factory=dict)
    idle_s: float | None = None
    stands_in_for: str | None = None  # launched for this type's min_workers as its fallback


@dataclass(frozen=True)
class Gang:
    """A pending placement group."""

    bundles: tuple[Resources, ...]
    strategy: str = "PACK"  # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD
    name: str = ""


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeView, ...] = ()
    pending: tuple[tuple[Resources, int], ...] = ()  # bundle shape, how many
    gangs: tuple[Gang, ...] = ()
    constraints: tuple[Resources, ...] = ()  # request_resources bundles
    unavailable: Mapping[str, str] = field(default_factory=dict)  # type -> why, for now


@dataclass(frozen=True)
class Settings:
    types: Mapping[str, TypeInfo]
    max_workers: int
    upscaling_speed: float = 1.0
    idle_timeout_s: float = 300.0
    # With prices: what every new node costs besides its price when choosing types, as a
    # share of the cheapest priced type's price (fewer, bigger nodes for a little more
    # money; 0 chooses by price alone). Not in the cluster config yet.
    node_overhead: float = NODE_OVERHEAD


@dataclass(frozen=True)
class Decision:
    action: Action  # launch | terminate | infeasible | wait | fallback
    reason: str
    node_type: str | None = None
    count: int = 0
    node_id: str | None = None
    stands_in_for: str | None = None  # launch: for this type's min_workers

    def __str__(self) -> str:
        if self.action is Action.LAUNCH:
            return f"launch {self.count} x {self.node_type}: {self.reason}"
        if self.action is Action.TERMINATE:
            return f"terminate {self.node_id}: {self.reason}"
        return f"{self.action.value}: {self.reason}"


@dataclass(frozen=True)
class Placement:
    """`count` bundles of `request` on one node: an existing one (`node_id`) or the
    `new`-th node this plan launches, of `node_type`; `group` is the index of the placement
    group in `Snapshot.gangs` (its STRICT_PACK bundles as their sum), or -1 for tasks."""

    node_id: str | None
    new: int
    node_type: str
    request: Resources
    count: int
    group: int


@dataclass(frozen=True)
class Plan:
    launch: Mapping[str, int]
    terminate: tuple[tuple[str, str], ...]
    infeasible: tuple[Resources, ...]
    decisions: tuple[Decision, ...]
    # (fallback type, type it stands in for) -> how many of `launch` are such stand-ins
    stand_ins: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # with plan(..., record=True): where each placed bundle went (before upscaling limits)
    placements: tuple[Placement, ...] = ()

    def launches(self) -> list[tuple[str, int, str | None]]:
        """`launch` split into (type, count, the type they stand in for or None)."""
        out: list[tuple[str, int, str | None]] = [
            (fallback, count, original)
            for (fallback, original), count in self.stand_ins.items()
            if count > 0
        ]
        for name, count in self.launch.items():
            plain = count - sum(n for (f, _), n in self.stand_ins.items() if f == name)
            if plain > 0:
                out.append((name, plain, None))
        return out


def show(resources: Resources) -> str:
    inner = ", ".join(f"{k}: {_num(v)}" for k, v in sorted(resources.items()))
    return "{" + inner + "}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
