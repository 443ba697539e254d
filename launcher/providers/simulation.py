"""Playing a cloud's part where a provider can: taking a node back as a spot reclaim, with
or without notice first. Not on the provider seams: only the localhost provider (for types
marked `simulated_spot`) offers it, for `kill-random-node` and rehearsals of recovery."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from launcher.providers.nodes import Node


@runtime_checkable
class SimulatesReclaims(Protocol):
    def reclaim_node(self, node: Node) -> bool:
        """Take `node` (a worker or the head) away as a cloud reclaims a spot machine: the
        node's machine goes with all it runs, and it is listed PREEMPTED until terminated.
        False (nothing done) where `node` is not of a type the provider can play that
        part for; callers then terminate the node instead."""
        ...

    def notify_reclaim(self, node: Node, at: float) -> bool:
        """Give notice, as a cloud does before reclaiming a spot machine, that `node` goes at
        time `at` (`reclaim_node` then takes it): it is listed with `reclaim_at` until then.
        False where the provider cannot play that part for `node`."""
        ...


def simulation_of(provider: object) -> SimulatesReclaims | None:
    """`provider` as a simulator of reclaims, where it is one."""
    return provider if isinstance(provider, SimulatesReclaims) else None
