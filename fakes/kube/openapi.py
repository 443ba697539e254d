"""The least OpenAPI v3 kubectl 1.32 needs for `create -f` and `apply -f` to validate.

kubectl asks /openapi/v3 for the index, then the document of the object's group-version,
in which it looks for the PATCH operation of the object's kind (by its
x-kubernetes-group-version-kind) and, among its query parameters, `fieldValidation`:
found, it leaves validation to the server (`?fieldValidation=Strict`, which the fake
accepts without checking fields). No schemas are served, so `kubectl apply` computes its
strategic merge patches from the types compiled into kubectl, and `kubectl explain` does
not work. /openapi/v2 is not served (404), as kubectl then falls back on its own types.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from . import resources

_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _paths(group: str) -> dict[str, Any]:
    prefix = f"/apis/{group}/v1" if group else "/api/v1"
    paths: dict[str, Any] = {}
    for resource in resources.RESOURCES:
        if resource.group != group:
            continue
        scope = "/namespaces/{namespace}" if resource.namespaced else ""
        gvk = {"group": group, "version": "v1", "kind": resource.kind}
        paths[f"{prefix}{scope}/{resource.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{resource.kind}",
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string"}} for name in _PARAMS
                ],
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}},
            },
        }
    return paths


def group_version_document(path: str) -> dict[str, Any] | None:
    """The document of `api/v1` or `apis/GROUP/v1`, None for other paths."""
    if path == "api/v1":
        group = ""
    elif path.startswith("apis/") and path.endswith("/v1") and path.count("/") == 2:
        group = path.split("/")[1]
        if resources.api_group(group) is None:
            return None
    else:
        return None
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (fake)", "version": "v1.32.0"},
        "paths": _paths(group),
        "components": {"schemas": {}},
    }


def _hash(path: str) -> str:
    document = group_version_document(path)
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()


def openapi_v3_index() -> dict[str, Any]:
    names = ["api/v1"] + [f"apis/{g['name']}/v1" for g in resources.api_group_list()["groups"]]
    return {
        "paths": {
            name: {"serverRelativeURL": f"/openapi/v3/{name}?hash={_hash(name)}"} for name in names
        }
    }
