"""The planner: from a snapshot of nodes and Ray's pending demand, decide which workers to
launch and which to terminate. Pure: no I/O and no clock; everything arrives in the snapshot.

Order of work, each step seeing what the previous ones placed:
1. min_workers of every type;
2. placement groups, all bundles or none (STRICT_PACK on one node, STRICT_SPREAD on distinct
   nodes, PACK/SPREAD anywhere); those whose bundles fit the fewest node types first, then
   GPU ones, then the biggest (so under max_workers a later group may be placed before an
   earlier one; without prices, when that leaves some group without room, the plan is made
   again in Ray's order, the oldest first); a bundle that needs a new node gets the type
   chosen as for tasks below, for all pending bundles of its shape, and the room its node
   keeps for other shapes is counted as promised to them;
3. pending task and actor bundles, grouped by shape, first on free capacity; then new
   nodes whose type and contents (this shape and the other shapes still unplaced) are
   worth the most per dollar (`plan_mix`: CPU work shares a GPU node when that costs less;
   every node is charged `Settings.node_overhead` on top of its price, so fewer bigger
   nodes win when they cost little more);
4. `request_resources` constraints, fitted to the cluster's total (not free) capacity;
5. `upscaling_speed` caps how many nodes may be starting at once, but for min_workers: the
   floor the config asks for is launched in one wave (it counts as starting for the rest;
   Ray caps it too, so a cloud's `min_workers: 8` came up as five, then three once those
   had booted);
6. idle workers beyond min_workers, untouched by this round's placements, are terminated.
Demand no node type can ever hold is reported as infeasible and launches nothing.

In steps 2 to 4, CPU-only work takes free capacity on nodes without GPUs (existing, or
launched by this plan) before the spare CPUs of GPU nodes, and never gets a GPU type
launched while a CPU-only type fits it. Free capacity is used first-fit (`packing`).

Without prices (no type has one: on-prem, Kubernetes, most configs) every node counts the
same, so the rule is the priced one with every type at price 1 (`_unit_prices`): the node
whose type and contents hold the most of the pending work wins, which launches the fewest
nodes. What the new nodes hold is then laid out again on fewer nodes when one is found
(`_relayout`, `plan_repack`: node by node over all of it at once, and moving the least used
nodes' bundles into the others' spare room), since shape by shape each choice is blind to
the shapes after it; `_tidy` then gives a partly used new node the smallest type that holds
its contents (types ranked by size, `_sizes`, in place of prices). The rule before it, "the
type that needs the fewest nodes for this shape alone", chose per shape with no regard to
the shapes still pending: each shape's last node was of the smallest type fitting its
remainder, and the shapes and groups that came later found its room too small and launched
more (five 2.5-2.9 CPU bundles: five 4-CPU nodes, not one 16-CPU node; on the unpriced
scenarios of `bench/bench_planner.py --unpriced`, up to 1.9x Ray's nodes; with the layout
again, none over the fewer of Ray's v1 and v2 on the bench's 54). A type kept out by
`Snapshot.unavailable` leaves the layout as planned (its fallbacks are a preference the
relayout would not keep).

A type the executor found out of capacity (or just preempted) arrives in
`Snapshot.unavailable`: it launches nothing, its configured fallbacks are tried first in its
place, then the other types by the usual rule. Workers launched for an unavailable type's
min_workers "stand in" for it, and once it has capacity again and they are idle past the
timeout, they are terminated so the type itself comes back.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from launcher.autoscaler.decide.actions import Action
from launcher.autoscaler.decide.packing import (
    EPS,
    Packer,
    Resources,
    Shape,
    Slot,
    fits,
    how_many,
    needs_gpu,
    shape_of,
)
from launcher.autoscaler.decide.plan_mix import (
    Candidate,
    Mix,
    Offer,
    Waiting,
    choose_mix,
    top_others,
    worth,
)
from launcher.autoscaler.decide.plan_repack import Item, Kind, Pack, fewer_nodes
from launcher.autoscaler.decide.plan_tidy import cheaper_type
from launcher.autoscaler.decide.plan_types import (
    Decision,
    Gang,
    NodeView,
    Placement,
    Plan,
    Settings,
    Snapshot,
    TypeInfo,
    show,
)

__all__ = [
    "MIN_UPSCALING_BURST",
    "Decision",
    "Gang",
    "NodeView",
    "Placement",
    "Plan",
    "Resources",
    "Settings",
    "Snapshot",
    "TypeInfo",
    "fits",
    "how_many",
    "plan",
    "show",
]
MIN_UPSCALING_BURST = 5  # nodes that may start at once however small the cluster


def _gang_requests(gang: Gang) -> list[Resources]:
    """What must be placed for a group: its bundles, or for STRICT_PACK their sum on one node."""
    if gang.strategy != "STRICT_PACK":
        return list(gang.bundles)
    total: dict[str, float] = {}
    for bundle in gang.bundles:
        for key, value in bundle.items():
            total[key] = total.get(key, 0.0) + float(value)
    return [total]


def _pending_by_shape(snapshot: Snapshot) -> Counter[Shape]:
    """How many bundles of each shape are pending, in groups and as tasks."""
    pending: Counter[Shape] = Counter()
    for gang in snapshot.gangs:
        pending.update(shape_of(r) for r in _gang_requests(gang))
    for request, count in snapshot.pending:
        pending[shape_of(request)] += count
    return pending


class _State:
    def __init__(self, snapshot: Snapshot, settings: Settings, record: bool = False) -> None:
        self.settings = settings
        self.record = record
        self.starved = False  # some placement group found no room for all its bundles
        self.packer = Packer(
            (
                Slot(
                    n.id,
                    n.node_type,
                    dict(n.total if n.launching else n.available),
                    dict(n.total),
                    n.is_head,
                )
                for n in snapshot.nodes
            ),
            log=True,  # what each new node holds: `_relayout` reads it
        )
        self.counts: Counter[str] = Counter(n.node_type for n in snapshot.nodes if not n.is_head)
        self.workers = sum(self.counts.values())
        self.launch: Counter[str] = Counter()
        self.decisions: list[Decision] = []
        self.infeasible: list[Resources] = []
        self.unavailable = snapshot.unavailable
        self.fell_back: dict[tuple[str, str], None] = {}  # (type, fallback), in order
        self.pending = _pending_by_shape(snapshot)  # bundles of each shape not yet placed
        # bundles of each shape that the spare room of nodes launched so far is meant for
        self.promised: Counter[Shape] = Counter()
        prices = [t.price for t in settings.types.values() if t.price is not None]
        self.priced = bool(prices)
        # What every new node costs besides its price, when choosing types (`plan_mix`): in
        # units of the cheapest positive price of a type that may launch (not the head's
        # type, nor a free on-prem one, which would make the overhead vanish).
        launchable = [
            t.price
            for t in settings.types.values()
            if t.price is not None and t.price > 0 and t.max_workers > 0
        ]
        self.overhead = settings.node_overhead * min(launchable) if launchable else 0.0
        self._worth: dict[Shape, float | None] = {}
        self._feasible: dict[Shape, bool] = {}
        self._saved: tuple[dict[str, int], int, dict[str, int], dict[Shape, int]] | None = None

    @property
    def slots(self) -> list[Slot]:
        return self.packer.slots

    def room(self, type_name: str) -> int:
        info = self.settings.types[type_name]
        return max(
            0,
            min(
                info.max_workers - self.counts[type_name], self.settings.max_workers - self.workers
            ),
        )

    def add_node(self, type_name: str) -> int:
        """Launch one node of `type_name` in this plan; returns its slot's index."""
        resources = self.settings.types[type_name].resources
        self.counts[type_name] += 1
        self.workers += 1
        self.launch[type_name] += 1
        return self.packer.add(Slot(None, type_name, dict(resources), dict(resources)))

    def begin(self) -> None:
        """Start a trial (a placement group) that `rollback` undoes entirely."""
        self.packer.begin()
        # Plain dict copies (cheap; most trials commit), made Counters again on rollback.
        self._saved = (dict(self.counts), self.workers, dict(self.launch), dict(self.promised))

    def commit(self) -> None:
        self.packer.commit()
        self._saved = None

    def rollback(self) -> None:
        self.packer.rollback()
        if self._saved is not None:
            counts, self.workers, launch, promised = self._saved
            self.counts, self.launch = Counter(counts), Counter(launch)
            self.promised = Counter(promised)
            self._saved = None

    def choose_type(self, request: Resources, count: int) -> str | None:
        """The type to launch for `count` bundles of `request`, among those with room."""
        fitting = [
            t
            for t in self.settings.types.values()
            if t.max_workers > 0 and fits(t.resources, request)
        ]
        if not needs_gpu(request):
            cpu_only = [t for t in fitting if not t.has_gpu]
            fitting = cpu_only or fitting
        options = [t for t in fitting if self.room(t.name) > 0]
        if not options:
            return None
        priced = any(t.price is not None for t in options)

        def cost(info: TypeInfo) -> tuple[float, int, float, int, str]:
            per_node = max(1, min(how_many(info.resources, request), count))
            if priced:
                price = (
                    (info.price + self.overhead) / per_node if info.price is not None else math.inf
                )
            else:
                price = 0.0
            waste = sum(
                (info.resources.get(k, 0) - per_node * request.get(k, 0))
                / max(info.resources.get(k, 0), EPS)
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

    def worth(self, shape: Shape) -> float | None:
        """What a bundle of `shape` costs on its own, on full nodes of its cheapest type."""
        if shape not in self._worth:
            offers = [
                Offer(t.name, t.resources, t.price + self.overhead, t.max_workers)
                for t in self.settings.types.values()
                if t.max_workers > 0 and t.price is not None
            ]
            self._worth[shape] = worth(dict(shape), offers)
        return self._worth[shape]

    def choose_mix(
        self, shape: Shape, request: Resources, count: int, others: Sequence[Candidate]
    ) -> Mix | None:
        """With prices: the type to launch for `count` bundles of `request` and which of the
        other unplaced shapes (`others`, the most valuable first) its nodes hold (`plan_mix`).
        Types follow `choose_type`'s rules: CPU-only work on CPU-only types when one fits,
        an unavailable type's fallbacks first in its place. When no priced type can take
        it, `choose_type`'s pick, one node at a time."""
        mix = self._priced_mix(request, count, others, self.worth(shape))
        if mix is not None:
            return mix
        name = self.choose_type(request, count)
        if name is None:
            return None
        per_node = how_many(self.settings.types[name].resources, request)
        return Mix(name, max(1, min(per_node, count)), (), 1)

    def _priced_mix(
        self, request: Resources, count: int, others: Sequence[Candidate], own: float | None
    ) -> Mix | None:
        if own is None:
            return None
        fitting = [
            t
            for t in self.settings.types.values()
            if t.max_workers > 0 and fits(t.resources, request)
        ]
        if not needs_gpu(request):  # as choose_type: CPU-only types first, priced or not
            fitting = [t for t in fitting if not t.has_gpu] or fitting
        fitting = [t for t in fitting if t.price is not None]
        if not fitting:  # only unpriced types hold it on choose_type's terms: its pick
            return None

        def mix(types: Iterable[TypeInfo]) -> Mix | None:
            offers = [
                Offer(
                    t.name,
                    t.resources,
                    # a free type (on-prem, price 0) stays free: used before any other
                    t.price + self.overhead if t.price else 0.0,
                    self.room(t.name),
                    t.priority,
                )
                for t in types
            ]
            return choose_mix(request, count, offers, others, own)

        best = mix(fitting)
        if best is None or best.node_type not in self.unavailable:
            return best
        fallback = self.fallback_for(best.node_type, request)
        if fallback is not None:
            return mix([self.settings.types[fallback]])
        return mix(t for t in fitting if t.name not in self.unavailable)

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

    def feasible(self, shape: Shape, request: Resources) -> bool:
        """Whether some node could ever hold `request`: a launchable type, or a node that
        exists (the head's own type may launch no workers at all). Fixed for a whole plan."""
        known = self._feasible.get(shape)
        if known is None:
            known = any(
                t.max_workers > 0 and fits(t.resources, request)
                for t in self.settings.types.values()
            ) or any(fits(slot.total, request) for slot in self.slots)
            self._feasible[shape] = known
        return known


def _unit_prices(settings: Settings) -> Settings:
    """Without a single price, every node counts the same: each type at price 1, so the
    priced choice (`plan_mix`), which minimises the cost of what it launches, minimises the
    nodes launched. With any price given, the settings as they are."""
    if any(t.price is not None for t in settings.types.values()):
        return settings
    return replace(settings, types={n: replace(t, price=1.0) for n, t in settings.types.items()})


def _sizes(types: Mapping[str, TypeInfo]) -> dict[str, float | None]:
    """Without prices, what `_tidy` compares instead: 1 plus a type's size, the mean over
    its resources of its share of the largest amount any type has, so that a partly used
    node becomes the smallest type that holds its contents (nodes counted alike)."""
    largest: dict[str, float] = {}
    for info in types.values():
        for key, value in info.resources.items():
            largest[key] = max(largest.get(key, 0.0), float(value))

    def size(resources: Mapping[str, float]) -> float:
        shares = [v / largest[k] for k, v in resources.items() if largest[k] > 0]
        return sum(shares) / len(shares) if shares else 0.0

    return {n: 1.0 + size(t.resources) for n, t in types.items()}


def plan(snapshot: Snapshot, settings: Settings, *, record: bool = False) -> Plan:
    """The plan for one round; with `record`, also where every placed bundle went."""
    priced = any(t.price is not None for t in settings.types.values())
    # Groups go in the order that packs them best (the hardest to place first). Without
    # prices, only while that starves no group: when some group finds no room (max_workers
    # binds), the plan is made again in Ray's order, the oldest first, so a newer group
    # never takes the room an older one waits for. (Ray's order on its own left big
    # STRICT_PACK sums no room on existing nodes that smaller, older bundles had taken.)
    packing = _gang_order(snapshot.gangs, settings)
    result, starved = _plan(snapshot, settings, record, packing, priced)
    if starved and not priced and packing != sorted(packing):
        result, _ = _plan(snapshot, settings, record, range(len(snapshot.gangs)), priced)
    return result


def _plan(
    snapshot: Snapshot, settings: Settings, record: bool, order: Iterable[int], priced: bool
) -> tuple[Plan, bool]:
    """The plan with groups placed in `order`, and whether some group found no room."""
    state = _State(snapshot, _unit_prices(settings), record)
    _min_workers(state, snapshot.nodes)
    after_min = (len(state.slots), len(state.decisions))
    tidy_prices = None if priced else _sizes(settings.types)
    for number in order:
        _place_gang(state, snapshot.gangs[number], number)
    _place_tasks(state, snapshot.pending)
    if not priced and not state.unavailable:
        _relayout(state, snapshot, *after_min)
    _tidy(state, *after_min, tidy_prices)
    _place_constraints(state, snapshot.constraints)
    launch, stand_ins = _limit_upscaling(state, snapshot, after_min[1])
    terminate = _idle(state, snapshot, settings)
    for type_name, fallback in state.fell_back:
        if launch[fallback] > 0:  # said only when the fallback is launched now
            state.decisions.insert(
                0,
                Decision(
                    Action.FALLBACK,
                    f"{type_name}: {state.unavailable[type_name]}, falling back to {fallback}",
                    fallback,
                    launch[fallback],
                    stands_in_for=type_name,
                ),
            )
    result = Plan(
        dict(launch),
        tuple(terminate),
        tuple(state.infeasible),
        tuple(state.decisions),
        dict(stand_ins),
        _placements(state),
    )
    return result, state.starved


def _gang_order(gangs: Sequence[Gang], settings: Settings) -> list[int]:
    """Groups whose bundles fit the fewest node types first, then those with GPU bundles,
    then the biggest bundles: a STRICT_PACK sum that only a GPU type holds takes its node
    before GPU bundles look for a GPU, and CPU-only groups come last, into the spare room
    of the nodes launched for the others."""
    launchable = [t.resources for t in settings.types.values() if t.max_workers > 0]
    known: dict[tuple[tuple[str, float], ...], tuple[int, float, float]] = {}

    def rank(request: Resources) -> tuple[int, float, float]:
        shape = tuple(request.items())  # as given: cheaper than sorting, same answer
        if shape not in known:
            known[shape] = (
                sum(1 for r in launchable if fits(r, request)),
                -request.get("GPU", 0.0),
                -sum(request.values()),
            )
        return known[shape]

    def key(gang: Gang) -> tuple[int, float, float]:
        if gang.strategy == "STRICT_PACK":  # their sum, as `_gang_requests` (cheaper)
            total: dict[str, float] = {}
            for bundle in gang.bundles:
                for name, value in bundle.items():
                    total[name] = total.get(name, 0.0) + value
            return rank(total)
        best, last = (1 << 30, 0.0, 0.0), None
        for bundle in gang.bundles:
            if bundle != last:  # the bundles of a group are often all alike
                best, last = min(best, rank(bundle)), bundle
        return best

    keys = [key(g) for g in gangs]
    return sorted(range(len(gangs)), key=keys.__getitem__)


def _placements(state: _State) -> tuple[Placement, ...]:
    if not state.record or state.packer.log is None:
        return ()
    slots = state.slots
    first = next((i for i, s in enumerate(slots) if s.node_id is None), len(slots))
    return tuple(
        Placement(
            slots[i].node_id,
            i - first if slots[i].node_id is None else -1,
            slots[i].node_type,
            request,
            count,
            owner,
        )
        for i, request, count, owner in state.packer.log
    )


def _relayout(state: _State, snapshot: Snapshot, first_new: int, first_decision: int) -> None:
    """Without prices: everything placed on new nodes (but min_workers' nodes) laid out
    again on fewer nodes when `plan_repack` finds such a layout; each node's launch
    decision names the work it holds that was planned first (the groups', then the
    tasks' shapes, in the order they were placed)."""
    now = _NewNodes(state, snapshot, first_new)
    kinds = [
        Kind(t.name, t.resources, max(0, t.max_workers - state.counts[t.name] + now.types[t.name]))
        for t in state.settings.types.values()
        if t.max_workers > 0
    ]
    total_room = state.settings.max_workers - state.workers + now.types.total()
    layout = fewer_nodes(now.packs, kinds, total_room)
    if layout is None:
        return
    for node_type, count in now.types.items():
        state.counts[node_type] -= count
        state.launch[node_type] -= count
    state.workers -= now.types.total()
    state.packer.drop_from(first_new)
    leads: Counter[tuple[int, str]] = Counter()  # (first_seen of its lead, type): nodes
    for pack in layout:
        for _ in range(pack.copies):
            index = state.add_node(pack.node_type)
            lead = min(now.place(state.packer, index, i, n) for i, n in pack.holds.items())
            leads[lead, pack.node_type] += 1
    pending: Counter[Shape] = Counter()
    for request, count in snapshot.pending:
        pending[shape_of(request)] += count
    why = {
        seen: _gang_label(snapshot.gangs[key])
        if isinstance(key, int)
        else f"{pending[key]} pending bundle(s) of {show(dict(key))}"
        for key, seen in now.first_seen.items()
    }
    kept = [d for d in state.decisions[first_decision:] if d.action is not Action.LAUNCH]
    state.decisions[first_decision:] = kept + [
        Decision(Action.LAUNCH, why[seen], node_type, nodes)
        for (seen, node_type), nodes in sorted(leads.items())
    ]


class _NewNodes:
    """What a plan's new nodes (from `first_new` on) hold, read from the packer's log: as
    packs of nodes filled alike, and per item who placed how many of it (a group's number,
    or -1 for tasks), so that a new layout places the same bundles for the same owners."""

    def __init__(self, state: _State, snapshot: Snapshot, first_new: int) -> None:
        log = state.packer.log
        assert log is not None
        spread_groups = {i for i, g in enumerate(snapshot.gangs) if g.strategy == "STRICT_SPREAD"}
        # Each node's takes as (request's id, how many, owner): nodes filled alike (most
        # are) are then looked at once.
        takes: dict[int, list[tuple[int, int, int]]] = {
            i: [] for i in range(first_new, len(state.slots))
        }
        requests: dict[int, Resources] = {}
        for index, request, times, owner in log:
            if index >= first_new:
                requests[id(request)] = request
                takes[index].append((id(request), times, owner))
        alike: Counter[tuple[str, tuple[tuple[int, int, int], ...]]] = Counter(
            (state.slots[i].node_type, tuple(t)) for i, t in takes.items()
        )
        known: dict[tuple[tuple[str, float], ...], Shape] = {}  # a request's items: its shape
        shapes: dict[int, Shape] = {}
        for key, request in requests.items():
            as_given = tuple(request.items())
            shapes[key] = known.get(as_given) or known.setdefault(as_given, shape_of(request))
        self.packs: list[Pack] = []
        self.types: Counter[str] = Counter()
        self.placed_by: dict[Item, Counter[int]] = {}  # per item, how many each owner placed
        # a group's number or a task shape: the order in which they were placed
        self.first_seen: dict[int | Shape, int] = {}
        for (node_type, node_takes), copies in alike.items():
            held: Counter[Item] = Counter()
            for key, times, owner in node_takes:
                item = Item(shapes[key], owner if owner in spread_groups else -1)
                held[item] += times
                owners = self.placed_by.get(item)
                if owners is None:
                    owners = self.placed_by[item] = Counter()
                owners[owner] += times * copies
                self.first_seen.setdefault(
                    owner if owner >= 0 else item.shape, len(self.first_seen)
                )
            self.packs.append(Pack(node_type, held, copies))
            self.types[node_type] += copies

    def place(self, packer: Packer, index: int, item: Item, count: int) -> int:
        """Place `count` of `item` on slot `index` for the owners that placed them before;
        returns the earliest `first_seen` among those owners."""
        request = dict(item.shape)
        owners = self.placed_by[item]
        lead = len(self.first_seen)
        while count > 0:
            owner, left = next(iter(owners.items()))
            take = min(count, left)
            packer.take(index, request, take, owner)
            lead = min(lead, self.first_seen[owner if owner >= 0 else item.shape])
            count -= take
            if take == left:
                del owners[owner]
            else:
                owners[owner] = left - take
        return lead


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
                    Decision(
                        Action.LAUNCH, f"{reason} of {name}", fallback, count, stands_in_for=name
                    )
                )
            if placed.total() < want:
                state.decisions.append(
                    Decision(
                        Action.WAIT,
                        f"{name}: {state.unavailable[name]}; {want - placed.total()} worker(s) for "
                        "its min_workers wait for capacity",
                    )
                )
            continue
        missing = min(want, state.room(name))
        if missing > 0:
            for _ in range(missing):
                state.add_node(name)
            state.decisions.append(Decision(Action.LAUNCH, reason, name, missing))


def _tidy(
    state: _State,
    first_new: int,
    first_decision: int,
    by_price: Mapping[str, float | None] | None = None,
) -> None:
    """After placement, a new node whose contents fit a cheaper type becomes one (the last
    node launched for a shape is often partly used); the log says so. Nodes launched for
    min_workers (before `first_new`) are left as they are. Resized slots keep their tier in
    the packer: nothing is searched on it after this. Nodes filled alike (a mix repeated)
    get the answer found for the first of them while its type still has room. `by_price`:
    what is compared instead of the types' prices (without prices, their sizes)."""
    types = state.settings.types
    capacities = {n: t.resources for n, t in types.items()}
    by_price = by_price or {n: t.price for n, t in types.items()}
    prices = {n: p for n, p in by_price.items() if n not in state.unavailable}
    resized: Counter[tuple[str, str]] = Counter()
    known: dict[tuple[str, tuple[tuple[str, float], ...]], str | None] = {}
    for index in range(first_new, len(state.slots)):
        slot = state.slots[index]
        if slot.node_id is not None:
            continue
        used = {k: v - slot.free.get(k, 0.0) for k, v in slot.total.items()}
        key = (slot.node_type, tuple(used.items()))
        better = known.get(key, slot.node_type)
        if better == slot.node_type or (better is not None and state.room(better) <= 0):
            room = [n for n in prices if types[n].max_workers > 0 and state.room(n) > 0]
            better = known[key] = cheaper_type(used, slot.node_type, capacities, prices, room)
        if better is not None:
            resized[slot.node_type, better] += 1
            _resize(state, index, better, used)
    _retell(state, first_decision, resized)


def _resize(state: _State, index: int, name: str, used: Resources) -> None:
    slot = state.slots[index]
    for counter in (state.counts, state.launch):
        counter[slot.node_type] -= 1
        counter[name] += 1
    total = dict(state.settings.types[name].resources)
    slot.node_type, slot.total = name, total
    slot.free = {k: v - used.get(k, 0.0) for k, v in total.items()}


def _retell(state: _State, first_decision: int, resized: Counter[tuple[str, str]]) -> None:
    """The launch decisions after `_tidy`: resized nodes move from their old type's
    decisions (the latest first) to one decision for their new type."""
    decisions = state.decisions
    for (old, new), count in resized.items():
        left = count
        for i in range(len(decisions) - 1, first_decision - 1, -1):
            d = decisions[i]
            if left and d.action is Action.LAUNCH and d.node_type == old:
                take = min(left, d.count)
                decisions[i] = replace(d, count=d.count - take)
                left -= take
        decisions.append(
            Decision(
                Action.LAUNCH,
                f"what {resized[old, new]} x {old} would hold",
                new,
                resized[old, new],
            )
        )
    kept = [d for d in decisions[first_decision:] if d.action is not Action.LAUNCH or d.count > 0]
    state.decisions = decisions[:first_decision] + kept


def _place_tasks(state: _State, pending: Iterable[tuple[Resources, int]]) -> None:
    shapes: Counter[Shape] = Counter()
    for request, count in pending:
        shapes[shape_of(request)] += count
    # Largest first (GPU work before CPU work), so big bundles are not starved by small ones.
    order = sorted(
        shapes.items(), key=lambda item: (-dict(item[0]).get("GPU", 0), -sum(v for _, v in item[0]))
    )
    feasible: list[tuple[Shape, int]] = []
    for shape, count in order:
        request = dict(shape)
        if state.feasible(shape, request):
            feasible.append((shape, count))
            continue
        state.infeasible.append(request)
        state.decisions.append(
            Decision(
                Action.INFEASIBLE, f"{count} pending bundle(s) of {show(request)} fit no node type"
            )
        )
    if state.priced:
        _place_mixed(state, feasible)
        return
    for shape, count in feasible:
        request = dict(shape)
        left, launched = _place_many(state, state.packer, shape, request, count)
        state.pending[shape] -= count
        _tell(state, request, count, left, launched)


def _tell(
    state: _State, request: Resources, count: int, left: int, launched: Mapping[str, int]
) -> None:
    if left > 0:
        state.decisions.append(
            Decision(
                Action.WAIT,
                f"{left} pending bundle(s) of {show(request)}: no node type has room "
                f"(max_workers {state.settings.max_workers})",
            )
        )
    for name, nodes in launched.items():
        state.decisions.append(
            Decision(Action.LAUNCH, f"{count} pending bundle(s) of {show(request)}", name, nodes)
        )


def _place_mixed(state: _State, shapes: Sequence[tuple[Shape, int]]) -> None:
    """With prices: every shape first on free capacity (existing nodes, and those launched
    for min_workers and groups), then new nodes for what is left, largest shape first, each
    node of the type whose mix of this and the other unplaced shapes is worth the most per
    dollar (`plan_mix`), filled with that mix."""
    left = Waiting(
        ((shape, _fill_free(state.packer, shape, dict(shape), count)) for shape, count in shapes),
        state.worth,
    )
    for shape, count in shapes:
        request = dict(shape)
        launched: Counter[str] = Counter()
        left.take(shape, left[shape] - _fill_free(state.packer, shape, request, left[shape]))
        while left[shape] > 0:
            mix = state.choose_mix(shape, request, left[shape], left.top(shape))
            if mix is None:
                break
            unplaced = left[shape]
            others = [(other, dict(other), n) for other, n in mix.others]
            for _ in range(mix.nodes):  # `_repeats`: every node gets all of mix.others
                index = state.add_node(mix.node_type)
                lead = min(mix.lead, unplaced)
                state.packer.take(index, request, lead)
                unplaced -= lead
                for _, other_request, n in others:
                    state.packer.take(index, other_request, n)
            left.take(shape, left[shape] - unplaced)
            for other, _, n in others:
                left.take(other, n * mix.nodes)
            launched[mix.node_type] += mix.nodes
        state.pending[shape] -= count
        _tell(state, request, count, left[shape], launched)
        left.take(shape, left[shape])  # what could not be placed waits: no later mix takes it


def _fill_free(packer: Packer, shape: Shape, request: Resources, count: int) -> int:
    """Place up to `count` bundles on `packer`'s free capacity (CPU-only work on nodes
    without GPUs first); returns how many are left."""
    gpu = needs_gpu(request)
    left = packer.fill(shape, request, count, gpu)
    if left > 0 and not gpu:
        left = packer.fill(shape, request, left, True)
    return left


def _place_many(
    state: _State, packer: Packer, shape: Shape, request: Resources, count: int
) -> tuple[int, Counter[str]]:
    """Place `count` bundles of one shape on `packer`'s free capacity, then on new nodes;
    returns how many are left and the nodes launched per type. CPU-only work fills the nodes
    without GPUs, existing or launched by this plan, before the spare CPUs of GPU nodes."""
    left = _fill_free(packer, shape, request, count)
    launched: Counter[str] = Counter()
    while left > 0:
        name = state.choose_type(request, left)
        if name is None:
            break
        index = state.add_node(name)
        if packer is not state.packer:  # sizing request_resources on its own copy
            resources = state.settings.types[name].resources
            index = packer.add(Slot(None, name, dict(resources), dict(resources)))
        placed = min(left, how_many(packer.slots[index].free, request))
        packer.take(index, request, placed)
        left -= placed
        launched[name] += 1
    return left, launched


def _gang_label(gang: Gang) -> str:
    return f"placement group {gang.name or ''} ({gang.strategy}, {len(gang.bundles)} bundles)"


def _place_gang(state: _State, gang: Gang, number: int) -> None:
    label = _gang_label(gang)
    requests = _gang_requests(gang)
    shapes = [shape_of(r) for r in requests]
    if not all(state.feasible(s, r) for s, r in zip(shapes, requests, strict=True)):
        state.infeasible.extend(requests)
        state.decisions.append(Decision(Action.INFEASIBLE, f"{label} fits no node type"))
        return
    skip: set[int] | None = set() if gang.strategy == "STRICT_SPREAD" else None
    first_new = len(state.slots)
    state.begin()
    for position, (shape, request) in enumerate(zip(shapes, requests, strict=True)):
        index = _gang_slot(state, shape, request, skip or ())
        state.pending[shape] -= 1
        if index is None:
            state.rollback()
            state.pending.subtract(shapes[position + 1 :])
            state.decisions.append(Decision(Action.WAIT, f"{label}: no room for all bundles"))
            state.starved = True
            return
        state.packer.take(index, request, owner=number)
        if skip is not None:
            skip.add(index)
    state.commit()  # every bundle found a place
    if len(state.slots) > first_new:  # most groups fit in free room and launch nothing
        for name, nodes in Counter(s.node_type for s in state.slots[first_new:]).items():
            state.decisions.append(Decision(Action.LAUNCH, label, name, nodes))


def _gang_slot(
    state: _State, shape: Shape, request: Resources, skip: Collection[int]
) -> int | None:
    """Where one bundle of a group goes: free capacity first (for a CPU-only bundle, nodes
    without GPUs before the spare CPUs of GPU nodes), else a new node of the type that tasks
    of this shape would get, chosen for all the bundles of this shape still pending."""
    gpu = needs_gpu(request)
    index = state.packer.find(shape, request, gpu, skip)
    if index is None and not gpu:
        index = state.packer.find(shape, request, True, skip)
    if index is not None:
        if state.promised[shape] > 0:
            state.promised[shape] -= 1
        return index
    count = max(1, state.pending[shape])
    if not state.priced:
        name = state.choose_type(request, count)
        return None if name is None else state.add_node(name)
    left = ((s, n - state.promised[s]) for s, n in state.pending.items())
    mix = state.choose_mix(shape, request, count, top_others(left, shape, state.worth))
    if mix is None:
        return None
    state.promised.update(dict(mix.others))
    return state.add_node(mix.node_type)


def _place_constraints(state: _State, constraints: Sequence[Resources]) -> None:
    """request_resources: size the cluster's total capacity for these bundles."""
    if not constraints:
        return
    capacity = Packer(
        Slot(s.node_id, s.node_type, dict(s.total), s.total, s.is_head) for s in state.slots
    )
    shapes: Counter[Shape] = Counter(shape_of(c) for c in constraints)
    for shape, count in shapes.items():
        request = dict(shape)
        if not state.feasible(shape, request):
            state.infeasible.append(request)
            state.decisions.append(
                Decision(
                    Action.INFEASIBLE, f"requested {count} x {show(request)}: fits no node type"
                )
            )
            continue
        left, launched = _place_many(state, capacity, shape, request, count)
        if left > 0:
            state.decisions.append(
                Decision(Action.WAIT, f"requested {left} x {show(request)}: no node type has room")
            )
        for name, nodes in launched.items():
            state.decisions.append(
                Decision(
                    Action.LAUNCH,
                    f"request_resources asks for {count} x {show(request)}",
                    name,
                    nodes,
                )
            )
    by_id = {s.node_id: s for s in state.slots if s.node_id is not None}
    for slot in capacity.slots:
        if slot.used and slot.node_id is not None:
            by_id[slot.node_id].used = True


def _limit_upscaling(
    state: _State, snapshot: Snapshot, for_min: int
) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    """The launches that upscaling_speed lets through now, and which of them stand in. The
    first `for_min` decisions (min_workers') launch whole, and use up the budget first."""
    running = sum(1 for n in snapshot.nodes if not n.launching)
    starting = sum(1 for n in snapshot.nodes if n.launching)
    allowed = max(MIN_UPSCALING_BURST, math.ceil(state.settings.upscaling_speed * running))
    budget = max(0, allowed - starting)
    wanted = sum(state.launch.values())
    limited: Counter[str] = Counter()
    stand_ins: Counter[tuple[str, str]] = Counter()
    decisions = []
    for number, decision in enumerate(state.decisions):  # min_workers, groups, tasks
        if decision.action is not Action.LAUNCH or decision.node_type is None:
            decisions.append(decision)
            continue
        take = decision.count if number < for_min else min(decision.count, budget)
        budget = max(0, budget - take)
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
            Action.WAIT,
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
        state.decisions.append(Decision(Action.TERMINATE, reason, node.node_type, 1, node.id))
    return terminate
