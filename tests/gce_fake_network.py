"""Firewalls, the `default` network and its subnetworks (one per region, covering the
region's 127.17.x.y block) of tests/gce_fake.py's Compute."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests import gce_fake_catalog as catalog
from tests.gce_fake_compute import now_text
from tests.gce_fake_faults import Call, GoogleError, invalid, not_found
from tests.gce_fake_filter import check_name

if TYPE_CHECKING:
    from tests.gce_fake_compute import Compute


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
