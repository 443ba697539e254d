"""The three patch formats of PATCH requests.

- JSON merge patch (RFC 7386, application/merge-patch+json): maps merge, null deletes,
  anything else (lists included) replaces.
- Strategic merge patch (application/strategic-merge-patch+json): a merge patch in which
  the lists of the built-in types that have a merge key merge element by element on it
  (containers and volumes by name, ports by containerPort...), and the directives
  `$patch: delete|replace|merge`, `$deleteFromPrimitiveList/<field>`,
  `$setElementOrder/<field>` and `$retainKeys` are understood (the last two are accepted and
  ignored). The merge keys are looked up by field name, which is right for the types served.
- JSON patch (RFC 6902, application/json-patch+json): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# List fields of the served types that merge element by element, and their merge key.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "env": "name",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ownerReferences": "uid",
    "secrets": "name",
    "finalizers": "",  # a list of strings that merges as a set
    "topologySpreadConstraints": "topologyKey",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: the result of applying `patch` to `target` (neither is changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# -- strategic merge patch ----------------------------------------------------------------


def strategic_merge(target: Any, patch: Any) -> Any:
    """The result of a strategic merge `patch` on `target` (neither is changed)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.partition("/")[2]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$") or key.startswith("$setElementOrder/"):
            continue  # $retainKeys, $setElementOrder/...: order and retention are not modelled
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            result[key] = _merge_list(result.get(key) or [], value, MERGE_KEYS[key])
        else:
            result[key] = strategic_merge(result.get(key), value)
    return result


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    if not key:  # a set of primitives
        merged = list(target)
        merged.extend(v for v in patch if v not in merged)
        return merged
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    merged = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(strategic_merge({}, item))
        else:
            merged[index] = strategic_merge(merged[index], item)
    return merged


# -- JSON patch --------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"json patch: path {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node


def _child(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise _missing(path)


def _missing(path: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f"the server rejected our request due to an error in our request: "
        f"doc is missing path: {path!r}",
    )


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent):
            raise _missing(path)
        parent.insert(index, value)
    else:
        raise _missing(path)
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    parent = _parent(doc, parts, path)
    value = _child(parent, parts[-1], path)
    if isinstance(parent, dict):
        del parent[parts[-1]]
    else:
        del parent[int(parts[-1])]
    return doc, value


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: apply `operations` (a list) to a copy of `target`."""
    if not isinstance(operations, list):
        raise bad_request("json patch: the body must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        doc = _apply_op(doc, op)
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind, path = op.get("op"), op.get("path", "")
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op.get("value")))
    if kind == "remove":
        return _remove(doc, path)[0]
    if kind == "replace":
        _get(doc, path)
        doc, _ = _remove(doc, path) if path else (doc, None)
        return _add(doc, path, copy.deepcopy(op.get("value")))
    if kind in ("move", "copy"):
        value = copy.deepcopy(_get(doc, op.get("from", "")))
        if kind == "move":
            doc, value = _remove(doc, op.get("from", ""))
        return _add(doc, path, value)
    if kind == "test":
        if _get(doc, path) != op.get("value"):
            raise ApiError(422, "Invalid", f"testing value {path} failed")
        return doc
    raise bad_request(f"json patch: unknown operation {kind!r}")


def apply_patch(target: dict[str, Any], content_type: str, patch: Any) -> dict[str, Any]:
    """Apply a PATCH request's body, by its Content-Type."""
    media = content_type.split(";", maxsplit=1)[0].strip()
    if media == MERGE_PATCH:
        result = merge_patch(target, patch)
    elif media == STRATEGIC_PATCH:
        result = strategic_merge(target, patch)
    elif media == JSON_PATCH:
        result = json_patch(target, patch)
    else:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}",
        )
    if not isinstance(result, dict):
        raise bad_request("the patch did not produce an object")
    return result
