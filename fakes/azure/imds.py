"""Each fake VM's Instance Metadata Service (fakes/azure/server.py), plain HTTP at
http://127.0.0.1:IMDS_PORT/vm/{vmId}: the base URL a session on the VM finds in
AZURE_POD_IDENTITY_AUTHORITY_HOST (AzureHosts sets it; azure-identity's
ManagedIdentityCredential, through msal, appends /metadata/identity/oauth2/token).

Modelled: `GET /metadata/identity/oauth2/token?api-version&resource[&client_id|object_id|
msi_res_id]` (a token of one of the VM's user-assigned identities: the one named, or the
only one; 400 identity not found otherwise), `GET /metadata/scheduledevents` (the VM's
scheduled events document: DocumentIncarnation and Events, Preempt events from
`AzureServer.evict` / simulateEviction), `POST /metadata/scheduledevents` with
`{"StartRequests": [{"EventId": ...}]}` (approves events: they start at once),
`GET /metadata/instance[/compute|/network]` (the instance document). Every request needs
`Metadata: true` (400 otherwise) and an api-version (400). A stopped machine's IMDS still
answers (it is served by this process, not by the host).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fakes.azure.faults import Call

if TYPE_CHECKING:
    from fakes.azure.server import AzureServer

PREFIX = "/vm/"


def answer(server: AzureServer, environ: dict[str, Any]) -> tuple[int, Any]:
    path = environ.get("PATH_INFO", "")
    verb = environ.get("REQUEST_METHOD", "GET")
    query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    if not path.startswith(PREFIX):
        return 404, {"error": "not_found", "error_description": "no such path (fake IMDS)"}
    vm_id, _, rest = path[len(PREFIX) :].partition("/")
    rest = "/" + rest.rstrip("/")
    operation = {
        "/metadata/identity/oauth2/token": "imds.token",
        "/metadata/scheduledevents": "imds.scheduledevents" if verb == "GET" else "imds.ack",
    }.get(rest, "imds.instance" if rest.startswith("/metadata/instance") else "imds.other")
    with server.cond:
        vm = server.compute.find_vm(vm_id)
        name = vm.name if vm is not None else None
        call = Call(server.next_seq(), verb, path, query, None, operation, origin=name)
        status, body = _answer(server, vm, rest, verb, query, raw, environ)
        server.cond.notify_all()
    error = body.get("error") if isinstance(body, dict) and status >= 400 else None
    server.record(call, status, error if isinstance(error, str) else None, False)
    return status, body


def _answer(
    server: AzureServer,
    vm: Any,
    rest: str,
    verb: str,
    query: dict[str, str],
    raw: bytes,
    environ: dict[str, Any],
) -> tuple[int, Any]:
    if environ.get("HTTP_METADATA", "").lower() != "true":
        return 400, {
            "error": "invalid_request",
            "error_description": "Required metadata header not specified",
        }
    if vm is None:
        return 404, {"error": "not_found", "error_description": "no such VM (fake IMDS)"}
    if "api-version" not in query:
        return 400, {"error": "Bad request. api-version was not specified in the request"}
    if rest == "/metadata/identity/oauth2/token" and verb == "GET":
        return _token(server, vm, query)
    if rest == "/metadata/scheduledevents":
        if verb == "POST":
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return 400, {"error": "Bad request: the body is not JSON"}
            ids = [str(r.get("EventId")) for r in body.get("StartRequests") or []]
            server.compute.approve(vm, ids)
            return 200, ""
        return 200, {
            "DocumentIncarnation": vm.extra.get("incarnation", 1),
            "Events": [dict(e) for e in vm.extra.get("events", [])],
        }
    if rest.startswith("/metadata/instance") and verb == "GET":
        document = _instance(server, vm)
        part = rest[len("/metadata/instance") :].strip("/")
        for key in [p for p in part.split("/") if p]:
            if isinstance(document, dict) and key in document:
                document = document[key]
            elif isinstance(document, list) and key.isdigit() and int(key) < len(document):
                document = document[int(key)]
            else:
                return 404, {"error": "Not found"}
        if query.get("format") == "text" and not isinstance(document, (dict, list)):
            return 200, str(document)
        return 200, document
    return 404, {"error": "Not found"}


def _token(server: AzureServer, vm: Any, query: dict[str, str]) -> tuple[int, Any]:
    resource = query.get("resource")
    if not resource:
        return 400, {
            "error": "invalid_request",
            "error_description": "Required query variable 'resource' is missing",
        }
    principals = []
    for mi_id in server.compute.identity_ids(vm):
        mi = server.store.find(mi_id)
        if mi is not None:
            principal = server.tokens.principal(mi.props["principalId"])
            if principal is not None:
                principals.append(principal)
    wanted_client = query.get("client_id")
    wanted_object = query.get("object_id")
    wanted_res = query.get("msi_res_id") or query.get("mi_res_id")
    chosen = None
    for principal in principals:
        if wanted_client and principal.client_id.lower() != wanted_client.lower():
            continue
        if wanted_object and principal.object_id.lower() != wanted_object.lower():
            continue
        if wanted_res and (principal.identity_id or "").lower() != wanted_res.lower():
            continue
        chosen = principal
        break
    if chosen is None or (
        not (wanted_client or wanted_object or wanted_res) and len(principals) != 1
    ):
        return 400, {"error": "invalid_request", "error_description": "Identity not found"}
    token = server.tokens.issue(chosen, resource, origin=vm.name)
    now = int(time.time())
    expires_in = server.tokens.expires_in
    return 200, {
        "access_token": token,
        "client_id": chosen.client_id,
        "expires_in": str(expires_in),
        "expires_on": str(now + expires_in),
        "ext_expires_in": str(expires_in),
        "not_before": str(now),
        "resource": resource,
        "token_type": "Bearer",
    }


def _instance(server: AzureServer, vm: Any) -> dict[str, Any]:
    view = server.compute.view(vm)
    tags = view.tags
    zones = vm.body.get("zones") or [""]
    subnet_prefix = ""
    address = ""
    nics = server.compute.nics_of(vm)
    if nics:
        config = nics[0].props["ipConfigurations"][0]
        found = server.network.subnet(config["properties"]["subnet"]["id"])
        if found is not None:
            prefix = found[1]["properties"]["addressPrefix"]
            address, _, subnet_prefix = prefix.partition("/")
    return {
        "compute": {
            "azEnvironment": "AzurePublicCloud",
            "location": view.location,
            "name": view.name,
            "osType": "Linux",
            "priority": "Spot" if view.priority == "Spot" else "Regular",
            "provider": "Microsoft.Compute",
            "resourceGroupName": view.resource_group,
            "resourceId": view.id,
            "subscriptionId": server.subscription,
            "tags": ";".join(f"{k}:{v}" for k, v in tags.items()),
            "tagsList": [{"name": k, "value": v} for k, v in tags.items()],
            "vmId": view.vm_id,
            "vmSize": view.size,
            "zone": zones[0],
        },
        "network": {
            "interface": [
                {
                    "ipv4": {
                        "ipAddress": [
                            {
                                "privateIpAddress": view.private_ip or "",
                                "publicIpAddress": view.public_ips[0] if view.public_ips else "",
                            }
                        ],
                        "subnet": [{"address": address, "prefix": subnet_prefix}],
                    },
                    "ipv6": {"ipAddress": []},
                    "macAddress": str(nics[0].props.get("macAddress", "")).replace("-", "")
                    if nics
                    else "",
                }
            ]
        },
    }
