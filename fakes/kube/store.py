"""The objects of the fake API server, their resourceVersions, and the watch history.

One global resourceVersion counter, as etcd's revision: every change takes the next value
and records an event (ADDED, MODIFIED, DELETED) in a bounded history that watches replay
from a resourceVersion; a watch from a version older than the history gets 410 Expired.

Stored objects are never changed in place: a change builds a new dict and replaces the old
one, so an object handed to a watcher or a listing stays as it was. Callers outside the
server get deep copies. Thread-safe (one lock); watchers are notified through their own
callback, which must not block (the server's pushes into an asyncio queue thread-safely).
"""

from __future__ import annotations

import base64
import builtins
import copy
import json
import secrets
import string
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import errors
from .resources import Resource
from .selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
_SUFFIX = string.ascii_lowercase.replace("a", "").replace("e", "") + "2456789"
# The API server keeps at most this much of a generateName, so a name stays within 63.
GENERATED_BASE_MAX = 58


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: Resource
    obj: Obj
    old: Obj | None  # the object before a MODIFIED (to see it move in or out of a selector)


@dataclass(eq=False)
class Watcher:
    """A watch on `resource` in `namespace` (None: all) with selectors; `push(type, obj)`
    receives each event that concerns it (an object moving into the selection arrives as
    ADDED, one moving out as DELETED, as the real server does)."""

    resource: Resource
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    push: Callable[[str, Obj], None]

    def selects(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def translate(self, event: Event) -> str | None:
        """The event type this watcher sees for `event`, None if it does not concern it."""
        if event.resource != self.resource:
            return None
        now_in = self.selects(event.obj)
        if event.type != "MODIFIED":
            return event.type if now_in else None
        was_in = self.selects(event.old)
        if now_in:
            return "MODIFIED" if was_in else "ADDED"
        return "DELETED" if was_in else None


@dataclass
class Store:
    history_size: int = 20000
    lock: threading.RLock = field(default_factory=threading.RLock)
    rv: int = 1
    compacted: int = 0  # the newest resourceVersion no longer in the history
    objects: dict[Resource, dict[Key, Obj]] = field(default_factory=dict)
    history: deque[Event] = field(default_factory=deque)
    watchers: list[Watcher] = field(default_factory=list)

    # -- reading -------------------------------------------------------------------------

    def table(self, resource: Resource) -> dict[Key, Obj]:
        return self.objects.setdefault(resource, {})

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        """The stored object (do not change it); ApiError 404 when there is none."""
        with self.lock:
            obj = self.table(resource).get((namespace if resource.namespaced else "", name))
        if obj is None:
            raise errors.not_found(resource.group, resource.plural, name)
        return obj

    def find(self, resource: Resource, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self.table(resource).get((namespace if resource.namespaced else "", name))

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> tuple[builtins.list[Obj], int]:
        """The stored objects that match, sorted by (namespace, name), and the current
        resourceVersion."""
        with self.lock:
            table = self.table(resource)
            name = fields.name() if fields else None
            if name is not None and namespace is not None:
                one = table.get((namespace, name))
                candidates: Iterable[Obj] = [one] if one else []
            else:
                candidates = table.values()
            found = [
                obj
                for obj in candidates
                if (namespace is None or key_of(obj)[0] == namespace)
                and (labels is None or labels.matches(obj["metadata"].get("labels")))
                and (fields is None or fields.matches(obj))
            ]
            rv = self.rv
        found.sort(key=key_of)
        return found, rv

    # -- writing -------------------------------------------------------------------------

    def _record(self, resource: Resource, kind: str, obj: Obj, old: Obj | None) -> None:
        event = Event(self.rv, kind, resource, obj, old)
        self.history.append(event)
        while len(self.history) > self.history_size:
            self.compacted = self.history.popleft().rv
        for watcher in list(self.watchers):
            seen = watcher.translate(event)
            if seen:
                watcher.push(seen, obj)

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def create(self, resource: Resource, obj: Obj) -> Obj:
        """Store a new object (generateName honoured; uid, resourceVersion and
        creationTimestamp set); ApiError 409 AlreadyExists if the name is taken."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        with self.lock:
            table = self.table(resource)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(table, meta)
            key = key_of(obj)
            if key in table:
                raise errors.already_exists(resource.group, resource.plural, key[1])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["resourceVersion"] = self._next_rv()
            obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
            table[key] = obj
            self._record(resource, "ADDED", obj, None)
        return obj

    def _generate_name(self, table: dict[Key, Obj], meta: dict[str, Any]) -> str:
        namespace = meta.get("namespace") or ""
        base = str(meta["generateName"])[:GENERATED_BASE_MAX]  # as the API server cuts it
        for _ in range(100):
            name = base + "".join(secrets.choice(_SUFFIX) for _ in range(5))
            if (namespace, name) not in table:
                return str(name)
        raise errors.ApiError(500, "InternalError", "could not generate a unique name")

    def replace(self, resource: Resource, obj: Obj, expect_rv: str | None = None) -> Obj:
        """Store `obj` in place of the object of its name (a new resourceVersion); ApiError
        404 if there is none, 409 Conflict if `expect_rv` is given and is not the current
        version. An object being deleted whose last finalizer this removes is removed."""
        obj = copy.deepcopy(obj)
        key = key_of(obj)
        with self.lock:
            table = self.table(resource)
            old = table.get(key)
            if old is None:
                raise errors.not_found(resource.group, resource.plural, key[1])
            if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(resource.group, resource.plural, key[1])
            meta = obj["metadata"]
            for kept in ("uid", "creationTimestamp", "deletionTimestamp"):
                if kept in old["metadata"]:
                    meta[kept] = old["metadata"][kept]
            meta["resourceVersion"] = self._next_rv()
            obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
            if (
                meta.get("deletionTimestamp")
                and old["metadata"].get("finalizers")
                and not meta.get("finalizers")
            ):
                del table[key]
                self._record(resource, "DELETED", obj, old)
                return obj
            table[key] = obj
            self._record(resource, "MODIFIED", obj, old)
        return obj

    def change(
        self, resource: Resource, namespace: str, name: str, edit: Callable[[Obj], None]
    ) -> Obj:
        """Apply `edit` to a copy of the current object and store it (no conflict check)."""
        with self.lock:
            current = copy.deepcopy(self.get(resource, namespace, name))
            edit(current)
            return self.replace(resource, current)

    def remove(self, resource: Resource, namespace: str, name: str) -> Obj:
        """Remove the object now (a DELETED event with a new resourceVersion)."""
        with self.lock:
            table = self.table(resource)
            key = (namespace if resource.namespaced else "", name)
            old = table.pop(key, None)
            if old is None:
                raise errors.not_found(resource.group, resource.plural, name)
            gone = dict(old, metadata=dict(old["metadata"], resourceVersion=self._next_rv()))
            self._record(resource, "DELETED", gone, old)
        return gone

    # -- watching ------------------------------------------------------------------------

    def watch(self, watcher: Watcher, since: int | None) -> builtins.list[tuple[str, Obj]]:
        """Register `watcher` and return the events it must first replay: those after
        `since`, or (since None) every current object as ADDED. ApiError 410 if `since` is
        older than the history."""
        with self.lock:
            if since is None:
                replay = [
                    ("ADDED", obj)
                    for obj in self.list(
                        watcher.resource, watcher.namespace, watcher.labels, watcher.fields
                    )[0]
                ]
            else:
                if since < self.compacted:
                    raise errors.expired(
                        f"too old resource version: {since} ({self.compacted + 1})"
                    )
                replay = []
                for event in self.history:
                    seen = watcher.translate(event) if event.rv > since else None
                    if seen:
                        replay.append((seen, event.obj))
            self.watchers.append(watcher)
        return replay

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            if watcher in self.watchers:
                self.watchers.remove(watcher)

    def compact(self) -> None:
        """Forget the whole history (a watch from any earlier version then gets 410)."""
        with self.lock:
            self.history.clear()
            self.compacted = self.rv

    def check_rv(self, rv: int) -> None:
        """ApiError 410 if a continue token's resourceVersion is older than the history."""
        with self.lock:
            if rv < self.compacted:
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter."
                )


def encode_continue(rv: int, last: Key) -> str:
    raw = json.dumps({"rv": rv, "start": list(last)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, Key]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc
