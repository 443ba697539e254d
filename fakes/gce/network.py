"""Firewalls, the `default` network and its subnetworks (one per region, covering the
region's 127.17.x.y block) of fakes/gce/server.py's Compute."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fakes.gce import catalog
from fakes.gce.compute import now_text
from fakes.gce.faults import Call, GoogleError, invalid, not_found
from fakes.gce.filter import check_name, compile_filter

if TYPE_CHECKING:
    from fakes.gce.compute import Compute


def insert_firewall(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    body = dict(call.body) if isinstance(call.body, dict) else {}
    name = check_name(body.get("name"))
    if name in compute.firewalls:
        raise GoogleError(
            409,
            "alreadyExists",
            f"The resource 'projects/{compute.project}/global/firewalls/{name}' already exists",
        )
    network = str(body.get("network") or "global/networks/default")
    if network.rpartition("/")[2] != "default":
        raise not_found(f"projects/{compute.project}/global/networks/{network.rpartition('/')[2]}")
    if not body.get("allowed") and not body.get("denied"):
        raise invalid(
            "Invalid value for field 'resource.allowed': ''. Rule must have an allowed or denied field."
        )
    rule = {
        "kind": "compute#firewall",
        "id": str(next(compute._ids)),
        "creationTimestamp": now_text(),
        "direction": "INGRESS",
        "priority": 1000,
        "sourceRanges": ["0.0.0.0/0"],
        "logConfig": {"enable": False},
        "disabled": False,
        **body,
        "name": name,
        "network": compute.url("global/networks/default"),
        "selfLink": compute.url(f"global/firewalls/{name}"),
    }

    def act(op: dict[str, Any]) -> None:
        compute.firewalls[name] = rule
        compute.server.later(compute.timings.operation, lambda: compute.finish(op))

    return compute.mutate(call, "insert", rule["selfLink"], rule["id"], None, act)


def _firewall(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    name = call.params.get("firewall", "")
    if name not in compute.firewalls:
        raise not_found(f"projects/{compute.project}/global/firewalls/{name}")
    return compute.firewalls[name]


def get_firewall(compute: Compute, call: Call) -> dict[str, Any]:
    return _firewall(compute, call)


def list_firewalls(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    return compute._list(
        call, list(compute.firewalls.values()), "compute#firewallList", "global/firewalls"
    )


# Fields a patch may change (name, network and direction are fixed once made).
_PATCHABLE = (
    "allowed",
    "denied",
    "description",
    "sourceRanges",
    "sourceTags",
    "targetTags",
    "destinationRanges",
    "priority",
    "disabled",
    "logConfig",
)


def patch_firewall(compute: Compute, call: Call) -> dict[str, Any]:
    """PATCH: the body's fields replace the rule's (a list whole), as GCE merges them."""
    rule = _firewall(compute, call)
    body = dict(call.body) if isinstance(call.body, dict) else {}
    for field in ("name", "direction"):
        if field in body and body[field] != rule.get(field):
            raise invalid(f"Invalid value for field 'resource.{field}': '{body[field]}'.")
    for ranges in body.get("sourceRanges") or ():
        if not re.fullmatch(r"[0-9a-fA-F:.]+(/[0-9]+)?", str(ranges)):
            raise invalid(f"Invalid value for field 'resource.sourceRanges[0]': '{ranges}'.")
    changes = {k: v for k, v in body.items() if k in _PATCHABLE}

    def act(op: dict[str, Any]) -> None:
        rule.update(changes)
        compute.server.later(compute.timings.operation, lambda: compute.finish(op))

    return compute.mutate(call, "patch", rule["selfLink"], rule["id"], None, act)


def delete_firewall(compute: Compute, call: Call) -> dict[str, Any]:
    rule = _firewall(compute, call)

    def act(op: dict[str, Any]) -> None:
        compute.firewalls.pop(rule["name"], None)
        compute.server.later(compute.timings.operation, lambda: compute.finish(op))

    return compute.mutate(call, "delete", rule["selfLink"], rule["id"], None, act)


def _network(compute: Compute) -> dict[str, Any]:
    return {
        "kind": "compute#network",
        "id": "5000000000000000001",
        "creationTimestamp": "2024-01-01T00:00:00.000-08:00",
        "name": "default",
        "description": "Default network for the project",
        "selfLink": compute.url("global/networks/default"),
        "autoCreateSubnetworks": True,
        "subnetworks": [compute.url(f"regions/{r}/subnetworks/default") for r in catalog.REGIONS],
        "routingConfig": {"routingMode": "REGIONAL"},
        "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
    }


def get_network(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    if call.params.get("network") != "default":
        raise not_found(f"projects/{compute.project}/global/networks/{call.params.get('network')}")
    return _network(compute)


def list_networks(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    return compute._list(call, [_network(compute)], "compute#networkList", "global/networks")


def subnet(compute: Compute, region: str) -> dict[str, Any]:
    block = catalog.region_block(region)
    return {
        "kind": "compute#subnetwork",
        "id": str(5000000000000000100 + list(catalog.REGIONS).index(region)),
        "creationTimestamp": "2024-01-01T00:00:00.000-08:00",
        "name": "default",
        "network": compute.url("global/networks/default"),
        "ipCidrRange": block,
        "gatewayAddress": block.replace(".0/21", ".1"),
        "region": compute.url(f"regions/{region}"),
        "selfLink": compute.url(f"regions/{region}/subnetworks/default"),
        "privateIpGoogleAccess": False,
        "stackType": "IPV4_ONLY",
        "purpose": "PRIVATE",
        "fingerprint": "yS8KfG6hK2Q=",
    }


def get_subnetwork(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    region = compute._region(call)
    if call.params.get("subnetwork") != "default":
        raise not_found(
            f"projects/{compute.project}/regions/{region}/subnetworks/{call.params.get('subnetwork')}"
        )
    return subnet(compute, region)


def list_subnetworks(compute: Compute, call: Call) -> dict[str, Any]:
    compute._project(call)
    region = compute._region(call)
    return compute._list(
        call, [subnet(compute, region)], "compute#subnetworkList", f"regions/{region}/subnetworks"
    )


def aggregated_subnetworks(compute: Compute, call: Call) -> dict[str, Any]:
    """Every region's subnetworks, as `items` keyed `regions/REGION` (a region without one
    gets GCE's warning instead)."""
    compute._project(call)
    keep = compile_filter(call.params.get("filter"))
    items: dict[str, Any] = {}
    for region in catalog.REGIONS:
        found = [s for s in (subnet(compute, region),) if keep(s)]
        if found:
            items[f"regions/{region}"] = {"subnetworks": found}
        else:
            items[f"regions/{region}"] = {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": f"There are no results for scope 'regions/{region}' on this page.",
                    "data": [{"key": "scope", "value": f"regions/{region}"}],
                }
            }
    return {
        "kind": "compute#subnetworkAggregatedList",
        "id": f"projects/{compute.project}/aggregated/subnetworks",
        "items": items,
        "selfLink": compute.url("aggregated/subnetworks"),
    }
