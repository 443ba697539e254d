"""The fault injector the wire fakes share (fakes/aws, fakes/gce, fakes/kube).

A test arms a `Fault` on a server (`server.faults.add(...)`); every request the server sees
is a call record (each fake has its own `Call`, with what tells its API's requests apart),
and `Faults.pick(call)` says which faults fire for it. What is common lives here: counting
(the first `skip` matching calls pass, then a fault fires `times` times, None: until
removed), the wait (`delay`) and side effect (`effect`) of a firing fault, whether its error
is answered before the call acts or after (`after`: a lost answer), and the call log. Which
calls a fault matches and what its error looks like on the wire (status codes, error
bodies) stay with each fake's own faults.py.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

C = TypeVar("C")  # a fake's call record


@dataclass(eq=False, kw_only=True)
class Fault(Generic[C]):
    """What the fakes' faults share. A fake's subclass adds the keys it matches on (its
    `selects`) and its error (its `fails`: whether the fault answers with one)."""

    when: Callable[[C], bool] | None = None
    times: int | None = None
    skip: int = 0
    delay: float = 0.0
    after: bool = False
    effect: Callable[[C], None] | None = None
    seen: int = 0  # matching calls
    fired: int = 0  # calls it acted on

    @property
    def fails(self) -> bool:
        """Whether firing answers with an error (else it only waits, or has an effect)."""
        return False

    def selects(self, call: C) -> bool:
        """Whether `call` is one of those the fault names (its fake's keys)."""
        return True

    def matches(self, call: C) -> bool:
        return self.selects(call) and (self.when is None or self.when(call))

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times


F = TypeVar("F", bound=Fault[Any])


class Faults(Generic[F]):
    """The faults a server applies, in the order added; thread-safe. `make` builds one from
    `add`'s arguments (a fake's Fault class)."""

    def __init__(self, make: Callable[..., F]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._faults: list[F] = []

    def add(self, *args: Any, **options: Any) -> F:
        fault = self._make(*args, **options)
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: F) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def __iter__(self) -> Iterator[F]:
        with self._lock:
            return iter(list(self._faults))

    def pick(self, call: object) -> list[F]:
        """The faults that fire for `call`: every matching one without an error, then the
        first matching one with an error (last in the list)."""
        firing: list[F] = []
        failing: F | None = None
        with self._lock:
            for fault in self._faults:
                if fault.exhausted or (fault.fails and failing) or not fault.matches(call):
                    continue
                fault.seen += 1
                if fault.seen <= fault.skip:
                    continue
                fault.fired += 1
                if fault.fails:
                    failing = fault
                else:
                    firing.append(fault)
        return [*firing, failing] if failing else firing


def fire(fired: Sequence[F], call: object) -> F | None:
    """Carry out what `pick` chose for `call` (in a thread that may wait): each fault's
    delay, then its effect. Returns the fault whose error answers the call, if any."""
    for fault in fired:
        if fault.delay:
            time.sleep(fault.delay)
        if fault.effect is not None:
            fault.effect(call)
    return fired[-1] if fired and fired[-1].fails else None


L = TypeVar("L")  # a fake's record of a finished call


class CallLog(Generic[L]):
    """The calls a server finished, in order; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[L] = []

    def append(self, entry: L) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[L]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
