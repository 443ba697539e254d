"""What a fake pod's container is given: its command line and its environment, as a kubelet
derives them from the pod spec (env values, the downward API, $(VAR) references).

There is no image: the container runs this machine's filesystem with the test venv's bin
first on PATH, so `python3`, `ray` and `pip` are the venv's. A container without `command`
would need an image's entrypoint, which does not exist here: `ContainerConfigError`.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

Pod = dict[str, Any]
# (namespace, "ConfigMap" or "Secret", name, key) -> the value, or None if there is none.
ObjectKeyLookup = Callable[[str, str, str, str], str | None]

VENV_BIN = str(Path(sys.executable).parent)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_SUFFIXES: dict[str, Fraction | int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


class ContainerConfigError(Exception):
    """The container cannot be made from its spec (CreateContainerConfigError)."""


def quantity(text: str | int | float) -> Fraction:
    """A Kubernetes resource quantity ("500m", "2Gi", "1e3", 4) as an exact number."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ContainerConfigError(f"quantities must match the regular expression: {text!r}")
    number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent is not None:
        return value * Fraction(10) ** int(exponent)
    return value * _SUFFIXES[suffix or ""]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known names are replaced, unknown ones kept, $$ is $."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(one, text)


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    command = [expand(str(part), env) for part in container.get("command") or []]
    args = [expand(str(part), env) for part in container.get("args") or []]
    if not command:
        raise ContainerConfigError(
            f"container {container.get('name')!r} has no command: the fake kubelet has no "
            "images, so no entrypoint to fall back on"
        )
    return command + args


def _node_capacity(resource: str) -> Fraction:
    if resource.endswith("cpu"):
        return Fraction(os.cpu_count() or 1)
    if resource.endswith("memory"):
        return Fraction(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return Fraction(0)


def resource_value(pod: Pod, container_name: str, ref: Mapping[str, Any]) -> str:
    """The downward API's resourceFieldRef: limits default to the node's capacity,
    requests to the limits (as the API server defaults them), then to 0; divided by the
    divisor, rounded up."""
    resource = str(ref.get("resource", ""))
    name = ref.get("containerName") or container_name
    containers = pod.get("spec", {}).get("containers") or []
    spec = next((c for c in containers if c.get("name") == name), None)
    if spec is None:
        raise ContainerConfigError(f"resourceFieldRef names no container {name!r}")
    kind, _, what = resource.partition(".")
    if kind not in ("limits", "requests") or not what:
        raise ContainerConfigError(f"unsupported resourceFieldRef resource {resource!r}")
    resources = spec.get("resources") or {}
    given = (resources.get(kind) or {}).get(what)
    if given is None and kind == "requests":
        given = (resources.get("limits") or {}).get(what)
    value = quantity(given) if given is not None else None
    if value is None:
        value = _node_capacity(what) if kind == "limits" else Fraction(0)
    divisor = quantity(ref.get("divisor") or "1")
    if divisor <= 0:
        raise ContainerConfigError(f"resourceFieldRef divisor must be positive: {divisor}")
    return str(math.ceil(value / divisor))


def field_value(pod: Pod, path: str, pod_ip: str, host_ip: str) -> str:
    """The downward API's fieldRef."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace") or "default",
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef fieldPath {path!r}")


def container_env(
    pod: Pod,
    container: Mapping[str, Any],
    *,
    pod_ip: str,
    host_ip: str,
    service_env: Mapping[str, str],
    lookup: ObjectKeyLookup | None,
) -> dict[str, str]:
    """The environment of the container's processes (and of exec sessions in it)."""
    meta = pod.get("metadata") or {}
    env = {
        "PATH": f"{VENV_BIN}:{BASE_PATH}",
        "HOME": "/root",
        "HOSTNAME": str(meta.get("name", "")),
        **service_env,
    }
    for source in container.get("envFrom") or []:
        _env_from(source)
    for item in container.get("env") or []:
        name = str(item["name"])
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        value = _value_from(pod, container, item["valueFrom"], pod_ip, host_ip, lookup)
        if value is not None:
            env[name] = value
    return env


def _value_from(
    pod: Pod,
    container: Mapping[str, Any],
    source: Mapping[str, Any],
    pod_ip: str,
    host_ip: str,
    lookup: ObjectKeyLookup | None,
) -> str | None:
    if "fieldRef" in source:
        return field_value(pod, str(source["fieldRef"].get("fieldPath", "")), pod_ip, host_ip)
    if "resourceFieldRef" in source:
        return resource_value(pod, str(container.get("name", "")), source["resourceFieldRef"])
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
        if field in source:
            ref = source[field]
            value = lookup(namespace, kind, ref["name"], ref["key"]) if lookup else None
            if value is None and not ref.get("optional"):
                raise ContainerConfigError(f'{kind.lower()} "{ref["name"]}" key {ref["key"]!r}')
            return value
    raise ContainerConfigError(f"unsupported valueFrom: {sorted(source)}")


def _env_from(source: Mapping[str, Any]) -> None:
    """envFrom needs every key of an object, which a key lookup cannot list."""
    ref = source.get("configMapRef") or source.get("secretRef") or {}
    if not ref.get("optional"):
        raise ContainerConfigError(f"envFrom is not supported by the fake kubelet: {source}")
