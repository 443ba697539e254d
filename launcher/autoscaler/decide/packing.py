"""Capacity bookkeeping for the planner (pure): the slots bundles are placed on, a first-fit
search that does not rescan nodes already too full for a shape, and trials a placement group
can roll back.

A slot is the capacity of one node during planning: a node that exists, or one the plan
launches. Slots with GPUs are kept apart from the others, so that CPU-only work can be
offered every other node, existing or new, before the spare CPUs of GPU nodes.

Free capacity only shrinks while planning (a rolled-back trial restores it exactly), so for
each shape a cursor marks how far into a tier every slot is known to be too full for it; a
search for that shape starts there. Over a whole plan each cursor passes each slot once. A
new shape's cursor starts at the beginning, so each tier also keeps, per block of slots, an
upper bound of what any of them has free, and a search skips a block that cannot fit.
Both shortcuts find exactly the slot a plain first-fit scan would.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

Resources = Mapping[str, float]
Shape = tuple[tuple[str, float], ...]  # a bundle's positive resources, sorted: a dict key
EPS = 1e-9


def shape_of(request: Resources) -> Shape:
    return tuple(sorted((k, float(v)) for k, v in request.items() if v > 0))


def needs_gpu(request: Resources) -> bool:
    return request.get("GPU", 0) > 0


def fits(capacity: Resources, request: Resources) -> bool:
    return all(capacity.get(k, 0.0) + EPS >= v for k, v in request.items() if v > 0)


def how_many(capacity: Resources, request: Resources) -> int:
    """How many copies of `request` fit in `capacity`."""
    counts = [math.floor((capacity.get(k, 0.0) + EPS) / v) for k, v in request.items() if v > 0]
    return min(counts) if counts else 1_000_000


@dataclass
class Slot:
    """A node's capacity during planning: an existing node, or one this plan launches."""

    node_id: str | None
    node_type: str
    free: dict[str, float]
    total: dict[str, float]
    is_head: bool = False
    used: bool = False

    @property
    def has_gpu(self) -> bool:
        return self.total.get("GPU", 0) > 0


BLOCK = 32  # slots per block of a tier's bounds, and blocks per group of blocks


class _Tier:
    """The slots of one tier, in order, with an upper bound of each resource's free amount
    per block of BLOCK consecutive slots, and per group of BLOCK consecutive blocks: a
    search skips a block its request cannot fit in, and from a block it cannot fit in, the
    rest of the group when the group's bound says so; so slots too full for every shape
    left are not visited one by one again and again, nor their blocks one by one by each
    new shape. A group's bound is made again from its blocks' when next needed after one of
    them was tightened (None until then)."""

    def __init__(self) -> None:
        self.indexes: list[int] = []  # slot indexes
        self.bounds: list[dict[str, float]] = []
        self.groups: list[dict[str, float] | None] = []  # bounds of BLOCK blocks each

    def __len__(self) -> int:
        return len(self.indexes)

    def append(self, index: int, free: Resources) -> None:
        if len(self.indexes) % BLOCK == 0:
            if len(self.bounds) % BLOCK == 0:
                self.groups.append({})
            self.bounds.append({})
        self.indexes.append(index)
        self.raise_bound(len(self.indexes) - 1, free)

    def raise_bound(self, position: int, free: Resources) -> None:
        block = position // BLOCK
        bound, group = self.bounds[block], self.groups[block // BLOCK]
        for key, value in free.items():  # inline: this runs for every slot added
            if value > bound.get(key, 0.0):
                bound[key] = value
                if group is not None and value > group.get(key, 0.0):
                    group[key] = value

    def tighten(self, block: int, slots: list[Slot]) -> None:
        """Make a block's bound exact again (free amounts only shrink while searching)."""
        bound: dict[str, float] = {}
        for index in self.indexes[block * BLOCK : (block + 1) * BLOCK]:
            for key, value in slots[index].free.items():  # inline: a block's every slot
                if value > bound.get(key, 0.0):
                    bound[key] = value
        self.bounds[block] = bound
        self.groups[block // BLOCK] = None

    def next_open(self, position: int, request: Resources) -> int:
        """`position`, or the start of the first later block whose bound fits `request`."""
        span, length, looked = BLOCK * BLOCK, len(self.indexes), -1  # span: slots per group
        while position < length and not fits(self.bounds[position // BLOCK], request):
            group = position // span
            if group != looked:  # the first block of this group that does not fit
                looked = group
                if not fits(self._group(group), request):
                    position = (group + 1) * span
                    continue
            position = (position // BLOCK + 1) * BLOCK
        return min(position, length)

    def _group(self, group: int) -> dict[str, float]:
        bound = self.groups[group]
        if bound is None:
            bound = {}
            for block in self.bounds[group * BLOCK : (group + 1) * BLOCK]:
                for key, value in block.items():
                    if value > bound.get(key, 0.0):
                        bound[key] = value
            self.groups[group] = bound
        return bound

    def truncate(self, length: int) -> None:
        # The bounds of a block or group cut short stay as they were: still upper bounds.
        del self.indexes[length:]
        del self.bounds[-(-length // BLOCK) :]
        del self.groups[-(-length // (BLOCK * BLOCK)) :]


@dataclass
class _Trial:
    slots: int  # how many slots there were when it began
    tiers: tuple[int, int]
    logged: int  # entries in the placement log when it began
    saved: dict[int, tuple[dict[str, float], bool]] = field(default_factory=dict)
    cursors: dict[tuple[bool, Shape], int] = field(default_factory=dict)


class Packer:
    """Slots in two tiers (without and with GPUs), first-fit search per tier with a cursor
    per shape, and an undo log: between `begin` and `rollback`, only the slots and cursors
    that changed are saved, and slots added since `begin` are dropped on rollback."""

    def __init__(self, slots: Iterable[Slot] = (), log: bool = False) -> None:
        self.slots: list[Slot] = []
        # (slot index, request, how many, owner) per take, when asked for (tests check it)
        self.log: list[tuple[int, Resources, int, int]] | None = [] if log else None
        self._tiers = (_Tier(), _Tier())  # without, with GPUs
        self._positions: list[int] = []  # each slot's position in its tier
        self._cursors: dict[tuple[bool, Shape], int] = {}
        self._trial: _Trial | None = None
        for slot in slots:
            self.add(slot)

    def add(self, slot: Slot) -> int:
        index = len(self.slots)
        tier = self._tiers[slot.has_gpu]
        self.slots.append(slot)
        self._positions.append(len(tier))
        tier.append(index, slot.free)
        return index

    def take(self, index: int, request: Resources, times: int = 1, owner: int = -1) -> None:
        slot = self.slots[index]
        if self.log is not None:
            self.log.append((index, request, times, owner))
        trial = self._trial
        if trial is not None and index < trial.slots and index not in trial.saved:
            trial.saved[index] = (dict(slot.free), slot.used)
        for key, value in request.items():
            slot.free[key] = slot.free.get(key, 0.0) - value * times
        slot.used = True

    def find(
        self, shape: Shape, request: Resources, gpu: bool, skip: Collection[int] = ()
    ) -> int | None:
        """The first slot of a tier where `request` fits, other than those in `skip`."""
        tier = self._tiers[gpu]
        start = position = self._cursors.get((gpu, shape), 0)
        found, block = None, -1
        while position < len(tier):
            if position // BLOCK != block:  # entering a block: skip those too full
                opened = tier.next_open(position, request)
                start, position = (opened if start == position else start), opened
                block = position // BLOCK
                continue
            index = tier.indexes[position]
            if fits(self.slots[index].free, request):
                if index not in skip:
                    found = index
                    break
            elif start == position:  # every slot before it is too full for this shape
                start += 1
            position += 1
        self._move((gpu, shape), start)
        return found

    def fill(self, shape: Shape, request: Resources, count: int, gpu: bool) -> int:
        """Place up to `count` bundles first-fit on a tier; returns how many are left."""
        tier = self._tiers[gpu]
        position = self._cursors.get((gpu, shape), 0)
        block = -1
        asked = [(k, v) for k, v in request.items() if v > 0]  # how_many's terms, once
        while count > 0 and position < len(tier):
            if position // BLOCK != block:  # entering a block: skip those too full
                position = tier.next_open(position, request)
                block = position // BLOCK
                continue
            index = tier.indexes[position]
            free = self.slots[index].free
            placed = count  # min(count, how_many(free, request)), stopping at the first 0
            for key, value in asked:
                fit = math.floor((free.get(key, 0.0) + EPS) / value)
                if fit < placed:
                    placed = fit
                    if placed <= 0:
                        break
            if placed > 0:
                self.take(index, request, placed)
                count -= placed
            if count > 0:  # this slot took all it could
                position += 1
                if position % BLOCK == 0:
                    tier.tighten(block, self.slots)
        self._move((gpu, shape), position)
        return count

    def _move(self, key: tuple[bool, Shape], position: int) -> None:
        old = self._cursors.get(key, 0)
        if old == position:
            return
        if self._trial is not None:
            self._trial.cursors.setdefault(key, old)
        self._cursors[key] = position

    def drop_from(self, index: int) -> None:
        """Forget the slots from `index` on and what was placed on them (outside a trial):
        the planner lays its new nodes out again. The slots before are as they were, so
        every cursor stays right where it still points into its tier."""
        assert self._trial is None, "not during a trial"
        if self.log is not None:
            self.log = [entry for entry in self.log if entry[0] < index]
        del self.slots[index:]
        del self._positions[index:]
        for gpu, tier in enumerate(self._tiers):
            tier.truncate(bisect.bisect_left(tier.indexes, index))
            for key, position in self._cursors.items():
                if key[0] == bool(gpu) and position > len(tier):
                    self._cursors[key] = len(tier)

    def begin(self) -> None:
        logged = 0 if self.log is None else len(self.log)
        self._trial = _Trial(len(self.slots), (len(self._tiers[0]), len(self._tiers[1])), logged)

    def commit(self) -> None:
        self._trial = None

    def rollback(self) -> None:
        trial, self._trial = self._trial, None
        if trial is None:
            return
        for index, (free, used) in trial.saved.items():
            slot = self.slots[index]
            slot.free, slot.used = free, used
            self._tiers[slot.has_gpu].raise_bound(self._positions[index], free)
        self._cursors.update(trial.cursors)
        if self.log is not None:
            del self.log[trial.logged :]
        del self.slots[trial.slots :]
        del self._positions[trial.slots :]
        for tier, length in zip(self._tiers, trial.tiers, strict=True):
            tier.truncate(length)
