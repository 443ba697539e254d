"""The autoscaler's time, passed in once and handed to every part that needs it.

Two readings of one clock, for two uses:
- `now`: monotonic seconds, for ages, intervals, backoffs and idle times (never jumps);
- `wall`: seconds since the epoch, for times other parties give or read (providers' reclaim
  times, the state file `launcher status` reads, a stopped head's tag).
Tests and the simulator pass their own readings; the daemon's defaults are the system's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    now: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
