"""The provider's node listing as the autoscaler keeps it between ticks.

The daemon ticks every second, to act on Ray's demand soon after it appears; listing the
cloud's instances that often would cost a listing call per second per cluster against the
project's API quota (GCE counts reads per minute, EC2 throttles DescribeInstances). The
listing is read again only when it may have changed or is about to be acted on:

- it is older than `max_age_s` (5 s: Ray's own autoscaler tick, so a node taken away
  without Ray noticing is seen no later than Ray's autoscaler would see it; listing 1,000
  pods every second would cost the head ~15% of a core, measured in
  bench/bench_kubernetes.py);
- this process changed the nodes or saw them change (a launch finished, nodes were
  terminated, a setup ended, Ray's node table changed): `invalidate()`;
- a tick is about to launch, terminate or set up nodes: `fresh()`, so that no action is
  ever taken on a listing read in an earlier tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from launcher.providers.base import Node

LISTING_MAX_AGE_S = 5.0


def listing_due(age_s: float | None, invalidated: bool, max_age_s: float) -> bool:
    """Whether to read the provider's listing again: never read, told it changed, or old."""
    return age_s is None or invalidated or age_s >= max_age_s


class NodeListing:
    """The last listing read through `read`, and when. Thread-safe `invalidate`."""

    def __init__(
        self,
        read: Callable[[], list[Node]],
        max_age_s: float = LISTING_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.max_age_s = max_age_s
        self._clock = clock
        self._nodes: list[Node] = []
        self._read_at: float | None = None
        self._invalidated = threading.Event()
        self.reads = 0

    def invalidate(self) -> None:
        self._invalidated.set()

    def current(self) -> tuple[list[Node], bool]:
        """The listing, read again if due; and whether it was read just now."""
        age = None if self._read_at is None else self._clock() - self._read_at
        if listing_due(age, self._invalidated.is_set(), self.max_age_s):
            return self.fresh(), True
        return list(self._nodes), False

    def fresh(self) -> list[Node]:
        """The listing read now."""
        self._invalidated.clear()  # before reading: a change during the read is not lost
        self._nodes = self._read()
        self._read_at = self._clock()
        self.reads += 1
        return list(self._nodes)
