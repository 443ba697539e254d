"""What the fake Azure holds: resources by id (compared without case, as ARM compares
names), each with its ARM JSON as answered, plus what the fake keeps beside it."""

from __future__ import annotations

import copy
import datetime
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fakes.azure.faults import ArmError, not_found, rg_not_found

RG_TYPE = "Microsoft.Resources/resourceGroups"


def now_text() -> str:
    """ARM's timestamp form (ISO 8601, UTC, 7 fraction digits as ARM writes them)."""
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0+00:00"


def rg_id(sub: str, rg: str) -> str:
    return f"/subscriptions/{sub}/resourceGroups/{rg}"


def resource_id(sub: str, rg: str, kind: str, name: str) -> str:
    """`kind` is `Namespace/type` (`Microsoft.Compute/virtualMachines`)."""
    return f"{rg_id(sub, rg)}/providers/{kind}/{name}"


def id_key(arm_id: str) -> str:
    return arm_id.rstrip("/").lower()


def parse_id(arm_id: str) -> tuple[str, str, str, str] | None:
    """(subscription, resource group, Namespace/type, name) of a top-level resource id."""
    parts = arm_id.strip("/").split("/")
    if (
        len(parts) != 8
        or parts[0].lower() != "subscriptions"
        or parts[2].lower() != "resourcegroups"
        or parts[4].lower() != "providers"
    ):
        return None
    return parts[1], parts[3], f"{parts[5]}/{parts[6]}", parts[7]


@dataclass
class Resource:
    """One resource: `body` is its ARM JSON (id, name, type, location, tags, properties...),
    `extra` what the fake keeps that ARM does not answer (a VM's customData...)."""

    id: str
    kind: str
    sub: str
    rg: str
    name: str
    body: dict[str, Any]
    created: float = field(default_factory=time.monotonic)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return id_key(self.id)

    @property
    def props(self) -> dict[str, Any]:
        props: dict[str, Any] = self.body.setdefault("properties", {})
        return props

    @property
    def state(self) -> str:
        return str(self.props.get("provisioningState", "Succeeded"))

    @state.setter
    def state(self, value: str) -> None:
        self.props["provisioningState"] = value

    def answer(self) -> dict[str, Any]:
        return copy.deepcopy(self.body)


@dataclass
class Group:
    """A resource group."""

    id: str
    sub: str
    name: str
    location: str
    tags: dict[str, str]
    state: str = "Succeeded"
    managed_by: str | None = None

    def answer(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "type": RG_TYPE,
            "location": self.location,
            "properties": {"provisioningState": self.state},
        }
        if self.tags:
            out["tags"] = dict(self.tags)
        if self.managed_by:
            out["managedBy"] = self.managed_by
        return out


class Store:
    """Resource groups and resources (not thread-safe: the server's lock guards it)."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}  # lower(sub/rg) -> group
        self.resources: dict[str, Resource] = {}  # lower(id) -> resource

    def clear(self) -> None:
        self.groups.clear()
        self.resources.clear()

    def group(self, sub: str, rg: str) -> Group:
        group = self.groups.get(f"{sub}/{rg}".lower())
        if group is None:
            raise rg_not_found(rg)
        return group

    def live_group(self, sub: str, rg: str) -> Group:
        """The group, refusing new resources while it is being deleted."""
        group = self.group(sub, rg)
        if group.state == "Deleting":
            raise ArmError(
                409,
                "ResourceGroupBeingDeleted",
                f"The resource group '{group.name}' is in deprovisioning state and cannot "
                "perform this operation.",
            )
        return group

    def find(self, arm_id: str) -> Resource | None:
        return self.resources.get(id_key(arm_id))

    def get(self, sub: str, rg: str, kind: str, name: str) -> Resource:
        self.group(sub, rg)
        found = self.resources.get(id_key(resource_id(sub, rg, kind, name)))
        if found is None:
            raise not_found(kind, name, rg)
        return found

    def maybe(self, sub: str, rg: str, kind: str, name: str) -> Resource | None:
        return self.resources.get(id_key(resource_id(sub, rg, kind, name)))

    def add(self, res: Resource) -> Resource:
        self.resources[res.key] = res
        return res

    def remove(self, res: Resource) -> None:
        self.resources.pop(res.key, None)

    def of_kind(
        self, kind: str, sub: str | None = None, rg: str | None = None
    ) -> Iterator[Resource]:
        for res in list(self.resources.values()):
            if res.kind.lower() != kind.lower():
                continue
            if sub is not None and res.sub.lower() != sub.lower():
                continue
            if rg is not None and res.rg.lower() != rg.lower():
                continue
            yield res

    def in_group(self, sub: str, rg: str) -> list[Resource]:
        return [
            r
            for r in self.resources.values()
            if r.sub.lower() == sub.lower() and r.rg.lower() == rg.lower()
        ]
