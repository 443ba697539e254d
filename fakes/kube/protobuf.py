"""Kubernetes protobuf request bodies, for the kinds kubectl's typed clients send that way.

kubectl's imperative `create namespace|serviceaccount|secret|configmap|role|rolebinding|
clusterrole|clusterrolebinding|service|quota|token` post `application/vnd.kubernetes.protobuf`:
the magic `k8s\\0` and a `runtime.Unknown` (typeMeta, raw) whose raw bytes are the object
in the field numbers of k8s.io/api's generated.proto. This decodes those kinds (the fields
kubectl sets, and the usual others) into the JSON form; any other kind is answered 415.
Empty singular strings and zero numbers mean "unset" (proto2 encodes them), so they are
dropped; empty strings in repeated fields are kept (apiGroups [""]).
"""

from __future__ import annotations

import base64
from typing import Any

from . import errors

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"

# A schema maps field numbers to (json name, type). Types: "s" string, "b" bytes (base64),
# "i" integer, "?" bool, "ss" map<string,string>, "sb" map<string,bytes>, "sq"
# map<string,Quantity>, "*s" repeated string, or a schema (a message), "*" + name for a
# repeated message given by name in SCHEMAS.
Schema = dict[int, tuple[str, Any]]

OWNER_REF: Schema = {
    1: ("kind", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
    6: ("controller", "?"),
    7: ("blockOwnerDeletion", "?"),
}
OBJECT_META: Schema = {
    1: ("name", "s"),
    2: ("generateName", "s"),
    3: ("namespace", "s"),
    5: ("uid", "s"),
    6: ("resourceVersion", "s"),
    11: ("labels", "ss"),
    12: ("annotations", "ss"),
    13: ("ownerReferences", ["*", OWNER_REF]),
    14: ("finalizers", "*s"),
}
OBJECT_REF: Schema = {
    1: ("kind", "s"),
    2: ("namespace", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
}
POLICY_RULE: Schema = {
    1: ("verbs", "*s"),
    2: ("apiGroups", "*s"),
    3: ("resources", "*s"),
    4: ("resourceNames", "*s"),
    5: ("nonResourceURLs", "*s"),
}
SUBJECT: Schema = {1: ("kind", "s"), 2: ("apiGroup", "s"), 3: ("name", "s"), 4: ("namespace", "s")}
ROLE_REF: Schema = {1: ("apiGroup", "s"), 2: ("kind", "s"), 3: ("name", "s")}
INT_OR_STRING: Schema = {1: ("type", "i"), 2: ("intVal", "i"), 3: ("strVal", "s")}
SERVICE_PORT: Schema = {
    1: ("name", "s"),
    2: ("protocol", "s"),
    3: ("port", "i"),
    4: ("targetPort", INT_OR_STRING),
    5: ("nodePort", "i"),
    6: ("appProtocol", "s"),
}
SERVICE_SPEC: Schema = {
    1: ("ports", ["*", SERVICE_PORT]),
    2: ("selector", "ss"),
    3: ("clusterIP", "s"),
    4: ("type", "s"),
    5: ("externalIPs", "*s"),
    7: ("sessionAffinity", "s"),
    10: ("externalName", "s"),
    11: ("externalTrafficPolicy", "s"),
    13: ("publishNotReadyAddresses", "?"),
}
ROLE: Schema = {1: ("metadata", OBJECT_META), 2: ("rules", ["*", POLICY_RULE])}
BINDING: Schema = {
    1: ("metadata", OBJECT_META),
    2: ("subjects", ["*", SUBJECT]),
    3: ("roleRef", ROLE_REF),
}
KINDS: dict[str, Schema] = {
    "Namespace": {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", "*s")})},
    "ServiceAccount": {
        1: ("metadata", OBJECT_META),
        2: ("secrets", ["*", OBJECT_REF]),
        3: ("imagePullSecrets", ["*", {1: ("name", "s")}]),
        4: ("automountServiceAccountToken", "?"),
    },
    "Secret": {
        1: ("metadata", OBJECT_META),
        2: ("data", "sb"),
        3: ("type", "s"),
        4: ("stringData", "ss"),
        5: ("immutable", "?"),
    },
    "ConfigMap": {
        1: ("metadata", OBJECT_META),
        2: ("data", "ss"),
        3: ("binaryData", "sb"),
        4: ("immutable", "?"),
    },
    "Role": ROLE,
    "ClusterRole": ROLE,
    "RoleBinding": BINDING,
    "ClusterRoleBinding": BINDING,
    "Service": {1: ("metadata", OBJECT_META), 2: ("spec", SERVICE_SPEC)},
    "ResourceQuota": {
        1: ("metadata", OBJECT_META),
        2: ("spec", {1: ("hard", "sq"), 2: ("scopes", "*s")}),
    },
    "TokenRequest": {
        1: ("metadata", OBJECT_META),
        2: (
            "spec",
            {
                1: ("audiences", "*s"),
                4: ("expirationSeconds", "i"),
                3: (
                    "boundObjectRef",
                    {1: ("kind", "s"), 2: ("apiVersion", "s"), 3: ("name", "s"), 4: ("uid", "s")},
                ),
            },
        ),
    },
}
_UNKNOWN: Schema = {1: ("typeMeta", {1: ("apiVersion", "s"), 2: ("kind", "s")}), 2: ("raw", "raw")}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise errors.bad_request("truncated protobuf varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a message: ints for varints, bytes otherwise."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            size, pos = _varint(data, pos)
            out.append((number, data[pos : pos + size]))
            pos += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            out.append((number, data[pos : pos + width]))
            pos += width
        else:
            raise errors.bad_request(f"unsupported protobuf wire type {wire}")
    return out


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    entry = dict(fields(raw))
    key, value = entry.get(1, b""), entry.get(2, b"")
    assert isinstance(key, bytes) and isinstance(value, bytes)
    return key.decode(), value


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "i":
        return value if isinstance(value, int) else None
    if kind == "?":
        return bool(value)
    if not isinstance(value, bytes):
        return None
    if kind == "b":
        return base64.b64encode(value).decode()
    if kind == "raw":
        return value
    return value.decode()


def decode_message(data: bytes, schema: Schema) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for number, value in fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, list):  # a repeated message
            assert isinstance(value, bytes)
            result.setdefault(name, []).append(decode_message(value, kind[1]))
        elif isinstance(kind, dict):
            assert isinstance(value, bytes)
            result[name] = decode_message(value, kind)
        elif kind == "*s":
            assert isinstance(value, bytes)
            result.setdefault(name, []).append(value.decode())
        elif kind in ("ss", "sb", "sq"):
            assert isinstance(value, bytes)
            key, raw = _map_entry(value)
            if kind == "sq":
                raw = dict(fields(raw)).get(1, b"")  # type: ignore[assignment]
            result.setdefault(name, {})[key] = (
                base64.b64encode(raw).decode() if kind == "sb" else raw.decode()
            )
        else:
            scalar = _scalar(kind, value)
            if scalar not in (None, "", 0) or kind == "?":
                result[name] = scalar
    return _int_or_string(result)


def _int_or_string(message: dict[str, Any]) -> dict[str, Any]:
    target = message.get("targetPort")
    if isinstance(target, dict) and set(target) <= {"type", "intVal", "strVal"}:
        message["targetPort"] = (
            target.get("strVal") if target.get("type") else target.get("intVal", 0)
        )
    return message


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object; 415 for kinds this cannot decode."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("a protobuf body must start with the k8s magic number")
    unknown = decode_message(body[len(MAGIC) :], _UNKNOWN)
    type_meta = unknown.get("typeMeta") or {}
    kind = type_meta.get("kind", "")
    schema = KINDS.get(kind)
    if schema is None:
        raise errors.ApiError(
            415,
            "UnsupportedMediaType",
            f"the fake API server cannot decode {kind or 'this object'} from protobuf; send JSON",
        )
    obj = decode_message(unknown.get("raw") or b"", schema)
    obj["apiVersion"], obj["kind"] = type_meta.get("apiVersion", "v1"), kind
    return obj
