"""The planner: from a snapshot of nodes and Ray's pending demand, decide which workers to
launch and which to terminate. Pure: no I/O and no clock; everything arrives in the snapshot.

Order of work, each step seeing what the previous ones placed:
1. min_workers of every type;
2. placement groups, all bundles or none (STRICT_PACK on one node, STRICT_SPREAD on distinct
   nodes, PACK/SPREAD anywhere);
3. pending task and actor bundles, grouped by shape, first on free capacity, then on new nodes
   of the type that costs least per bundle (CPU-only work never picks a GPU type while a
   CPU-only type fits);
4. `request_resources` constraints, fitted to the cluster's total (not free) capacity;
5. `upscaling_speed` caps how many nodes may be starting at once;
6. idle workers beyond min_workers, untouched by this round's placements, are terminated.
Demand no node type can ever hold is reported as infeasible and launches nothing.

A type the executor found out of capacity (or just preempted) arrives in
`Snapshot.unavailable`: it launches nothing, its configured fallbacks are tried first in its
place, then the other types by the usual rule. Workers launched for an unavailable type's
min_workers "stand in" for it, and once it has capacity again and they are idle past the
timeout, they are terminated so the type itself comes back.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

Resources = Mapping[str, float]
_EPS = 1e-9
MIN_UPSCALING_BURST = 5  # nodes that may start at once however small the cluster


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


@dataclass(frozen=True)
class Decision:
    action: str  # launch | terminate | infeasible | wait | fallback
    reason: str
    node_type: str | None = None
    count: int = 0
    node_id: str | None = None
    stands_in_for: str | None = None  # launch: for this type's min_workers

    def __str__(self) -> str:
        if self.action == "launch":
            return f"launch {self.count} x {self.node_type}: {self.reason}"
        if self.action == "terminate":
            return f"terminate {self.node_id}: {self.reason}"
        return f"{self.action}: {self.reason}"


@dataclass(frozen=True)
class Plan:
    launch: Mapping[str, int]
    terminate: tuple[tuple[str, str], ...]
    infeasible: tuple[Resources, ...]
    decisions: tuple[Decision, ...]
    # (fallback type, type it stands in for) -> how many of `launch` are such stand-ins
    stand_ins: Mapping[tuple[str, str], int] = field(default_factory=dict)

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


def fits(capacity: Resources, request: Resources) -> bool:
    return all(capacity.get(k, 0.0) + _EPS >= v for k, v in request.items() if v > 0)


def how_many(capacity: Resources, request: Resources) -> int:
    """How many copies of `request` fit in `capacity`."""
    counts = [math.floor((capacity.get(k, 0.0) + _EPS) / v) for k, v in request.items() if v > 0]
    return min(counts) if counts else 1_000_000


def _take(capacity: dict[str, float], request: Resources, times: int = 1) -> None:
    for key, value in request.items():
        capacity[key] = capacity.get(key, 0.0) - value * times


@dataclass
class _Slot:
    """A node's capacity during planning: an existing node, or one this plan launches."""

    node_id: str | None
    node_type: str
    free: dict[str, float]
    total: dict[str, float]
    is_head: bool = False
    used: bool = False


class _State:
    def __init__(self, snapshot: Snapshot, settings: Settings) -> None:
        self.settings = settings
        self.slots = [
            _Slot(
                n.id,
                n.node_type,
                dict(n.total if n.launching else n.available),
                dict(n.total),
                n.is_head,
            )
            for n in snapshot.nodes
        ]
        self.counts: Counter[str] = Counter(n.node_type for n in snapshot.nodes if not n.is_head)
        self.workers = sum(self.counts.values())
        self.launch: Counter[str] = Counter()
        self.decisions: list[Decision] = []
        self.infeasible: list[Resources] = []
        self.unavailable = snapshot.unavailable
        self.fell_back: dict[tuple[str, str], None] = {}  # (type, fallback), in order

    def room(self, type_name: str) -> int:
        info = self.settings.types[type_name]
        return max(
            0,
            min(
                info.max_workers - self.counts[type_name], self.settings.max_workers - self.workers
            ),
        )

    def add_node(self, type_name: str) -> _Slot:
        info = self.settings.types[type_name]
        slot = _Slot(None, type_name, dict(info.resources), dict(info.resources))
        self.slots.append(slot)
        self.counts[type_name] += 1
        self.workers += 1
        self.launch[type_name] += 1
        return slot

    def choose_type(self, request: Resources, count: int) -> str | None:
        """The type to launch for `count` bundles of `request`, among those with room."""
        fitting = [
            t
            for t in self.settings.types.values()
            if t.max_workers > 0 and fits(t.resources, request)
        ]
        if not request.get("GPU"):
            cpu_only = [t for t in fitting if not t.has_gpu]
            fitting = cpu_only or fitting
        options = [t for t in fitting if self.room(t.name) > 0]
        if not options:
            return None
        priced = any(t.price is not None for t in options)

        def cost(info: TypeInfo) -> tuple[float, int, float, int, str]:
            per_node = max(1, min(how_many(info.resources, request), count))
            if priced:
                price = info.price / per_node if info.price is not None else math.inf
            else:
                price = 0.0
            waste = sum(
                (info.resources.get(k, 0) - per_node * request.get(k, 0))
                / max(info.resources.get(k, 0), _EPS)
                for k in info.resources
            )
            # Fewest new nodes for the bundles left, then least waste on the last of them.
            nodes = math.ceil(count / max(1, how_many(info.resources, request)))
            return price, nodes, waste, -info.priority, info.name

        best = min(options, key=cost)
        if best.name not in self.unavailable:
            return best.name
        fallback = self.fallback_for(best.name, request)
        if fallback is not None:
            return fallback
        usable = [t for t in options if t.name not in self.unavailable]
        return min(usable, key=cost).name if usable else None

    def fallback_for(self, type_name: str, request: Resources | None = None) -> str | None:
        """The first of `type_name`'s fallbacks that is available, has room and fits."""
        for name in self.settings.types[type_name].fallbacks:
            info = self.settings.types.get(name)
            if (
                info is not None
                and name not in self.unavailable
                and self.room(name) > 0
                and (request is None or fits(info.resources, request))
            ):
                self.fell_back.setdefault((type_name, name), None)
                return name
        return None

    def feasible(self, request: Resources) -> bool:
        """Whether some node could ever hold `request`: a launchable type, or a node that
        exists (the head's own type may launch no workers at all)."""
        return any(
            t.max_workers > 0 and fits(t.resources, request) for t in self.settings.types.values()
        ) or any(fits(slot.total, request) for slot in self.slots)


def plan(snapshot: Snapshot, settings: Settings) -> Plan:
    state = _State(snapshot, settings)
    _min_workers(state, snapshot.nodes)
    for gang in snapshot.gangs:
        _place_gang(state, gang)
    _place_tasks(state, snapshot.pending)
    _place_constraints(state, snapshot.constraints)
    launch, stand_ins = _limit_upscaling(state, snapshot)
    terminate = _idle(state, snapshot, settings)
    for type_name, fallback in state.fell_back:
        if launch[fallback] > 0:  # said only when the fallback is launched now
            state.decisions.insert(
                0,
                Decision(
                    "fallback",
                    f"{type_name}: {state.unavailable[type_name]}, falling back to {fallback}",
                    fallback,
                    launch[fallback],
                ),
            )
    return Plan(
        dict(launch),
        tuple(terminate),
        tuple(state.infeasible),
        tuple(state.decisions),
        dict(stand_ins),
    )


def _min_count(nodes: Iterable[NodeView]) -> Counter[str]:
    """Workers counted toward each type's min_workers: its own, plus those standing in."""
    return Counter(n.stands_in_for or n.node_type for n in nodes if not n.is_head)


def _min_workers(state: _State, nodes: Sequence[NodeView]) -> None:
    have_by_type = _min_count(nodes)
    for name, info in state.settings.types.items():
        have = have_by_type[name]
        want = info.min_workers - have
        if want <= 0:
            continue
        reason = f"below min_workers ({have} < {info.min_workers})"
        if name in state.unavailable:
            placed: Counter[str] = Counter()
            while placed.total() < want and (fallback := state.fallback_for(name)) is not None:
                state.add_node(fallback)
                placed[fallback] += 1
            for fallback, count in placed.items():
                state.decisions.append(
                    Decision("launch", f"{reason} of {name}", fallback, count, stands_in_for=name)
                )
            if placed.total() < want:
                state.decisions.append(
                    Decision(
                        "wait",
                        f"{name}: {state.unavailable[name]}; {want - placed.total()} worker(s) for "
                        "its min_workers wait for capacity",
                    )
                )
            continue
        missing = min(want, state.room(name))
        if missing > 0:
            for _ in range(missing):
                state.add_node(name)
            state.decisions.append(Decision("launch", reason, name, missing))


def _place_tasks(state: _State, pending: Iterable[tuple[Resources, int]]) -> None:
    shapes: Counter[tuple[tuple[str, float], ...]] = Counter()
    for request, count in pending:
        shapes[tuple(sorted((k, float(v)) for k, v in request.items() if v > 0))] += count
    # Largest first (GPU work before CPU work), so big bundles are not starved by small ones.
    order = sorted(
        shapes.items(), key=lambda item: (-dict(item[0]).get("GPU", 0), -sum(v for _, v in item[0]))
    )
    for key, count in order:
        request = dict(key)
        if not state.feasible(request):
            state.infeasible.append(request)
            state.decisions.append(
                Decision(
                    "infeasible", f"{count} pending bundle(s) of {show(request)} fit no node type"
                )
            )
            continue
        left = _fill(state.slots, request, count)
        launched: Counter[str] = Counter()
        while left > 0:
            name = state.choose_type(request, left)
            if name is None:
                state.decisions.append(
                    Decision(
                        "wait",
                        f"{left} pending bundle(s) of {show(request)}: no node type has room "
                        f"(max_workers {state.settings.max_workers})",
                    )
                )
                break
            slot = state.add_node(name)
            placed = min(left, how_many(slot.free, request))
            _take(slot.free, request, placed)
            slot.used = True
            left -= placed
            launched[name] += 1
        for name, nodes in launched.items():
            state.decisions.append(
                Decision("launch", f"{count} pending bundle(s) of {show(request)}", name, nodes)
            )


def _fill(slots: Sequence[_Slot], request: Resources, count: int) -> int:
    """Place up to `count` bundles on existing capacity; returns how many are left."""
    for slot in slots:
        if count <= 0:
            break
        placed = min(count, how_many(slot.free, request))
        if placed > 0:
            _take(slot.free, request, placed)
            slot.used = True
            count -= placed
    return count


def _place_gang(state: _State, gang: Gang) -> None:
    label = f"placement group {gang.name or ''} ({gang.strategy}, {len(gang.bundles)} bundles)"
    if gang.strategy == "STRICT_PACK":
        total: Counter[str] = Counter()
        for bundle in gang.bundles:
            total.update({k: float(v) for k, v in bundle.items()})
        requests: list[Resources] = [dict(total)]
    else:
        requests = list(gang.bundles)
    if not all(state.feasible(r) for r in requests):
        state.infeasible.extend(requests)
        state.decisions.append(Decision("infeasible", f"{label} fits no node type"))
        return
    distinct = gang.strategy == "STRICT_SPREAD"
    trial = [
        _Slot(s.node_id, s.node_type, dict(s.free), s.total, s.is_head, s.used) for s in state.slots
    ]
    taken: set[int] = set()
    new_types: list[str] = []
    counts, workers = Counter(state.counts), state.workers
    for request in requests:
        index = next(
            (
                i
                for i, s in enumerate(trial)
                if not (distinct and i in taken) and fits(s.free, request)
            ),
            None,
        )
        if index is None:
            name = state.choose_type(request, 1)
            info = state.settings.types.get(name or "")
            if (
                info is None
                or counts[info.name] >= info.max_workers
                or workers >= state.settings.max_workers
            ):
                state.decisions.append(Decision("wait", f"{label}: no room for all bundles"))
                return
            counts[info.name] += 1
            workers += 1
            new_types.append(info.name)
            trial.append(_Slot(None, info.name, dict(info.resources), dict(info.resources)))
            index = len(trial) - 1
        _take(trial[index].free, request)
        trial[index].used = True
        taken.add(index)
    # All bundles found a place: commit.
    state.slots = trial
    state.counts, state.workers = counts, workers
    state.launch.update(new_types)
    for name, nodes in Counter(new_types).items():
        state.decisions.append(Decision("launch", label, name, nodes))


def _place_constraints(state: _State, constraints: Sequence[Resources]) -> None:
    """request_resources: size the cluster's total capacity for these bundles."""
    if not constraints:
        return
    capacity = [
        _Slot(s.node_id, s.node_type, dict(s.total), s.total, s.is_head) for s in state.slots
    ]
    shapes: Counter[tuple[tuple[str, float], ...]] = Counter(
        tuple(sorted((k, float(v)) for k, v in c.items() if v > 0)) for c in constraints
    )
    for key, count in shapes.items():
        request = dict(key)
        if not state.feasible(request):
            state.infeasible.append(request)
            state.decisions.append(
                Decision("infeasible", f"requested {count} x {show(request)}: fits no node type")
            )
            continue
        left = _fill(capacity, request, count)
        for slot in capacity:
            if slot.used and slot.node_id is not None:
                _mark_used(state, slot.node_id)
        launched: Counter[str] = Counter()
        while left > 0:
            name = state.choose_type(request, left)
            if name is None:
                state.decisions.append(
                    Decision("wait", f"requested {left} x {show(request)}: no node type has room")
                )
                break
            state.add_node(name)
            extra = _Slot(None, name, dict(state.settings.types[name].resources), {})
            placed = min(left, how_many(extra.free, request))
            _take(extra.free, request, placed)
            capacity.append(extra)
            left -= placed
            launched[name] += 1
        for name, nodes in launched.items():
            state.decisions.append(
                Decision(
                    "launch", f"request_resources asks for {count} x {show(request)}", name, nodes
                )
            )


def _mark_used(state: _State, node_id: str) -> None:
    for slot in state.slots:
        if slot.node_id == node_id:
            slot.used = True


def _limit_upscaling(
    state: _State, snapshot: Snapshot
) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    """The launches that upscaling_speed lets through now, and which of them stand in."""
    running = sum(1 for n in snapshot.nodes if not n.launching)
    starting = sum(1 for n in snapshot.nodes if n.launching)
    allowed = max(MIN_UPSCALING_BURST, math.ceil(state.settings.upscaling_speed * running))
    budget = max(0, allowed - starting)
    wanted = sum(state.launch.values())
    limited: Counter[str] = Counter()
    stand_ins: Counter[tuple[str, str]] = Counter()
    decisions = []
    for decision in state.decisions:  # in the order decided: min_workers, groups, tasks
        if decision.action != "launch" or decision.node_type is None:
            decisions.append(decision)
            continue
        take = min(decision.count, budget)
        budget -= take
        limited[decision.node_type] += take
        if decision.stands_in_for is not None:
            stand_ins[decision.node_type, decision.stands_in_for] += take
        if take:
            decisions.append(replace(decision, count=take))
    state.decisions = decisions
    if wanted <= sum(limited.values()):
        return limited, stand_ins
    state.decisions.append(
        Decision(
            "wait",
            f"launching {sum(limited.values())} of {wanted} node(s) now: at most "
            f"{allowed} may start at once (upscaling_speed {state.settings.upscaling_speed:g})",
        )
    )
    return limited, stand_ins


def _min_of(settings: Settings, type_name: str) -> int:
    info = settings.types.get(type_name)
    return info.min_workers if info is not None else 0


def _idle(state: _State, snapshot: Snapshot, settings: Settings) -> list[tuple[str, str]]:
    used = {s.node_id for s in state.slots if s.used and s.node_id}
    kept = _min_count(snapshot.nodes)
    candidates = sorted(
        (
            n
            for n in snapshot.nodes
            if not n.is_head and not n.launching and n.idle_s is not None and n.id not in used
        ),
        key=lambda n: -(n.idle_s or 0),
    )
    terminate = []
    for node in candidates:
        info = settings.types.get(node.node_type)
        if info is None:
            continue
        timeout = (
            info.idle_timeout_s if info.idle_timeout_s is not None else settings.idle_timeout_s
        )
        if node.idle_s is None or node.idle_s < timeout:
            continue
        counted_as = node.stands_in_for or node.node_type
        back = node.stands_in_for is not None and counted_as not in state.unavailable
        if not back and kept[counted_as] <= _min_of(settings, counted_as):
            continue
        kept[counted_as] -= 1
        reason = f"idle {node.idle_s:.0f} s > {timeout:.0f} s"
        if back:
            reason += f"; it stands in for {counted_as}, which has capacity again"
        terminate.append((node.id, reason))
        state.decisions.append(Decision("terminate", reason, node.node_type, 1, node.id))
    return terminate
