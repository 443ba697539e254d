"""Calls and faults for fakes/kube/server.py's KubeServer (in the style of
fakes/gce/faults.py).

A `Call` is one API request as the server saw it, named by its Kubernetes verb (get, list,
watch, create, update, patch, delete, deletecollection) and resource ("pods", with
`subresource` "status", "exec"...). A `Fault` matches calls and answers them with a
`Status` error of a given HTTP code, after an optional delay; or only delays them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Call:
    """One request. `resource` is the plural ("pods"; "" for discovery and other paths),
    `group` its API group ("" for the core group), `user` the authenticated user (None if
    the token was refused)."""

    seq: int
    method: str
    path: str
    verb: str
    resource: str
    subresource: str
    group: str
    namespace: str | None
    name: str | None
    query: Mapping[str, str]
    user: str | None

    @property
    def kind(self) -> str:
        """`verb resource[/subresource]`, e.g. "list pods", "patch pods/status"."""
        target = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {target}".strip()

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.query.get(key, default)


@dataclass(frozen=True)
class Logged:
    """A finished call with its HTTP status and whether a fault answered it."""

    call: Call
    status: int
    injected: bool

    @property
    def verb(self) -> str:
        return self.call.verb

    @property
    def resource(self) -> str:
        return self.call.resource


@dataclass(eq=False)
class Fault:
    """What happens to calls that match `verb` and `resource` ("*": any; "pods/exec" names a
    subresource, "pods" matches the resource with any subresource unless `exact`),
    `namespace` (None: any) and `when(call)`.

    The first `skip` matching calls pass; then it fires `times` times (None: until
    removed). Firing waits `delay` seconds, then, given `code`, answers with a Status of
    that code (`reason` and `message` by default the usual ones), before the call acts, or
    after it acted when `after` (the answer was lost)."""

    verb: str = "*"
    resource: str = "*"
    code: int | None = None
    reason: str | None = None
    message: str | None = None
    namespace: str | None = None
    when: Callable[[Call], bool] | None = None
    times: int | None = None
    skip: int = 0
    delay: float = 0.0
    after: bool = False
    exact: bool = False
    seen: int = 0
    fired: int = 0

    def matches(self, call: Call) -> bool:
        if self.verb not in ("*", call.verb):
            return False
        if self.resource != "*":
            full = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
            plain_ok = not self.exact and "/" not in self.resource
            if self.resource != full and not (plain_ok and self.resource == call.resource):
                return False
        if self.namespace not in (None, call.namespace):
            return False
        return self.when is None or self.when(call)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times


class Faults:
    """The faults a server applies, in the order added; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(
        self, verb: str = "*", resource: str = "*", code: int | None = None, **options: Any
    ) -> Fault:
        fault = Fault(verb, resource, code, **options)
        with self._lock:
            self._faults.append(fault)
        return fault

    def fail(
        self, verb: str, resource: str, code: int, times: int | None = 1, **options: Any
    ) -> Fault:
        """The next `times` calls of `verb` on `resource` get HTTP `code`."""
        return self.add(verb, resource, code, times=times, **options)

    def delay(
        self, verb: str, resource: str, seconds: float, times: int | None = None, **options: Any
    ) -> Fault:
        """Calls of `verb` on `resource` wait `seconds` before they are served."""
        return self.add(verb, resource, None, delay=seconds, times=times, **options)

    def remove(self, fault: Fault) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def __iter__(self) -> Iterator[Fault]:
        with self._lock:
            return iter(list(self._faults))

    def pick(self, call: Call) -> list[Fault]:
        """The faults that fire for `call`: every matching one without a code, then the
        first matching one with a code (last in the list)."""
        firing: list[Fault] = []
        failing: Fault | None = None
        with self._lock:
            for fault in self._faults:
                if fault.exhausted or (fault.code and failing) or not fault.matches(call):
                    continue
                fault.seen += 1
                if fault.seen <= fault.skip:
                    continue
                fault.fired += 1
                if fault.code:
                    failing = fault
                else:
                    firing.append(fault)
        return [*firing, failing] if failing else firing
