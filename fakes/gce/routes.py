"""Which method a request to fakes/gce/server.py names (routes built from the discovery
documents googleapiclient ships) and which fake code answers it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fakes.gce import network
from fakes.gce.compute import Compute
from fakes.gce.faults import Call
from fakes.gce.iam import Iam

if TYPE_CHECKING:
    from fakes.gce.server import GceServer

DISCOVERY = Path(__import__("googleapiclient").__file__).parent / "discovery_cache" / "documents"
# API -> (discovery document, URL prefix on this server)
APIS = {
    "compute": ("compute.v1.json", "/compute/v1/"),
    "iam": ("iam.v1.json", "/iam/"),
    "cloudresourcemanager": ("cloudresourcemanager.v1.json", "/crm/"),
}


@dataclass(frozen=True)
class Route:
    api: str
    method: str  # discovery id
    http_method: str
    pattern: re.Pattern[str]  # matches the path after the API's prefix
    template: re.Pattern[str]  # the same path, giving the discovery parameters
    returns_operation: bool
    literal: int  # characters of fixed text: the most specific route wins


def _regex(template: str) -> re.Pattern[str]:
    out, last = [], 0
    for found in re.finditer(r"\{(\+?)([^}]+)\}", template):
        out.append(re.escape(template[last : found.start()]))
        name = re.sub(r"\W", "_", found.group(2))
        out.append(f"(?P<{name}>.+?)" if found.group(1) else f"(?P<{name}>[^/:]+)")
        last = found.end()
    out.append(re.escape(template[last:]))
    return re.compile("".join(out) + "$")


def _routes() -> list[Route]:
    routes = []

    def walk(api: str, resources: Mapping[str, Any]) -> None:
        for resource in resources.values():
            for method in resource.get("methods", {}).values():
                flat = method.get("flatPath") or method["path"]
                routes.append(
                    Route(
                        api,
                        method["id"],
                        method["httpMethod"],
                        _regex(flat),
                        _regex(method["path"]),
                        method.get("response", {}).get("$ref") == "Operation" and api == "compute",
                        len(re.sub(r"\{[^}]+\}", "", flat)),
                    )
                )
            walk(api, resource.get("resources", {}))

    for api, (document, _) in APIS.items():
        walk(api, json.loads((DISCOVERY / document).read_text())["resources"])
    routes.sort(key=lambda r: -r.literal)
    return routes


_ROUTES = _routes()


def find_route(verb: str, path: str) -> tuple[Route | None, dict[str, str]]:
    """The method a request names, and its parameters (from the path)."""
    for route in _ROUTES:
        prefix = APIS[route.api][1]
        if route.http_method != verb or not path.startswith(prefix):
            continue
        rest = path[len(prefix) :]
        if route.pattern.match(rest) and (found := route.template.match(rest)):
            return route, {k: unquote(v) for k, v in found.groupdict().items()}
    return None, {}


def _on_compute(method: Callable[[Any, Call], Any]) -> Callable[[GceServer, Call], Any]:
    return lambda server, call: method(server.compute, call)


def _on_iam(method: Callable[[Any, Call], Any]) -> Callable[[GceServer, Call], Any]:
    return lambda server, call: method(server.iam, call)


REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


def _handlers() -> dict[str, Callable[[GceServer, Call], Any]]:
    from fakes.gce import instance as catalog

    c = "compute."
    compute_methods = {
        "instances.insert": Compute.insert_instance,
        "instances.get": Compute.get_instance,
        "instances.list": Compute.list_instances,
        "instances.aggregatedList": Compute.aggregated_instances,
        "instances.delete": Compute.delete_instance,
        "instances.stop": Compute.stop_instance,
        "instances.start": Compute.start_instance,
        "instances.setLabels": Compute.set_labels,
        "instances.setMetadata": Compute.set_metadata,
        "zoneOperations.get": Compute.zone_operation,
        "zoneOperations.wait": Compute.wait_zone_operation,
        "zoneOperations.list": Compute.list_zone_operations,
        "globalOperations.get": Compute.global_operation,
        "globalOperations.wait": Compute.wait_global_operation,
        "firewalls.insert": network.insert_firewall,
        "firewalls.get": network.get_firewall,
        "firewalls.list": network.list_firewalls,
        "firewalls.delete": network.delete_firewall,
        "firewalls.patch": network.patch_firewall,
        "networks.get": network.get_network,
        "networks.list": network.list_networks,
        "subnetworks.get": network.get_subnetwork,
        "subnetworks.list": network.list_subnetworks,
        "subnetworks.aggregatedList": network.aggregated_subnetworks,
        "projects.get": Compute.get_project,
        "projects.setCommonInstanceMetadata": Compute.set_common_metadata,
    }
    table: dict[str, Callable[[GceServer, Call], Any]] = {
        c + name: _on_compute(method) for name, method in compute_methods.items()
    }
    catalog_methods = {
        "zones.get": catalog.get_zone,
        "zones.list": catalog.list_zones,
        "regions.get": catalog.get_region,
        "regions.list": catalog.list_regions,
        "machineTypes.get": catalog.get_machine_type,
        "machineTypes.list": catalog.list_machine_types,
        "acceleratorTypes.get": catalog.get_accelerator_type,
        "acceleratorTypes.list": catalog.list_accelerator_types,
        "images.get": catalog.get_image,
        "images.getFromFamily": catalog.get_image_from_family,
    }
    for name, function in catalog_methods.items():
        table[c + name] = _on_compute(function)
    iam_methods = {
        "iam.projects.serviceAccounts.get": Iam.get_account,
        "iam.projects.serviceAccounts.create": Iam.create_account,
        "iam.projects.serviceAccounts.list": Iam.list_accounts,
        "iam.projects.serviceAccounts.delete": Iam.delete_account,
        "iam.projects.serviceAccounts.getIamPolicy": Iam.get_account_policy,
        "iam.projects.serviceAccounts.setIamPolicy": Iam.set_account_policy,
        "cloudresourcemanager.projects.get": Iam.get_project,
        "cloudresourcemanager.projects.getIamPolicy": Iam.get_project_policy,
        "cloudresourcemanager.projects.setIamPolicy": Iam.set_project_policy,
        "cloudresourcemanager.projects.testIamPermissions": Iam.test_project_permissions,
    }
    for name, method in iam_methods.items():
        table[name] = _on_iam(method)
    return table


HANDLERS = _handlers()
