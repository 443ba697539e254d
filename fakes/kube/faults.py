"""Calls and faults for fakes/kube/server.py's KubeServer (in the style of
fakes/gce/faults.py).

A `Call` is one API request as the server saw it, named by its Kubernetes verb (get, list,
watch, create, update, patch, delete, deletecollection) and resource ("pods", with
`subresource` "status", "exec"...). A `Fault` matches calls and answers them with a
`Status` error of a given HTTP code, after an optional delay; or only delays them.
fakes/faults.py counts faults and fires them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakes import faults


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
class Fault(faults.Fault[Call]):
    """What happens to calls that match `verb` and `resource` ("*": any; "pods/exec" names a
    subresource, "pods" matches the resource with any subresource unless `exact`),
    `namespace` (None: any) and `when(call)`.

    Counting, `delay`, `effect` and `after` are fakes/faults.py's; given `code`, firing
    answers with a Status of that code (`reason` and `message` by default the usual ones)."""

    verb: str = "*"
    resource: str = "*"
    code: int | None = None
    reason: str | None = None
    message: str | None = None
    namespace: str | None = None
    exact: bool = False

    @property
    def fails(self) -> bool:
        return bool(self.code)

    def selects(self, call: Call) -> bool:
        if self.verb not in ("*", call.verb):
            return False
        if self.resource != "*":
            full = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
            plain_ok = not self.exact and "/" not in self.resource
            if self.resource != full and not (plain_ok and self.resource == call.resource):
                return False
        return self.namespace in (None, call.namespace)


class Faults(faults.Faults[Fault]):
    """The faults a server applies (`add(verb, resource, code, **options)`), in the order
    added."""

    def __init__(self) -> None:
        super().__init__(Fault)

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
