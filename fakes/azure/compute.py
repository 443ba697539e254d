"""Microsoft.Compute for fakes/azure/server.py: virtual machines (create/update, get with
instanceView, list, tags, delete with deleteOption cascade, start, powerOff, deallocate,
restart, simulateEviction), their OS managed disks, capacity, quota and spot eviction
with scheduled events.

A VM's power state runs starting -> running -> stopping -> stopped, or deallocating ->
deallocated. While AzureHosts watches the server (`hosts_attached`), `running` waits for
the VM's machine to be on, and stopped / deallocated / deleted for it to be off
(`set_machine`); otherwise both happen at once. A create whose allocation fails (capacity,
a fault) leaves the VM provisioningState Failed, as Azure does.
"""

from __future__ import annotations

import base64
import copy
import datetime
import email.utils
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fakes.azure.common import begin_delete, location_of, new_resource, ref, tags_of
from fakes.azure.faults import ALLOCATION_MESSAGES, ArmError
from fakes.azure.lro import Operation
from fakes.azure.routes import USAGES, Ctx, Reply, handles
from fakes.azure.store import Resource, now_text, resource_id

if TYPE_CHECKING:
    from fakes.azure.server import AzureServer

VM = "Microsoft.Compute/virtualMachines"
DISK = "Microsoft.Compute/disks"
NIC = "Microsoft.Network/networkInterfaces"
PIP = "Microsoft.Network/publicIPAddresses"
MI = "Microsoft.ManagedIdentity/userAssignedIdentities"
_POWER_TEXT = {
    "starting": "VM starting",
    "running": "VM running",
    "stopping": "VM stopping",
    "stopped": "VM stopped",
    "deallocating": "VM deallocating",
    "deallocated": "VM deallocated",
}


# Compute's usage list (`GET .../providers/Microsoft.Compute/locations/{l}/usages`): each
# quota's `name.value` and `localizedValue` as Azure words them, by lower-case name; a VM
# family's (`standardDSv3Family`) is `Standard DSv3 Family vCPUs`. Limits not set with
# `AzureServer.set_quota` are these defaults, far above what a test launches, and a create
# is held to the same limits.
_NAMED = {
    "availabilitysets": ("availabilitySets", "Availability Sets"),
    "cores": ("cores", "Total Regional vCPUs"),
    "virtualmachines": ("virtualMachines", "Virtual Machines"),
    "virtualmachinescalesets": ("virtualMachineScaleSets", "Virtual Machine Scale Sets"),
    "lowprioritycores": ("lowPriorityCores", "Total Regional Low-priority vCPUs"),
}
DEFAULT_VCPU_LIMIT = 1000
DEFAULT_LIMITS = {
    "availabilitysets": 2500,
    "virtualmachines": 25000,
    "virtualmachinescalesets": 2500,
}


def _family_label(family: str) -> tuple[str, str]:
    """(`standardDSv3Family`, `Standard DSv3 Family vCPUs`)."""
    words = family
    if words.lower().startswith("standard"):
        words = "Standard " + words[len("standard") :]
    if words.endswith("Family"):
        words = words[: -len("Family")] + " Family"
    return family, f"{words} vCPUs"


# The adminUsername values Azure refuses (its Compute API reference, "Disallowed values"),
# without case: 400 InvalidParameter, "The Admin Username specified is not allowed."
RESERVED_ADMIN_USERS = frozenset(
    {
        *("administrator", "admin", "admin1", "admin2", "adm", "actuser", "aspnet", "backup"),
        *("console", "david", "guest", "john", "owner", "root", "server", "sql", "support"),
        *("support_388945a0", "sys", "test", "test1", "test2", "test3", "user", "user1"),
        *("user2", "user3", "user4", "user5", "1", "123", "a"),
    }
)


@dataclass(frozen=True)
class VmView:
    """A VM as the fake holds it (for assertions and AzureHosts)."""

    vm_id: str
    name: str
    id: str
    resource_group: str
    location: str
    zone: str | None
    size: str
    priority: str
    eviction_policy: str | None
    provisioning_state: str
    power: str
    runs: bool  # its machine should be up (AzureHosts boots a host)
    machine_on: bool
    private_ip: str | None
    public_ips: tuple[str, ...]
    admin_username: str | None
    ssh_keys: tuple[str, ...]
    custom_data: bytes | None
    tags: dict[str, str]
    identity_client_ids: tuple[str, ...]
    events: tuple[dict[str, Any], ...]


class Compute:
    def __init__(self, server: AzureServer) -> None:
        self.server = server

    @property
    def store(self) -> Any:
        return self.server.store

    # -- lookups --

    def all_vms(self) -> list[Resource]:
        return list(self.store.of_kind(VM))

    def find_vm(self, name_or_id: str) -> Resource | None:
        """By name, vmId or resource id (case-insensitive)."""
        wanted = name_or_id.lower()
        for res in self.all_vms():
            if wanted in (res.name.lower(), str(res.props.get("vmId")).lower(), res.key):
                return res
        return None

    def nics_of(self, vm: Resource) -> list[Resource]:
        out = []
        for item in vm.props.get("networkProfile", {}).get("networkInterfaces", []):
            nic = self.store.find(item["id"])
            if nic is not None:
                out.append(nic)
        return out

    def identity_client_id(self, vm: Resource) -> str | None:
        ids = self.identity_ids(vm)
        for mi_id in ids:
            mi = self.store.find(mi_id)
            if mi is not None:
                return str(mi.props["clientId"])
        return None

    def identity_ids(self, vm: Resource) -> list[str]:
        return list((vm.body.get("identity") or {}).get("userAssignedIdentities") or {})

    def view(self, vm: Resource) -> VmView:
        net = self.server.network
        nics = self.nics_of(vm)
        private = net.nic_private_ip(nics[0]) if nics else None
        public = tuple(ip for n in nics for ip in net.nic_public_ips(n))
        os_profile = vm.props.get("osProfile", {})
        keys = (os_profile.get("linuxConfiguration") or {}).get("ssh", {}).get("publicKeys") or []
        clients = []
        for mi_id in self.identity_ids(vm):
            mi = self.store.find(mi_id)
            if mi is not None:
                clients.append(str(mi.props["clientId"]))
        zones = vm.body.get("zones") or []
        return VmView(
            str(vm.props["vmId"]),
            vm.name,
            vm.id,
            vm.rg,
            str(vm.body.get("location")),
            zones[0] if zones else None,
            str(vm.props["hardwareProfile"]["vmSize"]),
            str(vm.props.get("priority", "Regular")),
            vm.props.get("evictionPolicy"),
            vm.state,
            str(vm.extra["power"]),
            self.runs(vm),
            bool(vm.extra.get("machine_on")),
            private,
            public,
            os_profile.get("adminUsername"),
            tuple(str(k.get("keyData", "")).strip() for k in keys if k.get("keyData")),
            vm.extra.get("custom_data"),
            dict(vm.body.get("tags") or {}),
            tuple(clients),
            tuple(copy.deepcopy(vm.extra.get("events", []))),
        )

    def runs(self, vm: Resource) -> bool:
        return bool(vm.extra.get("ready")) and vm.extra["power"] in ("starting", "running")

    # -- machine --

    def set_machine(self, vm_id: str, on: bool) -> bool:
        vm = self.find_vm(vm_id)
        if vm is None:
            return False
        if on:
            if not self.runs(vm):
                return False
            vm.extra["machine_on"] = True
            steps, vm.extra["when_on"] = vm.extra.get("when_on", []), []
        else:
            vm.extra["machine_on"] = False
            steps, vm.extra["when_off"] = vm.extra.get("when_off", []), []
        for step in steps:
            step()
        return True

    def _boot(self, vm: Resource, op: Operation | None) -> None:
        """The VM comes up: running at once, or once its machine is on under AzureHosts."""
        vm.extra["power"] = "starting"
        vm.extra["ready"] = True

        def running() -> None:
            if self.store.find(vm.id) is vm and vm.extra["power"] == "starting":
                vm.extra["power"] = "running"
                if vm.state in ("Creating", "Updating"):
                    vm.state = "Succeeded"
            if op is not None:
                self.server.ops.succeed(op)

        if self.server.hosts_attached and not vm.extra.get("machine_on"):
            vm.extra.setdefault("when_on", []).append(running)
        else:
            running()

    def _halt(self, vm: Resource, power: str, then: Callable[[], None]) -> None:
        """stopping/deallocating now; `power` after lro_s, once the machine is off."""
        vm.extra["power"] = "deallocating" if power == "deallocated" else "stopping"
        vm.extra["ready"] = False
        vm.extra["when_on"] = []

        def off() -> None:
            if self.store.find(vm.id) is vm:
                vm.extra["power"] = power
            then()

        def later() -> None:
            if self.server.hosts_attached and vm.extra.get("machine_on"):
                vm.extra.setdefault("when_off", []).append(off)
            else:
                off()

        self.server.later(self.server.lro_s, later)

    # -- capacity and quota --

    def allocated(self, vm: Resource) -> bool:
        return (
            vm.extra["power"] != "deallocated"
            and vm.state != "Failed"
            and not vm.extra.get("alloc_failed")
        )

    def _size(self, name: str) -> Any:
        size = self.server.sizes.get(str(name).lower())
        if size is None:
            raise ArmError(
                400,
                "InvalidParameter",
                f"The value {name} provided for the VM size is not valid. The valid sizes in "
                f"the current region are: {', '.join(s.name for s in self.server.sizes.values())}.",
                target="vmSize",
            )
        return size

    def check_offered(self, size: Any, location: str, zone: str | None) -> None:
        restricted = self.server.restricted
        if (size.name.lower(), None) in restricted or (
            zone and (size.name.lower(), zone) in restricted
        ):
            where = (
                f"zone '{zone}' of location '{location}'"
                if zone and (size.name.lower(), zone) in restricted
                else f"location '{location}'"
            )
            raise ArmError(
                409,
                "SkuNotAvailable",
                f"The requested VM size for resource 'Following SKUs have failed for Capacity "
                f"Restrictions: {size.name}' is currently not available in {where}. Please try "
                "another size or deploy to a different location or different zone. See "
                "https://aka.ms/azureskunotavailable for details.",
            )

    def usage(self, location: str, exclude: Resource | None = None) -> dict[str, int]:
        """What the VMs in `location` use of its compute quotas, by quota name in lower case:
        the vCPUs of allocated VMs (spot ones under `lowprioritycores`, others under `cores`
        and their size's family) and the number of VMs (`virtualmachines`, allocated or not)."""
        where = location.replace(" ", "").lower()
        used: dict[str, int] = {}

        def add(name: str, amount: int) -> None:
            used[name] = used.get(name, 0) + amount

        for vm in self.all_vms():
            if vm is exclude or str(vm.body.get("location", "")).lower() != where:
                continue
            add("virtualmachines", 1)
            size = self.server.sizes.get(str(vm.props["hardwareProfile"]["vmSize"]).lower())
            if size is None or not self.allocated(vm):
                continue
            if vm.props.get("priority") == "Spot":
                add("lowprioritycores", size.vcpus)
            else:
                add("cores", size.vcpus)
                add(size.family.lower(), size.vcpus)
        return used

    def limit(self, name: str) -> tuple[int, str]:
        """Quota `name`'s limit (`set_quota`, else the fake's default) and the error code a
        create beyond it answers."""
        found = self.server.quotas.get(name.lower())
        if found is not None:
            return found
        return DEFAULT_LIMITS.get(name.lower(), DEFAULT_VCPU_LIMIT), "OperationNotAllowed"

    def usages(self, location: str) -> list[dict[str, Any]]:
        """The location's usage list as Microsoft.Compute answers it (see `list_usages`)."""
        used = self.usage(location)
        families = {s.family.lower(): s.family for s in self.server.sizes.values()}
        for name in self.server.quotas:
            if name not in _NAMED and name not in families:
                families[name] = name
        rows = [(name, _NAMED[name]) for name in ("availabilitysets", "cores", "virtualmachines")]
        rows.append(("virtualmachinescalesets", _NAMED["virtualmachinescalesets"]))
        rows += [(family, _family_label(families[family])) for family in sorted(families)]
        rows.append(("lowprioritycores", _NAMED["lowprioritycores"]))
        out = []
        for key, (value, localized) in rows:
            out.append(
                {
                    "limit": self.limit(key)[0],
                    "unit": "Count",
                    "currentValue": used.get(key, 0),
                    "name": {"value": value, "localizedValue": localized},
                }
            )
        return out

    def check_quota(self, size: Any, spot: bool, location: str, exclude: Resource | None) -> None:
        usage = self.usage(location, exclude)
        families = ["lowprioritycores"] if spot else ["cores", size.family.lower()]
        for family in families:
            limit, code = self.limit(family)
            current = usage.get(family, 0)
            if current + size.vcpus > limit:
                label = {
                    "cores": "Total Regional Cores",
                    "lowprioritycores": "Low Priority Cores",
                }.get(family, f"{size.family} Cores")
                raise ArmError(
                    409,
                    code,
                    f"Operation could not be completed as it results in exceeding approved {label} "
                    f"quota. Additional details - Deployment Model: Resource Manager, Location: "
                    f"{location}, Current Limit: {limit}, Current Usage: {current}, Additional "
                    f"Required: {size.vcpus}, (Minimum) New Limit Required: {current + size.vcpus}. "
                    "Submit a request for Quota increase at https://aka.ms/ProdportalCRP/#blade/"
                    "Microsoft_Azure_Capacity/UsageAndQuota.ReactView by specifying parameters "
                    "listed in the 'Details' section for deployment to succeed. Please read more "
                    "about quota limits at https://docs.microsoft.com/en-us/azure/"
                    "azure-supportability/per-vm-quota-requests",
                )

    def capacity_error(
        self, size: Any, zone: str | None, exclude: Resource | None
    ) -> ArmError | None:
        capacity = self.server.capacity
        for key in (
            ((size.name.lower(), zone), (size.name.lower(), None))
            if zone
            else ((size.name.lower(), None),)
        ):
            if key not in capacity:
                continue
            limit, code = capacity[key]
            count = 0
            for vm in self.all_vms():
                if vm is exclude or not self.allocated(vm):
                    continue
                if str(vm.props["hardwareProfile"]["vmSize"]).lower() != size.name.lower():
                    continue
                vm_zones = vm.body.get("zones") or [None]
                if key[1] is None or vm_zones[0] == key[1]:
                    count += 1
            if count + 1 > limit:
                code = code or ("ZonalAllocationFailed" if key[1] else self.server.allocation_error)
                return ArmError(200, code, ALLOCATION_MESSAGES.get(code, f"{code} (fake capacity)"))
        return None

    # -- removal --

    def _cascade(self, vm: Resource) -> None:
        """Remove `vm`; its OS disk and NICs (and their public IPs) by their deleteOptions."""
        store = self.store
        store.remove(vm)
        os_disk = vm.props["storageProfile"]["osDisk"]
        disk = store.find(os_disk["managedDisk"]["id"])
        if disk is not None:
            if os_disk.get("deleteOption") == "Delete":
                store.remove(disk)
            else:
                disk.body.pop("managedBy", None)
                disk.props["diskState"] = "Unattached"
        for item in vm.props.get("networkProfile", {}).get("networkInterfaces", []):
            nic = store.find(item["id"])
            if nic is None:
                continue
            nic.extra.pop("vm", None)
            nic.props.pop("macAddress", None)
            if (item.get("properties") or {}).get("deleteOption") == "Delete":
                pips = []
                for config in nic.props.get("ipConfigurations", []):
                    pip_id = ref(config["properties"].get("publicIPAddress"))
                    pip = store.find(pip_id) if pip_id else None
                    if pip is not None and pip.props.get("deleteOption") == "Delete":
                        pips.append(pip)
                store.remove(nic)
                for pip in pips:
                    store.remove(pip)
        self._drop_events(vm)

    def _drop_events(self, vm: Resource) -> None:
        if vm.extra.get("events"):
            vm.extra["events"] = []
            vm.extra["incarnation"] = vm.extra.get("incarnation", 1) + 1

    def delete_for_group(self, vm: Resource) -> None:
        if vm.state == "Deleting":
            return
        vm.state = "Deleting"
        self._halt(vm, "deallocated", lambda: self._cascade(vm))

    def drop_disk(self, disk: Resource) -> None:
        self.store.remove(disk)

    # -- eviction --

    def evict(self, name: str, notice_s: float) -> Callable[[], bool]:
        vm = self.find_vm(name)
        if vm is None:
            raise ValueError(f"no VM {name}")
        if vm.props.get("priority") != "Spot":
            raise ValueError(f"{name} is not a spot VM")
        if not self.allocated(vm) or vm.extra["power"] not in ("starting", "running"):
            raise ValueError(f"{name} is not running ({vm.extra['power']})")
        event_id = str(uuid.uuid4())
        not_before = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=notice_s)
        event = {
            "EventId": event_id,
            "EventStatus": "Scheduled",
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": [vm.name],
            "NotBefore": email.utils.format_datetime(not_before, usegmt=True),
            "Description": "The virtual machine is being evicted (spot capacity is reclaimed).",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
        vm.extra.setdefault("events", []).append(event)
        vm.extra["incarnation"] = vm.extra.get("incarnation", 1) + 1
        finished: list[bool] = []
        vm.extra.setdefault("evictions", {})[event_id] = lambda: self._evict_now(
            vm, event, finished
        )
        self.server.later(notice_s, lambda: self._evict_now(vm, event, finished))
        return lambda: bool(finished)

    def _evict_now(self, vm: Resource, event: dict[str, Any], finished: list[bool]) -> None:
        if event["EventStatus"] != "Scheduled":
            return
        event["EventStatus"] = "Started"
        vm.extra["incarnation"] = vm.extra.get("incarnation", 1) + 1
        if self.store.find(vm.id) is not vm or vm.state == "Deleting":
            finished.append(True)
            return
        policy = vm.props.get("evictionPolicy", "Deallocate")

        def done() -> None:
            if policy == "Delete":
                self._cascade(vm)
            else:
                self._drop_events(vm)
            finished.append(True)

        if policy == "Delete":
            vm.state = "Deleting"
        self._halt(vm, "deallocated", done)

    def approve(self, vm: Resource, event_ids: list[str]) -> None:
        """StartRequests of the VM's IMDS: approved events happen now."""
        for event_id in event_ids:
            start = vm.extra.get("evictions", {}).pop(event_id, None)
            if start is not None:
                start()

    # -- answers --

    def answer(self, vm: Resource, instance_view: bool = False) -> dict[str, Any]:
        out = vm.answer()
        ids = (out.get("identity") or {}).get("userAssignedIdentities") or {}
        for mi_id in list(ids):
            mi = self.store.find(mi_id)
            ids[mi_id] = (
                {}
                if mi is None
                else {"principalId": mi.props["principalId"], "clientId": mi.props["clientId"]}
            )
        if instance_view:
            out["properties"]["instanceView"] = self.instance_view(vm)
        return out

    def instance_view(self, vm: Resource) -> dict[str, Any]:
        state = vm.state
        statuses: list[dict[str, Any]] = [
            {
                "code": f"ProvisioningState/{state.lower()}",
                "level": "Error" if state == "Failed" else "Info",
                "displayStatus": f"Provisioning {state.lower()}",
                "time": vm.extra.get("state_time", now_text()),
            }
        ]
        failed = vm.extra.get("alloc_failed")
        if state == "Failed" and failed:
            statuses[0]["code"] = f"ProvisioningState/failed/{failed}"
            statuses[0]["message"] = ALLOCATION_MESSAGES.get(failed, failed)
        else:
            power = vm.extra["power"]
            statuses.append(
                {
                    "code": f"PowerState/{power}",
                    "level": "Info",
                    "displayStatus": _POWER_TEXT[power],
                }
            )
        out: dict[str, Any] = {
            "computerName": vm.props.get("osProfile", {}).get("computerName"),
            "osName": "ubuntu",
            "osVersion": "22.04",
            "statuses": statuses,
            "disks": [
                {
                    "name": vm.props["storageProfile"]["osDisk"]["name"],
                    "statuses": [
                        {
                            "code": "ProvisioningState/succeeded",
                            "level": "Info",
                            "displayStatus": "Provisioning succeeded",
                        }
                    ],
                }
            ],
            "hyperVGeneration": "V2",
        }
        if vm.extra["power"] == "running":
            out["vmAgent"] = {
                "vmAgentVersion": "2.9.1.1",
                "statuses": [
                    {
                        "code": "ProvisioningState/succeeded",
                        "level": "Info",
                        "displayStatus": "Ready",
                        "message": "Guest Agent is running",
                    }
                ],
            }
        return out


# -- handlers ---------------------------------------------------------------------------------


def _compute(ctx: Ctx) -> Compute:
    return ctx.server.compute


def _vm(ctx: Ctx) -> Resource:
    t = ctx.target
    assert t.sub and t.rg and t.name
    return ctx.server.store.get(t.sub, t.rg, VM, t.name)


def _expand_view(ctx: Ctx) -> bool:
    return "instanceview" in (ctx.query.get("$expand") or "").lower()


@handles(VM, "get")
def get_vm(ctx: Ctx) -> Reply:
    return Reply(200, _compute(ctx).answer(_vm(ctx), _expand_view(ctx)))


@handles(VM, "get:instanceView")
def get_instance_view(ctx: Ctx) -> Reply:
    return Reply(200, _compute(ctx).instance_view(_vm(ctx)))


@handles(USAGES, "list:get")
def list_usages(ctx: Ctx) -> Reply:
    """A location's compute usages and limits, `server.usage_page_size` to a page (None:
    one page) with a nextLink carrying `$skiptoken`, as the SDK's pager follows it."""
    t = ctx.target
    assert t.location is not None
    rows = _compute(ctx).usages(t.location)
    size = ctx.server.usage_page_size
    if size is None:
        return Reply(200, {"value": rows})
    start = int(ctx.query.get("$skiptoken") or 0)
    body: dict[str, Any] = {"value": rows[start : start + size]}
    if start + size < len(rows):
        body["nextLink"] = (
            f"{ctx.server.url}{ctx.call.path}?api-version={ctx.api_version}"
            f"&$skiptoken={start + size}"
        )
    return Reply(200, body)


@handles(VM, "list:get")
def list_vms(ctx: Ctx) -> Reply:
    from fakes.azure.resources import matches, parse_filter

    t = ctx.target
    store = ctx.server.store
    if t.sub is not None and t.rg is not None:
        store.group(t.sub, t.rg)
    clauses = parse_filter(ctx.query.get("$filter"))
    view = _expand_view(ctx) or (ctx.query.get("statusOnly") or "").lower() == "true"
    vms = [v for v in store.of_kind(VM, t.sub, t.rg) if matches(v.body, clauses)]
    return Reply(200, {"value": [_compute(ctx).answer(v, view) for v in vms]})


def _image(storage: dict[str, Any]) -> dict[str, Any]:
    image = dict(storage.get("imageReference") or {})
    if not image:
        raise ArmError(
            400,
            "InvalidParameter",
            "Required parameter 'imageReference' is missing (null).",
            target="imageReference",
        )
    if not image.get("id") and not all(image.get(k) for k in ("publisher", "offer", "sku")):
        raise ArmError(
            400,
            "InvalidParameter",
            "The platform image reference must name publisher, offer and sku.",
            target="imageReference",
        )
    if not image.get("id"):
        image.setdefault("version", "latest")
        image["exactVersion"] = (
            "22.04.202411010" if image["version"] == "latest" else image["version"]
        )
    return image


def _validate_vm(  # noqa: PLR0915 (one check after another)
    ctx: Ctx, body: dict[str, Any], existing: Resource | None
) -> dict[str, Any]:
    server = ctx.server
    store = server.store
    props = body.get("properties") or {}
    hardware = props.get("hardwareProfile") or (
        existing.props["hardwareProfile"] if existing else {}
    )
    if not hardware.get("vmSize"):
        raise ArmError(
            400,
            "InvalidParameter",
            "Required parameter 'hardwareProfile.vmSize' is missing.",
            target="vmSize",
        )
    size = _compute(ctx)._size(hardware["vmSize"])
    zones = list(body.get("zones") or [])
    if len(zones) > 1 or any(z not in ("1", "2", "3") for z in zones):
        raise ArmError(
            400,
            "InvalidParameter",
            f"The zones {zones} are not valid: give one of 1, 2, 3.",
            target="zones",
        )
    priority = props.get("priority") or "Regular"
    if priority not in ("Regular", "Spot", "Low"):
        raise ArmError(
            400, "InvalidParameter", f"Priority '{priority}' is not valid.", target="priority"
        )
    if priority == "Low":
        priority = "Spot"
    # An empty evictionPolicy is taken as none (Ray's VM template sends '' for Regular VMs).
    eviction = props.get("evictionPolicy") or None
    if priority == "Spot":
        eviction = eviction or "Deallocate"
        if eviction not in ("Deallocate", "Delete"):
            raise ArmError(
                400,
                "InvalidParameter",
                f"Eviction policy '{eviction}' is not valid.",
                target="evictionPolicy",
            )
        max_price = (props.get("billingProfile") or {}).get("maxPrice", -1)
        if max_price is not None and max_price != -1 and max_price <= 0:
            raise ArmError(
                400,
                "InvalidParameter",
                "billingProfile.maxPrice must be -1 or a positive price.",
                target="maxPrice",
            )
    elif eviction is not None:
        raise ArmError(
            400,
            "InvalidParameter",
            "evictionPolicy can be set only on Spot virtual machines.",
            target="evictionPolicy",
        )
    if existing is None:
        network = props.get("networkProfile") or {}
        nics = network.get("networkInterfaces") or []
        if network.get("networkInterfaceConfigurations"):
            raise ArmError(
                400,
                "InvalidParameter",
                "networkInterfaceConfigurations are not modelled by the fake ARM: create NICs and reference them.",
            )
        if not nics:
            raise ArmError(
                400,
                "InvalidParameter",
                "Required parameter 'networkProfile.networkInterfaces' is missing.",
                target="networkInterfaces",
            )
        if (
            len(nics) > 1
            and sum(1 for n in nics if (n.get("properties") or {}).get("primary")) != 1
        ):
            raise ArmError(
                400,
                "VirtualMachineMustHaveOnePrimaryNetworkInterface",
                "Virtual machine must have exactly one primary network interface.",
            )
        for item in nics:
            nic = store.find(item.get("id", ""))
            if nic is None or nic.kind != NIC:
                raise ArmError(400, "NotFound", f"Resource {item.get('id')} not found.")
            if nic.extra.get("vm"):
                raise ArmError(
                    400,
                    "NicInUse",
                    f"Network Interface {nic.id} is used by existing resource {nic.extra['vm']}. In order to use the network interface, it must be dissociated from the resource.",
                )
            if str(nic.body.get("location")).lower() != location_of(ctx, body):
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"The network interface {nic.id} must be in the location of the virtual machine.",
                )
        os_profile = props.get("osProfile") or {}
        if not os_profile.get("adminUsername"):
            raise ArmError(
                400,
                "InvalidParameter",
                "Required parameter 'osProfile.adminUsername' is missing (null).",
                target="adminUsername",
            )
        if str(os_profile["adminUsername"]).lower() in RESERVED_ADMIN_USERS:
            raise ArmError(
                400,
                "InvalidParameter",
                "The Admin Username specified is not allowed.",
                target="adminUsername",
            )
        custom = os_profile.get("customData")
        if custom:
            try:
                base64.b64decode(custom, validate=True)
            except ValueError as error:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    "customData must be base64-encoded.",
                    target="customData",
                ) from error
        _image(props.get("storageProfile") or {})
    identity = body.get("identity")
    if identity:
        kind = identity.get("type", "None")
        if "UserAssigned" in kind:
            for mi_id in identity.get("userAssignedIdentities") or {}:
                if store.find(mi_id) is None:
                    raise ArmError(
                        400,
                        "FailedIdentityOperation",
                        f"Identity (/{mi_id.strip('/')}) does not exist or is not usable (fake ARM).",
                    )
        if "SystemAssigned" in kind:
            raise ArmError(
                400,
                "InvalidParameter",
                "System-assigned identities are not modelled by the fake ARM.",
            )
    return {"size": size, "zones": zones, "priority": priority, "eviction": eviction}


@handles(VM, "put")
def put_vm(ctx: Ctx) -> Reply:  # noqa: PLR0915 (builds the whole VM document)
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    comp = server.compute
    store = server.store
    store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    location = location_of(ctx, body)
    existing = store.maybe(t.sub, t.rg, VM, t.name)
    if existing is not None and existing.state == "Deleting":
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Operation 'PUT' is not allowed on VM '{existing.name}' since the VM is marked for deletion.",
        )
    checked = _validate_vm(ctx, body, existing)
    size, zones = checked["size"], checked["zones"]
    zone = zones[0] if zones else None
    if existing is not None:
        return _update_vm(ctx, existing, body, checked)
    comp.check_offered(size, location, zone)
    comp.check_quota(size, checked["priority"] == "Spot", location, None)
    props = body.get("properties") or {}
    storage = props.get("storageProfile") or {}
    os_disk_in = dict(storage.get("osDisk") or {})
    disk_name = os_disk_in.get("name") or f"{t.name}_OsDisk_1_{uuid.uuid4().hex}"
    disk_id = resource_id(t.sub, t.rg, DISK, disk_name)
    if store.find(disk_id) is not None:
        raise ArmError(
            409,
            "ResourceExists",
            f"Disk {disk_name} already exists in resource group {t.rg}. Only CreateOption.Attach is supported.",
        )
    account = (os_disk_in.get("managedDisk") or {}).get("storageAccountType") or "Premium_LRS"
    os_disk = {
        "osType": "Linux",
        "name": disk_name,
        "createOption": os_disk_in.get("createOption", "FromImage"),
        "caching": os_disk_in.get("caching", "ReadWrite"),
        "managedDisk": {"storageAccountType": account, "id": disk_id},
        "deleteOption": os_disk_in.get("deleteOption", "Detach"),
        "diskSizeGB": int(os_disk_in.get("diskSizeGB") or 30),
    }
    os_profile = dict(props.get("osProfile") or {})
    custom = os_profile.pop("customData", None)
    os_profile.pop("adminPassword", None)
    os_profile.setdefault("computerName", t.name)
    os_profile.setdefault("secrets", [])
    os_profile.setdefault("allowExtensionOperations", True)
    os_profile["requireGuestProvisionSignal"] = True
    linux = os_profile.setdefault("linuxConfiguration", {})
    linux.setdefault("disablePasswordAuthentication", True)
    linux.setdefault("provisionVMAgent", True)
    nics: list[dict[str, Any]] = []
    for index, item in enumerate(
        (props.get("networkProfile") or {}).get("networkInterfaces") or []
    ):
        nic = store.find(item["id"])
        assert nic is not None  # _validate_vm found each NIC
        nic_props = dict(item.get("properties") or {})
        nic_props.setdefault("primary", index == 0)
        nic_props.setdefault("deleteOption", "Detach")
        nics.append({"id": nic.id, "properties": nic_props})
    res = new_resource(ctx, {})
    vm_props: dict[str, Any] = {
        "vmId": str(uuid.uuid4()),
        "hardwareProfile": {"vmSize": size.name},
        "storageProfile": {
            "imageReference": _image(storage),
            "osDisk": os_disk,
            "dataDisks": [],
            "diskControllerType": "SCSI",
        },
        "osProfile": os_profile,
        "networkProfile": {"networkInterfaces": nics},
        "priority": checked["priority"],
        "provisioningState": "Creating",
        "timeCreated": now_text(),
    }
    if checked["priority"] == "Spot":
        vm_props["evictionPolicy"] = checked["eviction"]
        vm_props["billingProfile"] = {
            "maxPrice": (props.get("billingProfile") or {}).get("maxPrice", -1)
        }
    for key in ("diagnosticsProfile", "securityProfile", "userData"):
        if props.get(key) is not None:
            vm_props[key] = props[key]
    res.body.update(
        {"location": location, "tags": tags_of(body), "properties": vm_props, "etag": f'"{1}"'}
    )
    if zones:
        res.body["zones"] = zones
    if body.get("identity"):
        identity = body["identity"]
        res.body["identity"] = {
            "type": identity.get("type"),
            "userAssignedIdentities": {k: {} for k in identity.get("userAssignedIdentities") or {}},
        }
    res.extra.update(
        {"power": "starting", "ready": False, "machine_on": False, "incarnation": 1, "events": []}
    )
    if custom:
        res.extra["custom_data"] = base64.b64decode(custom)
    capacity = comp.capacity_error(size, zone, None)
    if capacity is not None:
        res.extra["alloc_pending"] = capacity
    store.add(res)
    disk = Resource(
        disk_id,
        DISK,
        t.sub,
        t.rg,
        disk_name,
        {
            "id": disk_id,
            "name": disk_name,
            "type": DISK,
            "location": location,
            "tags": {},
            "managedBy": res.id,
            "sku": {"name": account, "tier": account.split("_")[0]},
            "properties": {
                "osType": "Linux",
                "hyperVGeneration": "V2",
                "creationData": {
                    "createOption": "FromImage",
                    "imageReference": {
                        "id": _image_id(location, vm_props["storageProfile"]["imageReference"])
                    },
                },
                "diskSizeGB": os_disk["diskSizeGB"],
                "diskState": "Attached",
                "provisioningState": "Succeeded",
                "timeCreated": now_text(),
                "uniqueId": str(uuid.uuid4()),
            },
        },
    )
    if zones:
        disk.body["zones"] = zones
    store.add(disk)
    for item in nics:
        attached = store.find(item["id"])
        assert attached is not None
        attached.extra["vm"] = res.id
        attached.props["macAddress"] = _mac()
        attached.props["primary"] = bool(item["properties"].get("primary"))
    op = server.begin(ctx, res.id, location)

    def work(op_: Operation) -> None:
        if store.find(res.id) is not res:
            server.ops.succeed(op_)
            return
        error = res.extra.pop("alloc_pending", None)
        if error is not None:
            _failed(res, error)
            server.ops.fail(op_, error)
            return
        comp._boot(res, op_)

    def fault(error: ArmError) -> None:
        res.extra.pop("alloc_pending", None)
        _failed(res, error)

    server.run_op(ctx, op, work, fault)
    return Reply(201, comp.answer(res), server.lro_headers(ctx, op, False))


def _failed(vm: Resource, error: ArmError) -> None:
    vm.state = "Failed"
    vm.extra["alloc_failed"] = error.code
    vm.extra["power"] = "deallocated"
    vm.extra["ready"] = False


def _image_id(location: str, image: dict[str, Any]) -> str:
    if image.get("id"):
        return str(image["id"])
    return (
        f"/Subscriptions/fake/Providers/Microsoft.Compute/Locations/{location}/Publishers/"
        f"{image['publisher']}/ArtifactTypes/VMImage/Offers/{image['offer']}/Skus/{image['sku']}/"
        f"Versions/{image.get('exactVersion', image.get('version'))}"
    )


def _mac() -> str:
    raw = uuid.uuid4().bytes[:3]
    return "00-0D-3A-" + "-".join(f"{b:02X}" for b in raw)


def _update_vm(ctx: Ctx, vm: Resource, body: dict[str, Any], checked: dict[str, Any]) -> Reply:
    """A PUT of an existing VM: tags, size (while deallocated or stopped) and identity."""
    if "tags" in body:
        vm.body["tags"] = tags_of(body)
    new_size = checked["size"].name
    if new_size != vm.props["hardwareProfile"]["vmSize"]:
        if vm.extra["power"] not in ("deallocated", "stopped") and vm.state != "Failed":
            raise ArmError(
                409,
                "OperationNotAllowed",
                "Changing the VM size of a running VM is not modelled by the fake ARM: deallocate it first.",
            )
        vm.props["hardwareProfile"]["vmSize"] = new_size
    if body.get("identity"):
        identity = body["identity"]
        vm.body["identity"] = {
            "type": identity.get("type"),
            "userAssignedIdentities": {k: {} for k in identity.get("userAssignedIdentities") or {}},
        }
    return _begin_update(ctx, vm)


def _begin_update(ctx: Ctx, vm: Resource) -> Reply:
    server = ctx.server
    before = vm.state
    vm.state = "Updating"
    op = server.begin(ctx, vm.id, vm.body.get("location"))

    def work(op_: Operation) -> None:
        if vm.state == "Updating":
            vm.state = "Succeeded" if before != "Failed" else "Failed"
        server.ops.succeed(op_)

    server.run_op(ctx, op, work, lambda _: None)
    return Reply(200, server.compute.answer(vm), server.lro_headers(ctx, op, False))


@handles(VM, "patch")
def patch_vm(ctx: Ctx) -> Reply:
    vm = _vm(ctx)
    body = ctx.body or {}
    if vm.state == "Deleting":
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Operation 'PATCH' is not allowed on VM '{vm.name}' since the VM is marked for deletion.",
        )
    if "tags" in body:
        vm.body["tags"] = tags_of(body)
    size = ((body.get("properties") or {}).get("hardwareProfile") or {}).get("vmSize")
    if size:
        checked = {"size": _compute(ctx)._size(size)}
        return _update_vm(ctx, vm, {}, checked)
    return _begin_update(ctx, vm)


@handles(VM, "delete")
def delete_vm(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    server.store.group(t.sub, t.rg)
    vm = server.store.maybe(t.sub, t.rg, VM, t.name)
    if vm is None:
        return Reply(204)
    comp = server.compute
    if ctx.op_fault is not None:
        return begin_delete(ctx, vm, lambda: None)
    op = server.begin(ctx, vm.id, vm.body.get("location"))
    if vm.state != "Deleting":
        vm.state = "Deleting"

        def gone() -> None:
            comp._cascade(vm)
            server.ops.succeed(op)

        comp._halt(vm, "deallocated", gone)
    else:
        _when_gone(server, vm, op)
    return Reply(202, None, server.lro_headers(ctx, op, True))


def _when_gone(server: AzureServer, vm: Resource, op: Operation) -> None:
    def check() -> None:
        if server.store.find(vm.id) is not vm:
            server.ops.succeed(op)
        else:
            server.later(0.05, check)

    server.later(0.05, check)


def _action(ctx: Ctx, name: str, act: Callable[[Resource, Operation], None]) -> Reply:
    server = ctx.server
    vm = _vm(ctx)
    if vm.state == "Deleting":
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Operation '{name}' is not allowed on VM '{vm.name}' since the VM is marked for deletion. You can only retry the Delete operation (or wait for an ongoing one to complete).",
        )
    op = server.begin(ctx, vm.id, vm.body.get("location"))
    if ctx.op_fault is not None:
        server.run_op(ctx, op, lambda _: None)
    else:
        act(vm, op)
    return Reply(202, None, server.lro_headers(ctx, op, True))


@handles(VM, "post:start")
def start_vm(ctx: Ctx) -> Reply:
    server = ctx.server
    comp = server.compute
    vm = _vm(ctx)
    size = comp._size(vm.props["hardwareProfile"]["vmSize"])
    zones = vm.body.get("zones") or [None]
    if vm.extra["power"] == "deallocated" and vm.state != "Deleting":
        comp.check_quota(size, vm.props.get("priority") == "Spot", str(vm.body.get("location")), vm)

    def act(vm: Resource, op: Operation) -> None:
        power = vm.extra["power"]
        if power in ("starting", "running") and vm.extra.get("ready"):
            server.later(server.lro_s, lambda: server.ops.succeed(op))
            return
        if power in ("stopping", "deallocating"):
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'start' is not allowed on VM '{vm.name}' since the VM is {power}.",
            )
        error = comp.capacity_error(size, zones[0], vm) if power == "deallocated" else None
        if error is not None:
            server.later(server.lro_s, lambda: server.ops.fail(op, error))
            return
        if vm.state == "Failed":
            vm.state = "Succeeded"
            vm.extra.pop("alloc_failed", None)
        vm.extra["power"] = "starting"
        server.later(server.lro_s, lambda: comp._boot(vm, op))

    return _action(ctx, "start", act)


def _stop(ctx: Ctx, name: str, power: str) -> Reply:
    server = ctx.server
    comp = server.compute

    def act(vm: Resource, op: Operation) -> None:
        if vm.extra["power"] == power or (
            power == "stopped" and vm.extra["power"] == "deallocated"
        ):
            server.later(server.lro_s, lambda: server.ops.succeed(op))
            return
        if power == "deallocated" and vm.state == "Failed":
            vm.extra["power"] = "deallocated"
            server.later(server.lro_s, lambda: server.ops.succeed(op))
            return
        comp._halt(vm, power, lambda: server.ops.succeed(op))

    return _action(ctx, name, act)


@handles(VM, "post:powerOff")
def power_off_vm(ctx: Ctx) -> Reply:
    return _stop(ctx, "powerOff", "stopped")


@handles(VM, "post:deallocate")
def deallocate_vm(ctx: Ctx) -> Reply:
    return _stop(ctx, "deallocate", "deallocated")


@handles(VM, "post:restart")
def restart_vm(ctx: Ctx) -> Reply:
    server = ctx.server
    comp = server.compute
    vm = _vm(ctx)
    if vm.extra["power"] != "running":
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Operation 'restart' is not allowed on VM '{vm.name}' since the VM is {vm.extra['power']}.",
        )

    def act(vm: Resource, op: Operation) -> None:
        comp._halt(vm, "stopped", lambda: comp._boot(vm, op))

    return _action(ctx, "restart", act)


@handles(VM, "post:simulateEviction")
def simulate_eviction(ctx: Ctx) -> Reply:
    vm = _vm(ctx)
    if vm.props.get("priority") != "Spot":
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Simulate Eviction is only supported for Spot virtual machines; '{vm.name}' is not one.",
        )
    if vm.extra["power"] not in ("starting", "running"):
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Simulate Eviction is not allowed on VM '{vm.name}' since it is {vm.extra['power']}.",
        )
    ctx.server.compute.evict(vm.name, ctx.server.eviction_notice_s)
    return Reply(204)


# -- disks ----------------------------------------------------------------------------------


@handles(DISK, "get")
def get_disk(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    return Reply(200, ctx.server.store.get(t.sub, t.rg, DISK, t.name).answer())


@handles(DISK, "list:get")
def list_disks(ctx: Ctx) -> Reply:
    t = ctx.target
    if t.sub is not None and t.rg is not None:
        ctx.server.store.group(t.sub, t.rg)
    return Reply(200, {"value": [d.answer() for d in ctx.server.store.of_kind(DISK, t.sub, t.rg)]})


@handles(DISK, "delete")
def delete_disk(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    store = ctx.server.store
    store.group(t.sub, t.rg)
    disk = store.maybe(t.sub, t.rg, DISK, t.name)
    if disk is None:
        return Reply(204)
    if disk.body.get("managedBy"):
        raise ArmError(
            409,
            "OperationNotAllowed",
            f"Disk {disk.name} is attached to VM {disk.body['managedBy']}.",
        )
    return begin_delete(ctx, disk, lambda: store.remove(disk))
