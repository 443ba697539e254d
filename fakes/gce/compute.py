"""Compute Engine v1 state and methods of fakes/gce/server.py: instances and their lifecycle,
operations, firewalls, networks, catalog lookups and project metadata.

Every method takes the `Call` and returns the JSON answer or raises `GoogleError`. Mutating
methods validate first (errors as HTTP answers), then act, and return an Operation; the
server's scheduler moves instances and operations along (see `Timings`). All of it runs
under the server's condition lock (`self.cond`), which is notified on every change.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import itertools
import json
import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fakes.gce import catalog
from fakes.gce.faults import (
    HTTP_MESSAGES,
    Call,
    GoogleError,
    default_message,
    invalid,
    not_found,
    operation_error,
)
from fakes.gce.filter import check_labels, check_name, compile_filter, page

if TYPE_CHECKING:
    from fakes.gce.server import GceServer

EMPTY_FINGERPRINT = "42WmSpB8rSM="  # GCE's fingerprint of empty labels / metadata
WAIT_LIMIT = 120.0  # operations.wait returns by then even if not DONE, as GCE does


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def fingerprint(value: Any) -> str:
    if not value:
        return EMPTY_FINGERPRINT
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    import base64

    return base64.b64encode(digest[:8]).decode()


@dataclass
class Timings:
    """Seconds each step of GCE's lifecycles takes here (the scheduler acts on them)."""

    provision: float = 0.05  # PROVISIONING -> STAGING (the insert operation is DONE then)
    stage: float = 0.05  # STAGING -> RUNNING (also after start)
    stop: float = 0.05  # STOPPING -> TERMINATED (stop, preemption)
    delete: float = 0.05  # STOPPING -> gone
    operation: float = 0.02  # setLabels, setMetadata, firewalls... until DONE


@dataclass
class Vm:
    zone: str
    name: str
    res: dict[str, Any]
    ip: str
    termination: str | None  # STOP or DELETE for spot / preemptible instances, else None
    machine_on: bool = False  # set by GceHosts: a live SSH host answers on its address
    when_off: list[Callable[[], None]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.zone, self.name)


class Compute:
    def __init__(self, server: GceServer) -> None:
        self.server = server
        self.cond = server.cond
        self.timings = Timings()
        self.zones = catalog.zones()
        self.reset()

    def reset(self) -> None:
        self.vms: dict[tuple[str, str], Vm] = {}
        self.ops: dict[str, dict[str, Any]] = {}
        self.request_ids: dict[str, str] = {}  # kept until reset (GCE: at least an hour)
        self.firewalls: dict[str, dict[str, Any]] = {}
        self.project_metadata: dict[str, Any] = {"items": [], "fingerprint": EMPTY_FINGERPRINT}
        self.images: dict[tuple[str, str], str] = {}  # extra (project, family) -> image
        # Each region's CPU quotas (fakes/gce/instance.py region_quotas); tests change them.
        self.region_limits: dict[str, float] = {"CPUS": 24.0, "PREEMPTIBLE_CPUS": 0.0}
        self._ids = itertools.count(int(1e18) + random.randrange(10**17))

    # -- URLs --

    @property
    def project(self) -> str:
        return self.server.project

    def url(self, tail: str, project: str | None = None) -> str:
        return f"{self.server.compute_url}projects/{project or self.project}/{tail}"

    def zone_url(self, zone: str) -> str:
        return self.url(f"zones/{zone}")

    def _zone(self, call: Call) -> str:
        zone = call.params.get("zone", "")
        if zone not in self.zones:
            raise not_found(f"projects/{self.project}/zones/{zone}")
        return zone

    def _project(self, call: Call) -> None:
        if call.params.get("project") != self.project:
            raise not_found(f"projects/{call.params.get('project')}")

    # -- operations --

    def new_op(self, kind: str, target: str, target_id: str, zone: str | None) -> dict[str, Any]:
        name = f"operation-{int(datetime.datetime.now().timestamp() * 1000)}-{uuid.uuid4().hex[:13]}-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:8]}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": name,
            "operationType": kind,
            "targetLink": target,
            "targetId": target_id,
            "status": "RUNNING",
            "user": self.server.account_email,
            "progress": 0,
            "insertTime": now_text(),
            "startTime": now_text(),
        }
        if zone:
            op["zone"] = self.zone_url(zone)
            op["selfLink"] = self.url(f"zones/{zone}/operations/{name}")
        else:
            op["selfLink"] = self.url(f"global/operations/{name}")
        self.ops[name] = op
        return op

    def finish(
        self, op: dict[str, Any], error: dict[str, Any] | None = None, status: int = 0
    ) -> None:
        op.update(status="DONE", progress=100, endTime=now_text())
        if error:
            op["error"] = error
            op["httpErrorStatusCode"] = status
            op["httpErrorMessage"] = HTTP_MESSAGES.get(status, "ERROR")
        self.cond.notify_all()

    def mutate(
        self,
        call: Call,
        kind: str,
        target: str,
        target_id: str,
        zone: str | None,
        act: Callable[[dict[str, Any]], None],
    ) -> dict[str, Any]:
        """The operation of a validated mutating call: the earlier one for a repeated
        requestId; one that fails (without acting) for an operation fault; else `act(op)`,
        which finishes the operation (now or later)."""
        request_id = call.request_id
        if request_id:
            try:
                parsed = uuid.UUID(request_id)
            except ValueError:
                parsed = None
            if parsed is None or parsed.int == 0:
                raise invalid(f"Invalid value for field 'requestId': '{request_id}'. Invalid UUID.")
            if (earlier := self.request_ids.get(request_id)) is not None:
                return self.ops[earlier]
        op = self.new_op(kind, target, target_id, zone)
        if request_id:
            self.request_ids[request_id] = op["name"]
        fault = self.server.operation_fault.get(call.seq)
        if fault is not None:
            code, status, message = fault
            error = operation_error(
                code, message or default_message(code, zone, self.project), zone, call
            )
            delay = self.timings.provision if kind == "insert" else self.timings.operation
            self.server.later(delay, lambda: self.finish(op, error, status))
        else:
            act(op)
        return op

    def replay(self, call: Call) -> dict[str, Any] | None:
        """The operation of an earlier call with this call's requestId: GCE answers a repeat
        with it (whatever the repeat's body, before validating it) and does not act again."""
        earlier = self.request_ids.get(call.request_id or "")
        return self.ops[earlier] if earlier else None

    def _op_in(self, call: Call, zone: str | None) -> dict[str, Any]:
        op = self.ops.get(call.params.get("operation", ""))
        if op is None or (op.get("zone") or None) != (self.zone_url(zone) if zone else None):
            where = f"zones/{zone}" if zone else "global"
            raise not_found(
                f"projects/{self.project}/{where}/operations/{call.params.get('operation')}"
            )
        return op

    def zone_operation(self, call: Call) -> dict[str, Any]:
        self._project(call)
        return self._op_in(call, self._zone(call))

    def global_operation(self, call: Call) -> dict[str, Any]:
        self._project(call)
        return self._op_in(call, None)

    def wait_zone_operation(self, call: Call) -> dict[str, Any]:
        return self._wait(self.zone_operation(call))

    def wait_global_operation(self, call: Call) -> dict[str, Any]:
        return self._wait(self.global_operation(call))

    def _wait(self, op: dict[str, Any]) -> dict[str, Any]:
        self.cond.wait_for(lambda: op["status"] == "DONE", WAIT_LIMIT)
        return op

    def list_zone_operations(self, call: Call) -> dict[str, Any]:
        zone = self._zone(call)
        ops = [o for o in self.ops.values() if o.get("zone") == self.zone_url(zone)]
        return self._list(call, ops, "compute#operationList", f"zones/{zone}/operations")

    # -- instances --

    def vm(self, call: Call) -> Vm:
        zone = self._zone(call)
        name = call.params.get("instance", "")
        vm = self.vms.get((zone, name))
        if vm is None:
            raise not_found(f"projects/{self.project}/zones/{zone}/instances/{name}")
        return vm

    def get_instance(self, call: Call) -> dict[str, Any]:
        self._project(call)
        return self.vm(call).res

    def list_instances(self, call: Call) -> dict[str, Any]:
        self._project(call)
        zone = self._zone(call)
        vms = [v.res for v in self.vms.values() if v.zone == zone]
        return self._list(call, vms, "compute#instanceList", f"zones/{zone}/instances")

    def _list(
        self, call: Call, items: list[dict[str, Any]], kind: str, tail: str
    ) -> dict[str, Any]:
        keep = compile_filter(call.params.get("filter"))
        chosen = sorted((i for i in items if keep(i)), key=lambda i: i["name"])
        chunk, token = page(chosen, dict(call.params))
        answer: dict[str, Any] = {
            "kind": kind,
            "id": f"projects/{self.project}/{tail}",
            "selfLink": self.url(tail),
        }
        if chunk:
            answer["items"] = chunk
        if token:
            answer["nextPageToken"] = token
        return answer

    def aggregated_instances(self, call: Call) -> dict[str, Any]:
        self._project(call)
        keep = compile_filter(call.params.get("filter"))
        order = {zone: number for number, zone in enumerate(self.zones)}
        chosen = sorted(
            (v for v in self.vms.values() if keep(v.res)), key=lambda v: (order[v.zone], v.name)
        )
        chunk, token = page(chosen, dict(call.params))
        items: dict[str, Any] = {}
        for zone in self.zones:
            here = [v.res for v in chunk if v.zone == zone]
            scope = f"zones/{zone}"
            if here:
                items[scope] = {"instances": here}
            else:
                items[scope] = {
                    "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope '{scope}' on this page.",
                        "data": [{"key": "scope", "value": scope}],
                    }
                }
        answer: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": items,
            "selfLink": self.url("aggregated/instances"),
        }
        if token:
            answer["nextPageToken"] = token
        return answer

    def insert_instance(self, call: Call) -> dict[str, Any]:
        from fakes.gce.instance import build_instance

        self._project(call)
        zone = self._zone(call)
        body = call.body if isinstance(call.body, dict) else {}
        for option in ("sourceInstanceTemplate", "sourceMachineImage"):
            if call.params.get(option):
                raise GoogleError(
                    501, "notImplemented", f"{option} is not modelled by the fake GCE."
                )
        name = check_name(body.get("name"))
        if (zone, name) in self.vms:
            raise GoogleError(
                409,
                "alreadyExists",
                f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists",
            )
        res, termination = build_instance(self, zone, body)
        target = self.url(f"zones/{zone}/instances/{name}")

        def act(op: dict[str, Any]) -> None:
            ip = self.free_ip(zone)
            vm = Vm(zone, name, res, ip, termination)
            res["networkInterfaces"][0]["networkIP"] = ip
            for config in res["networkInterfaces"][0].get("accessConfigs", []):
                config["natIP"] = ip
            self.vms[vm.key] = vm
            self.cond.notify_all()

            def staged() -> None:
                if self.vms.get(vm.key) is vm and res["status"] == "PROVISIONING":
                    res["status"] = "STAGING"
                    self.server.later(self.timings.stage, lambda: self._running(vm))
                self.finish(op)

            self.server.later(self.timings.provision, staged)

        return self.mutate(call, "insert", target, res["id"], zone, act)

    def _running(self, vm: Vm, op: dict[str, Any] | None = None) -> None:
        if self.vms.get(vm.key) is vm and vm.res["status"] == "STAGING":
            vm.res["status"] = "RUNNING"
            vm.res["lastStartTimestamp"] = now_text()
        if op is not None:
            self.finish(op)
        self.cond.notify_all()

    def free_ip(self, zone: str) -> str:
        prefix = self.zones[zone].prefix
        used = {v.ip for v in self.vms.values()}
        for y in range(2, 254):
            if (ip := f"{prefix}{y}") not in used:
                return ip
        raise GoogleError(503, "ZONE_RESOURCE_POOL_EXHAUSTED", f"no address left in {zone} (fake)")

    def _after_off(self, vm: Vm, step: Callable[[], None]) -> None:
        """`step` once `vm`'s machine is off (at once without GceHosts)."""
        if vm.machine_on:
            vm.when_off.append(step)
        else:
            step()

    def set_machine(self, zone: str, name: str, on: bool) -> bool:
        """GceHosts reports a machine on or off. Turning on succeeds only while the instance
        is RUNNING; turning off runs the steps that waited for it (TERMINATED, deletion)."""
        vm = self.vms.get((zone, name))
        if vm is None:
            return False
        if on:
            vm.machine_on = vm.res["status"] == "RUNNING"
            return vm.machine_on
        vm.machine_on = False
        steps, vm.when_off = vm.when_off, []
        for step in steps:
            step()
        self.cond.notify_all()
        return True

    def _stopping(self, vm: Vm, op: dict[str, Any] | None, delete: bool, delay: float) -> None:
        vm.res["status"] = "STOPPING"
        self.cond.notify_all()

        def done() -> None:
            if self.vms.get(vm.key) is not vm:
                return
            if delete:
                del self.vms[vm.key]
            else:
                vm.res["status"] = "TERMINATED"
                vm.res["lastStopTimestamp"] = now_text()
            if op is not None:
                self.finish(op)
            self.cond.notify_all()

        self.server.later(delay, lambda: self._after_off(vm, done))

    def stop_instance(self, call: Call) -> dict[str, Any]:
        self._project(call)
        vm = self.vm(call)

        def act(op: dict[str, Any]) -> None:
            if vm.res["status"] in ("TERMINATED", "STOPPING"):
                self.server.later(self.timings.operation, lambda: self.finish(op))
            else:
                self._stopping(vm, op, False, self.timings.stop)

        return self.mutate(call, "stop", vm.res["selfLink"], vm.res["id"], vm.zone, act)

    def start_instance(self, call: Call) -> dict[str, Any]:
        self._project(call)
        vm = self.vm(call)
        if vm.res["status"] in ("STOPPING", "SUSPENDING"):
            raise GoogleError(
                400,
                "resourceNotReady",
                f"The resource '{vm.res['selfLink'].split('/v1/')[1]}' is not ready",
            )

        def act(op: dict[str, Any]) -> None:
            if vm.res["status"] != "TERMINATED":
                self.server.later(self.timings.operation, lambda: self.finish(op))
                return
            vm.res["status"] = "STAGING"
            self.cond.notify_all()
            self.server.later(self.timings.stage, lambda: self._running(vm, op))

        return self.mutate(call, "start", vm.res["selfLink"], vm.res["id"], vm.zone, act)

    def delete_instance(self, call: Call) -> dict[str, Any]:
        self._project(call)
        vm = self.vm(call)

        def act(op: dict[str, Any]) -> None:
            self._stopping(vm, op, True, self.timings.delete)

        return self.mutate(call, "delete", vm.res["selfLink"], vm.res["id"], vm.zone, act)

    def preempt(self, zone: str, name: str) -> dict[str, Any]:
        """GCE reclaims a spot / preemptible instance (see GceServer.preempt)."""
        vm = self.vms.get((zone, name))
        if vm is None:
            raise ValueError(f"no instance {name} in {zone}")
        if vm.termination is None:
            raise ValueError(f"{name} is neither spot nor preemptible: GCE does not preempt it")
        if vm.res["status"] not in ("RUNNING", "STAGING", "PROVISIONING"):
            raise ValueError(f"{name} is {vm.res['status']}: nothing to preempt")
        op = self.new_op("compute.instances.preempted", vm.res["selfLink"], vm.res["id"], zone)
        op["user"] = "system"
        op["statusMessage"] = "Instance was preempted."
        self._stopping(vm, op, vm.termination == "DELETE", self.timings.stop)
        return op

    def set_labels(self, call: Call) -> dict[str, Any]:
        self._project(call)
        vm = self.vm(call)
        body = call.body if isinstance(call.body, dict) else {}
        labels = check_labels(body.get("labels"), "labels")
        if body.get("labelFingerprint") != vm.res["labelFingerprint"]:
            raise GoogleError(
                412,
                "conditionNotMet",
                "Labels fingerprint either invalid or resource labels have changed",
            )

        def act(op: dict[str, Any]) -> None:
            vm.res["labels"] = labels
            vm.res["labelFingerprint"] = fingerprint(labels)
            self.server.later(self.timings.operation, lambda: self.finish(op))

        return self.mutate(call, "setLabels", vm.res["selfLink"], vm.res["id"], vm.zone, act)

    def set_metadata(self, call: Call) -> dict[str, Any]:
        from fakes.gce.instance import check_metadata

        self._project(call)
        vm = self.vm(call)
        body = call.body if isinstance(call.body, dict) else {}
        items = check_metadata(body, "metadata")
        if body.get("fingerprint") != vm.res["metadata"]["fingerprint"]:
            raise GoogleError(
                412,
                "conditionNotMet",
                "Supplied fingerprint does not match current metadata fingerprint.",
            )

        def act(op: dict[str, Any]) -> None:
            vm.res["metadata"] = {
                "kind": "compute#metadata",
                "fingerprint": fingerprint(items),
                "items": items,
            }
            self.server.later(self.timings.operation, lambda: self.finish(op))

        return self.mutate(call, "setMetadata", vm.res["selfLink"], vm.res["id"], vm.zone, act)

    # -- project --

    def get_project(self, call: Call) -> dict[str, Any]:
        self._project(call)
        return {
            "kind": "compute#project",
            "id": self.server.project_number,
            "name": self.project,
            "creationTimestamp": "2024-01-01T00:00:00.000-08:00",
            "commonInstanceMetadata": {
                "kind": "compute#metadata",
                **copy.deepcopy(self.project_metadata),
            },
            "quotas": [
                {"metric": "CPUS_ALL_REGIONS", "limit": 64.0, "usage": 0.0},
                {"metric": "FIREWALLS", "limit": 200.0, "usage": float(len(self.firewalls))},
            ],
            "selfLink": self.url("").rstrip("/"),
            "defaultServiceAccount": self.server.default_compute_account,
            "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
            "defaultNetworkTier": "PREMIUM",
        }

    def set_common_metadata(self, call: Call) -> dict[str, Any]:
        from fakes.gce.instance import check_metadata

        self._project(call)
        body = call.body if isinstance(call.body, dict) else {}
        items = check_metadata(body, "metadata")
        if body.get("fingerprint") != self.project_metadata["fingerprint"]:
            raise GoogleError(
                412,
                "conditionNotMet",
                "Supplied fingerprint does not match current metadata fingerprint.",
            )

        def act(op: dict[str, Any]) -> None:
            self.project_metadata = {"items": items, "fingerprint": fingerprint(items)}
            self.server.later(self.timings.operation, lambda: self.finish(op))

        target = self.url("").rstrip("/")
        return self.mutate(
            call,
            "compute.projects.setCommonInstanceMetadata",
            target,
            self.server.project_number,
            None,
            act,
        )

    def _region(self, call: Call) -> str:
        region = call.params.get("region", "")
        if region not in catalog.REGIONS:
            raise not_found(f"projects/{self.project}/regions/{region}")
        return region


_URL_TAIL = re.compile(r"(?:.*/)?projects/([^/]+)/(.*)$")


def split_url(value: str) -> tuple[str | None, str]:
    """(project or None, the path after it) of a full or partial resource URL."""
    found = _URL_TAIL.match(value)
    return (found.group(1), found.group(2)) if found else (None, value)
