"""Each fake GCE instance's metadata server (fakes/gce/server.py), at
http://127.0.0.1:PORT/meta/INSTANCE_ID: what a process on the instance reads through
GCE_METADATA_HOST / GCE_METADATA_IP (google-auth) and GCE_METADATA_ROOT (gcloud), which
GceHosts sets in every session of the instance's host.

Modelled: the ping (GET of the root, answered with `Metadata-Flavor: Google`); under
computeMetadata/v1/: instance/{id,name,hostname,zone,machine-type}, network-interfaces/0/ip
and its access config's external-ip, instance/attributes/ (the instance's metadata: one key,
or all with ?recursive=true), project/{project-id,numeric-project-id}, project/attributes/,
instance/service-accounts/ (`default` and the instance's account: email, scopes, recursive
info, and `token`: an access token of the instance's service account, so API calls made with
it are logged with the instance as `Call.origin`). An instance without a service account has
none (404), as on GCE. Requests without `Metadata-Flavor: Google` get 403.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fakes.gce.faults import Call

if TYPE_CHECKING:
    from fakes.gce.server import GceServer

META_PREFIX = "/meta/"
ROOT = "computeMetadata/v1/"
FLAVOR = ("Metadata-Flavor", "Google")


def answer_metadata(server: GceServer, environ: dict[str, Any]) -> tuple[int, str, bytes]:
    """(HTTP status, content type, body) for a request under /meta/."""
    instance_id, _, rest = environ.get("PATH_INFO", "")[len(META_PREFIX) :].partition("/")
    query = dict(parse_qsl(environ.get("QUERY_STRING", "")))
    with server.cond:
        vm = next((v for v in server.compute.vms.values() if v.res["id"] == instance_id), None)
        name = vm.name if vm is not None else None
        call = Call(server.next_seq(), "metadata.get", "GET", rest, query, None, None, name)
        if environ.get("HTTP_METADATA_FLAVOR") != "Google":
            status, answer = 403, "Missing required header: Metadata-Flavor"
        elif vm is None:
            status, answer = 404, "no such instance"
        elif rest == "":
            status, answer = 200, ""
        elif not rest.startswith(ROOT):
            status, answer = 404, "not found"
        else:
            status, answer = _lookup(server, vm, rest[len(ROOT) :], query)
    server.record(call, status, None if status == 200 else f"HTTP {status}", False)
    if isinstance(answer, str):
        return status, "application/text", answer.encode()
    return status, "application/json", json.dumps(answer).encode()


def _lookup(server: GceServer, vm: Any, path: str, query: dict[str, str]) -> tuple[int, Any]:
    res = vm.res
    recursive = query.get("recursive") == "true"
    nic = res["networkInterfaces"][0]
    own = {i["key"]: i["value"] for i in res["metadata"].get("items", [])}
    common = {i["key"]: i["value"] for i in server.compute.project_metadata["items"]}
    number = server.project_number
    simple = {
        "instance/id": res["id"],
        "instance/name": res["name"],
        "instance/hostname": f"{res['name']}.{vm.zone}.c.{server.project}.internal",
        "instance/zone": f"projects/{number}/zones/{vm.zone}",
        "instance/machine-type": f"projects/{number}/machineTypes/"
        + res["machineType"].rpartition("/")[2],
        "instance/network-interfaces/0/ip": nic["networkIP"],
        "project/project-id": server.project,
        "project/numeric-project-id": number,
    }
    for config in nic.get("accessConfigs", []):
        simple["instance/network-interfaces/0/access-configs/0/external-ip"] = config["natIP"]
    path = path.rstrip("/") if not path.endswith("service-accounts/") else path
    if path in simple:
        return 200, simple[path]
    for prefix, values in (("instance/attributes", own), ("project/attributes", common)):
        if path == prefix:
            return 200, values if recursive else "".join(f"{k}\n" for k in values)
        if path.startswith(prefix + "/"):
            key = path[len(prefix) + 1 :]
            return (200, values[key]) if key in values else (404, "not found")
    if path.startswith("instance/service-accounts"):
        return _accounts(server, vm, path, query, recursive)
    return 404, "not found"


def _accounts(
    server: GceServer, vm: Any, path: str, query: dict[str, str], recursive: bool
) -> tuple[int, Any]:
    accounts = vm.res.get("serviceAccounts") or []
    if not accounts:
        return 404, "not found"
    email, scopes = accounts[0]["email"], accounts[0].get("scopes", [])
    if path == "instance/service-accounts/":
        return 200, f"default/\n{email}/\n"
    parts = path.split("/")  # instance, service-accounts, ACCOUNT[, item]
    if len(parts) < 3 or parts[2] not in ("default", email):
        return 404, "not found"
    item = parts[3] if len(parts) > 3 else ""
    if item == "" and recursive:
        return 200, {"aliases": ["default"], "email": email, "scopes": scopes}
    if item == "email":
        return 200, email
    if item == "scopes":
        return 200, "".join(f"{s}\n" for s in scopes)
    if item == "token":
        token = f"ya29.fake-metadata-{secrets.token_urlsafe(24)}"
        with server.iam._lock:
            server.iam.tokens[token] = email
            server.iam.token_origins[token] = vm.name
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}
    return 404, "not found"
