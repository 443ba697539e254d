"""What the server does per kind on create and update: defaults, validation (422 Invalid
with the real messages), and which part of an object an update may change."""

from __future__ import annotations

import base64
import binascii
import copy
import itertools
import re
import threading
from typing import Any

from . import errors
from .resources import Resource

Obj = dict[str, Any]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
# Kinds whose names must be RFC 1123 labels rather than subdomains.
_LABEL_NAMED = ("Namespace", "Service")
_cluster_ips = itertools.count(1)
_ip_lock = threading.Lock()


def _invalid(resource: Resource, name: str, field: str, problem: str) -> errors.ApiError:
    return errors.invalid(resource.kind, resource.group, name, field, problem)


def _check_name(resource: Resource, meta: dict[str, Any]) -> None:
    name = meta.get("name") or ""
    if not name:
        raise _invalid(
            resource, "", "metadata.name", "Required value: name or generateName is required"
        )
    pattern, text, limit = (
        (_LABEL, LABEL_HELP, 63)
        if resource.kind in _LABEL_NAMED
        else (_SUBDOMAIN, SUBDOMAIN_HELP, 253)
    )
    if len(name) > limit:
        raise _invalid(
            resource,
            name,
            "metadata.name",
            f'Invalid value: "{name}": must be no more than {limit} characters',
        )
    if not pattern.match(name):
        raise _invalid(resource, name, "metadata.name", f'Invalid value: "{name}": {text}')


def _check_labels(resource: Resource, meta: dict[str, Any]) -> None:
    name = meta.get("name") or ""
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, short = key.rpartition("/")
        if (
            not _KEY_NAME.match(short)
            or len(short) > 63
            or (prefix and not _SUBDOMAIN.match(prefix))
        ):
            raise _invalid(
                resource,
                name,
                "metadata.labels",
                f'Invalid value: "{key}": name part must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character",
            )
        if not isinstance(value, str):
            raise errors.bad_request(f"labels: {key} must be a string")
        if len(value) > 63:
            raise _invalid(
                resource,
                name,
                "metadata.labels",
                f'Invalid value: "{value}": must be no more than 63 characters',
            )
        if not _LABEL_VALUE.match(value):
            raise _invalid(
                resource, name, "metadata.labels", f'Invalid value: "{value}": {VALUE_HELP}'
            )
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            raise errors.bad_request(f"annotations: {key} must be a string")


def validate(resource: Resource, obj: Obj) -> None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise _invalid(resource, "", "metadata", "Required value")
    _check_name(resource, meta)
    _check_labels(resource, meta)
    if resource.kind == "Pod":
        _validate_pod(resource, obj)


def _validate_pod(resource: Resource, pod: Obj) -> None:
    name = pod["metadata"]["name"]
    containers = (pod.get("spec") or {}).get("containers")
    if not containers:
        raise _invalid(resource, name, "spec.containers", "Required value")
    seen: set[str] = set()
    for index, container in enumerate(containers):
        field = f"spec.containers[{index}]"
        if not container.get("name"):
            raise _invalid(resource, name, f"{field}.name", "Required value")
        if container["name"] in seen:
            raise _invalid(
                resource, name, f"{field}.name", f'Duplicate value: "{container["name"]}"'
            )
        seen.add(container["name"])
        if not container.get("image"):
            raise _invalid(resource, name, f"{field}.image", "Required value")


# -- defaults on create --------------------------------------------------------------------


def prepare_create(resource: Resource, obj: Obj) -> None:
    """Fill the defaults the real server fills, in place (before the name is known)."""
    kind = resource.kind
    obj.pop("status", None) if kind not in ("Node",) else None
    if kind == "Pod":
        _default_pod(obj)
    elif kind == "Service":
        _default_service(obj)
    elif kind == "Secret":
        _default_secret(obj)
    elif kind == "Namespace":
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        obj["status"] = {"phase": "Active"}
    elif kind == "ResourceQuota":
        obj["status"] = {"hard": dict((obj.get("spec") or {}).get("hard") or {}), "used": {}}


def _default_pod(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault(
        "tolerations",
        [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
    )
    for container in spec.get("containers") or []:
        image = str(container.get("image", ""))
        latest = ":" not in image.rpartition("/")[2] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})
    pod["status"] = {"phase": "Pending", "qosClass": _qos(spec)}


def _qos(spec: Obj) -> str:
    containers = spec.get("containers") or []
    res = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(n) is not None
        and (r.get("requests") or {}).get(n, (r.get("limits") or {}).get(n)) == r["limits"][n]
        for r in res
        for n in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _default_service(service: Obj) -> None:
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        with _ip_lock:
            n = next(_cluster_ips)
        # Cluster IPs are only strings to the tests; keep them in loopback space anyway.
        spec["clusterIP"] = f"127.19.{n // 250}.{n % 250 + 1}"
        spec["clusterIPs"] = [spec["clusterIP"]]
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    service["status"] = {"loadBalancer": {}}


def _default_secret(secret: Obj) -> None:
    secret.setdefault("type", "Opaque")
    data = secret.setdefault("data", {}) or {}
    secret["data"] = data
    for key, value in (secret.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise errors.bad_request(f"illegal base64 data in secret key {key!r}") from exc


# -- updates ---------------------------------------------------------------------------------

_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations")


def _mutable_view(spec: Obj) -> Obj:
    view = copy.deepcopy(spec)
    for key in _POD_MUTABLE:
        view.pop(key, None)
    for group in ("containers", "initContainers"):
        for container in view.get(group) or []:
            container.pop("image", None)
    return view


def prepare_update(resource: Resource, old: Obj, new: Obj, subresource: str) -> Obj:
    """The object to store for an update of `old` to `new` through `subresource` ("" or
    "status"): an update of the object keeps its status, one of the status keeps the rest;
    pods may change only images, activeDeadlineSeconds and tolerations of their spec."""
    meta = new.setdefault("metadata", {})
    for kept in ("name", "namespace", "uid", "creationTimestamp", "generateName"):
        if kept in old["metadata"]:
            meta[kept] = old["metadata"][kept]
    if subresource == "status":
        result = copy.deepcopy(old)
        result["status"] = new.get("status") or {}
        return result
    if "status" in resource.subresources and "status" in old:
        new["status"] = copy.deepcopy(old["status"])
    if resource.kind == "Pod" and _mutable_view(old.get("spec") or {}) != _mutable_view(
        new.get("spec") or {}
    ):
        raise _invalid(
            resource,
            meta["name"],
            "spec",
            "Forbidden: pod updates may not change fields other than "
            "`spec.containers[*].image`,`spec.initContainers[*].image`,"
            "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
            "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it "
            "to be set to 1 if it was previously negative)",
        )
    if resource.kind == "Secret":
        _default_secret(new)
    validate(resource, new)
    return new
