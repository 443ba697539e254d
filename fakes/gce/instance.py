"""The instance resource an insert makes (its validation, as GCE answers bad bodies), and the
read-only catalog methods (zones, regions, machine types, accelerator types, images) of
fakes/gce/server.py."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fakes.gce import catalog
from fakes.gce.compute import fingerprint, now_text, split_url
from fakes.gce.faults import Call, invalid, not_found
from fakes.gce.filter import check_labels, check_name

if TYPE_CHECKING:
    from fakes.gce.compute import Compute

_METADATA_KEY = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def check_metadata(body: dict[str, Any], field: str) -> list[dict[str, str]]:
    items = body.get("items") or []
    if not isinstance(items, list):
        raise invalid(f"Invalid value for field '{field}.items': must be a list.")
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.get("key") if isinstance(item, dict) else None
        if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key):
            raise invalid(f"Invalid value for field '{field}.items.key': '{key}'.")
        if key in seen:
            raise invalid(f"Invalid value for field '{field}': Duplicate keys: [{key}].")
        seen.add(key)
        out.append({"key": key, "value": str(item.get("value", ""))})
    return out


def resolve_machine_type(compute: Compute, zone: str, value: Any) -> catalog.MachineType:
    field = "resource.machineType"
    if not isinstance(value, str) or "/machineTypes/" not in f"/{value}":
        raise invalid(
            f"Invalid value for field '{field}': '{value}'. Invalid URL or missing 'machineTypes/'."
        )
    _, tail = split_url(value)
    found = re.fullmatch(r"zones/([^/]+)/machineTypes/([^/]+)", tail)
    if not found:
        raise invalid(f"Invalid value for field '{field}': '{value}'.")
    if found.group(1) != zone:
        raise invalid(
            f"Invalid value for field '{field}': '{value}'. Machine type must be in zone {zone}."
        )
    kind = catalog.machine_type(found.group(2))
    if kind is None:
        raise invalid(
            f"Invalid value for field '{field}': '{value}'. Machine type with name "
            f"'{found.group(2)}' does not exist in zone '{zone}'."
        )
    return kind


def resolve_image(compute: Compute, value: str) -> str:
    """The full URL of the image `value` names (an image or `.../family/NAME`), 404 if none."""
    project, tail = split_url(value)
    project = project or compute.project
    # gcloud 528 names a family's image as a zonal image family view: zones/-/imageFamilyViews/F
    family = re.fullmatch(r"(?:global/images/family|zones/[^/]+/imageFamilyViews)/([^/]+)", tail)
    image = re.fullmatch(r"global/images/([^/]+)", tail)
    name = None
    if family:
        name = catalog.image_for(project, family.group(1)) or compute.images.get(
            (project, family.group(1))
        )
    elif image and (
        catalog.family_of(project, image.group(1))
        or image.group(1) in {v for (p, _), v in compute.images.items() if p == project}
    ):
        name = image.group(1)
    if name is None:
        raise not_found(f"projects/{project}/{tail}")
    return compute.url(f"global/images/{name}", project)


def _scheduling(body: dict[str, Any], accelerated: bool) -> tuple[dict[str, Any], str | None]:
    given = body.get("scheduling") or {}
    if isinstance(given, list) and len(given) == 1:
        given = given[0]  # Ray's example configs write `scheduling: [{preemptible: true}]`
    if not isinstance(given, dict):
        raise invalid("Invalid value for field 'resource.scheduling': must be an object.")
    given = dict(given)
    model = given.get("provisioningModel", "STANDARD")
    if model not in ("STANDARD", "SPOT"):
        raise invalid(
            f"Invalid value for field 'resource.scheduling.provisioningModel': '{model}'."
        )
    reclaimable = model == "SPOT" or bool(given.get("preemptible"))
    scheduling: dict[str, Any] = {
        # GPUs do not change the default: GCE refuses them with MIGRATE (Ray's examples say to
        # set TERMINATE); spot and preemptible instances default to TERMINATE.
        "onHostMaintenance": "TERMINATE" if reclaimable else "MIGRATE",
        "automaticRestart": not reclaimable,
        "preemptible": bool(given.get("preemptible", False)),
        "provisioningModel": model,
        **given,
    }
    if reclaimable and scheduling["automaticRestart"]:
        raise invalid(
            "Invalid value for field 'resource.scheduling.automaticRestart': 'true'. "
            "Preemptible and Spot instances cannot be automatically restarted."
        )
    if (accelerated or reclaimable) and scheduling["onHostMaintenance"] == "MIGRATE":
        what = "guest accelerators" if accelerated else "Spot or preemptible VMs"
        raise invalid(f"Instances with {what} do not support live migration.")
    termination = None
    if reclaimable:
        termination = scheduling.setdefault("instanceTerminationAction", "STOP")
        if termination not in ("STOP", "DELETE"):
            raise invalid(
                f"Invalid value for field 'resource.scheduling.instanceTerminationAction': '{termination}'."
            )
    return scheduling, termination


def _interfaces(compute: Compute, zone: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    given = body.get("networkInterfaces")
    if not given or not isinstance(given, list):
        raise invalid(
            "Invalid value for field 'resource.networkInterfaces': ''. At least one network interface is required."
        )
    region = compute.zones[zone].region
    nic = dict(given[0])
    network = str(nic.get("network") or "global/networks/default").rpartition("/")[2]
    if network != "default":
        raise not_found(f"projects/{compute.project}/global/networks/{network}")
    subnet = str(nic.get("subnetwork") or f"regions/{region}/subnetworks/default")
    _, tail = split_url(subnet)
    if subnet.rpartition("/")[2] != "default" or (
        "regions/" in tail and not tail.startswith(f"regions/{region}/")
    ):
        raise not_found(f"projects/{compute.project}/{tail}")
    out: dict[str, Any] = {
        "kind": "compute#networkInterface",
        "name": "nic0",
        "network": compute.url("global/networks/default"),
        "subnetwork": compute.url(f"regions/{region}/subnetworks/default"),
        "networkIP": "",
        "stackType": "IPV4_ONLY",
        "fingerprint": "a8rRSZmVnqA=",
    }
    if nic.get("accessConfigs"):
        out["accessConfigs"] = [
            {
                "kind": "compute#accessConfig",
                "type": "ONE_TO_ONE_NAT",
                "name": config.get("name", "External NAT"),
                "natIP": "",
                "networkTier": config.get("networkTier", "PREMIUM"),
            }
            for config in nic["accessConfigs"][:1]
        ]
    return [out]


def _disks(compute: Compute, zone: str, name: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    disks = body.get("disks") or []
    boot = [d for d in disks if isinstance(d, dict) and d.get("boot")] or disks[:1]
    if not boot or not isinstance(boot[0], dict):
        raise invalid("Invalid value for field 'resource.disks': ''. Boot disk must be specified.")
    params = boot[0].get("initializeParams") or {}
    image = params.get("sourceImage")
    if not image and not boot[0].get("source"):
        raise invalid(
            "Invalid value for field 'resource.disks[0].initializeParams.sourceImage': ''. Source image must be specified."
        )
    licenses = []
    if image:
        resolved = resolve_image(compute, str(image))
        project = split_url(resolved)[0]
        licenses = [compute.url(f"global/licenses/{project}", project)]
    disk_name = params.get("diskName") or name
    return [
        {
            "kind": "compute#attachedDisk",
            "type": "PERSISTENT",
            "mode": "READ_WRITE",
            "source": compute.url(f"zones/{zone}/disks/{disk_name}"),
            "deviceName": boot[0].get("deviceName") or "persistent-disk-0",
            "index": 0,
            "boot": True,
            "autoDelete": boot[0].get("autoDelete", True),
            "licenses": licenses,
            "interface": "SCSI",
            "diskSizeGb": str(params.get("diskSizeGb") or 10),
            "architecture": "X86_64",
        }
    ]


def build_instance(
    compute: Compute, zone: str, body: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The instance resource for insert `body` in `zone` (networkIP filled in later), and
    its termination action (STOP/DELETE for spot/preemptible, else None)."""
    name = str(body["name"])
    kind = resolve_machine_type(compute, zone, body.get("machineType"))
    labels = check_labels(body.get("labels"), "resource.labels")
    items = check_metadata(body.get("metadata") or {}, "resource.metadata")
    accelerators = []
    for given in body.get("guestAccelerators") or []:
        accelerator = str(given.get("acceleratorType", "")).rpartition("/")[2]
        if accelerator not in catalog.ACCELERATORS:
            raise invalid(
                f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': '{accelerator}'."
            )
        accelerators.append(
            {
                "acceleratorType": compute.url(f"zones/{zone}/acceleratorTypes/{accelerator}"),
                "acceleratorCount": int(given.get("acceleratorCount", 1)),
            }
        )
    if kind.accelerator:
        accelerators = accelerators or [
            {
                "acceleratorType": compute.url(f"zones/{zone}/acceleratorTypes/{kind.accelerator}"),
                "acceleratorCount": kind.accelerator_count,
            }
        ]
    scheduling, termination = _scheduling(body, bool(accelerators))
    accounts = []
    for account in body.get("serviceAccounts") or []:
        email = account.get("email", "default")
        if email == "default":
            email = compute.server.default_compute_account
        elif not compute.server.iam.has_account(email):
            raise invalid(
                f"Invalid value for field 'resource.serviceAccounts[0].email': '{email}'. The user does not have access to service account '{email}'."
            )
        accounts.append({"email": email, "scopes": list(account.get("scopes") or [])})
    network_tags = [str(t) for t in (body.get("tags") or {}).get("items") or []]
    for tag in network_tags:
        check_name(tag, "resource.tags.items")
    res: dict[str, Any] = {
        "kind": "compute#instance",
        "id": str(next(compute._ids)),
        "creationTimestamp": now_text(),
        "name": name,
        "description": body.get("description", ""),
        "tags": {"items": network_tags, "fingerprint": fingerprint(network_tags)},
        "machineType": compute.url(f"zones/{zone}/machineTypes/{kind.name}"),
        "status": "PROVISIONING",
        "zone": compute.zone_url(zone),
        "canIpForward": bool(body.get("canIpForward", False)),
        "networkInterfaces": _interfaces(compute, zone, body),
        "disks": _disks(compute, zone, name, body),
        "metadata": {"kind": "compute#metadata", "fingerprint": fingerprint(items), "items": items},
        "serviceAccounts": accounts,
        "selfLink": compute.url(f"zones/{zone}/instances/{name}"),
        "scheduling": scheduling,
        "cpuPlatform": "Unknown CPU Platform",
        "labels": labels,
        "labelFingerprint": fingerprint(labels),
        "startRestricted": False,
        "deletionProtection": bool(body.get("deletionProtection", False)),
        "fingerprint": "Ly9ybJ0gM3U=",
        "lastStartTimestamp": None,
    }
    del res["lastStartTimestamp"]
    if accelerators:
        res["guestAccelerators"] = accelerators
    if not accounts:
        del res["serviceAccounts"]
    return res, termination


# -- catalog methods ------------------------------------------------------------------------


def _zone_resource(compute: Compute, zone: str) -> dict[str, Any]:
    region = compute.zones[zone].region
    return {
        "kind": "compute#zone",
        "id": str(2000 + list(compute.zones).index(zone)),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": zone,
        "description": zone,
        "status": "UP",
        "region": compute.url(f"regions/{region}"),
        "selfLink": compute.zone_url(zone),
        "availableCpuPlatforms": ["Intel Broadwell", "Intel Cascade Lake", "AMD Milan"],
        "supportsPzs": False,
    }


def get_zone(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    return _zone_resource(compute, compute._zone(call))


def list_zones(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    items = [_zone_resource(compute, z) for z in compute.zones]
    return compute._list(call, items, "compute#zoneList", "zones")


def _region_resource(compute: Compute, region: str) -> dict[str, Any]:
    return {
        "kind": "compute#region",
        "id": str(1000 + list(catalog.REGIONS).index(region)),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": region,
        "description": region,
        "status": "UP",
        "zones": [
            compute.zone_url(z) for z, info in compute.zones.items() if info.region == region
        ],
        "quotas": region_quotas(compute, region),
        "selfLink": compute.url(f"regions/{region}"),
        "supportsPzs": False,
    }


def region_quotas(compute: Compute, region: str) -> list[dict[str, Any]]:
    """The region's CPU quotas (`compute.region_limits`) with their usage: the vCPUs of its
    instances that are not TERMINATED, spot and preemptible ones under PREEMPTIBLE_CPUS
    where that limit is above 0 (as GCE counts them), all others under CPUS."""
    limits = compute.region_limits
    usage = dict.fromkeys(limits, 0.0)
    for vm in compute.vms.values():
        if compute.zones[vm.zone].region != region or vm.res.get("status") == "TERMINATED":
            continue
        kind = catalog.MACHINE_TYPES.get(str(vm.res.get("machineType", "")).rsplit("/", 1)[-1])
        spot = vm.termination is not None and limits.get("PREEMPTIBLE_CPUS", 0) > 0
        metric = "PREEMPTIBLE_CPUS" if spot else "CPUS"
        usage[metric] = usage.get(metric, 0.0) + (kind.cpus if kind else 0)
    return [
        {"metric": metric, "limit": float(limit), "usage": usage.get(metric, 0.0)}
        for metric, limit in limits.items()
    ]


def get_region(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    return _region_resource(compute, compute._region(call))


def list_regions(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    items = [_region_resource(compute, r) for r in catalog.REGIONS]
    return compute._list(call, items, "compute#regionList", "regions")


def _machine_type_resource(
    compute: Compute, zone: str, kind: catalog.MachineType
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "kind": "compute#machineType",
        "id": str(abs(hash(kind.name)) % 10**10),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": kind.name,
        "description": f"{kind.cpus} vCPUs, {kind.memory_mb / 1024:g} GB RAM",
        "guestCpus": kind.cpus,
        "memoryMb": kind.memory_mb,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "selfLink": compute.url(f"zones/{zone}/machineTypes/{kind.name}"),
        "isSharedCpu": kind.shared_cpu,
        "architecture": "X86_64",
    }
    if kind.accelerator:
        res["accelerators"] = [
            {
                "guestAcceleratorType": kind.accelerator,
                "guestAcceleratorCount": kind.accelerator_count,
            }
        ]
    return res


def get_machine_type(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    zone = compute._zone(call)
    name = call.params.get("machineType", "")
    kind = catalog.machine_type(name)
    if kind is None:
        raise not_found(f"projects/{compute.project}/zones/{zone}/machineTypes/{name}")
    return _machine_type_resource(compute, zone, kind)


def list_machine_types(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    zone = compute._zone(call)
    items = [_machine_type_resource(compute, zone, k) for k in catalog.MACHINE_TYPES.values()]
    return compute._list(call, items, "compute#machineTypeList", f"zones/{zone}/machineTypes")


def _accelerator_resource(compute: Compute, zone: str, name: str) -> dict[str, Any]:
    return {
        "kind": "compute#acceleratorType",
        "id": str(abs(hash(name)) % 10**10),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": name,
        "description": catalog.ACCELERATORS[name],
        "zone": compute.zone_url(zone),
        "selfLink": compute.url(f"zones/{zone}/acceleratorTypes/{name}"),
        "maximumCardsPerInstance": 8,
    }


def get_accelerator_type(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    zone = compute._zone(call)
    name = call.params.get("acceleratorType", "")
    if name not in catalog.ACCELERATORS:
        raise not_found(f"projects/{compute.project}/zones/{zone}/acceleratorTypes/{name}")
    return _accelerator_resource(compute, zone, name)


def list_accelerator_types(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    zone = compute._zone(call)
    items = [_accelerator_resource(compute, zone, n) for n in catalog.ACCELERATORS]
    return compute._list(
        call, items, "compute#acceleratorTypeList", f"zones/{zone}/acceleratorTypes"
    )


def _image_resource(
    compute: Compute, project: str, name: str, family: str | None
) -> dict[str, Any]:
    res = {
        "kind": "compute#image",
        "id": str(abs(hash((project, name))) % 10**18),
        "creationTimestamp": "2025-06-10T00:00:00.000-07:00",
        "name": name,
        "sourceType": "RAW",
        "status": "READY",
        "archiveSizeBytes": "1000000000",
        "diskSizeGb": "10",
        "licenses": [compute.url(f"global/licenses/{project}", project)],
        "selfLink": compute.url(f"global/images/{name}", project),
        "labelFingerprint": "42WmSpB8rSM=",
        "guestOsFeatures": [
            {"type": "VIRTIO_SCSI_MULTIQUEUE"},
            {"type": "UEFI_COMPATIBLE"},
            {"type": "GVNIC"},
        ],
        "architecture": "X86_64",
    }
    if family:
        res["family"] = family
    return res


def get_image_from_family(compute: Compute, call: Call) -> dict[str, Any]:
    project, family = call.params.get("project", ""), call.params.get("family", "")
    url = resolve_image(compute, f"projects/{project}/global/images/family/{family}")
    return _image_resource(compute, project, url.rpartition("/")[2], family)


def get_image(compute: Compute, call: Call) -> dict[str, Any]:
    project, image = call.params.get("project", ""), call.params.get("image", "")
    url = resolve_image(compute, f"projects/{project}/global/images/{image}")
    name = url.rpartition("/")[2]
    family = catalog.family_of(project, name) or next(
        (f for (p, f), v in compute.images.items() if p == project and v == name), None
    )
    return _image_resource(compute, project, name, family)
