"""From a request's path and method to what it addresses: resource, namespace, name,
subresource and Kubernetes verb."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import resources
from .resources import Resource


@dataclass(frozen=True)
class Target:
    resource: Resource
    namespace: str | None  # None: cluster-scoped, or a list/watch across all namespaces
    name: str | None
    subresource: str = ""
    legacy_watch: bool = False  # /api/v1/watch/...


def _split(path: str) -> tuple[str, list[str]] | None:
    """The API group and the parts after its version, or None for other paths."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        return "", parts[2:]
    if len(parts) >= 3 and parts[0] == "apis" and parts[2] == "v1":
        return parts[1], parts[3:]
    return None


def parse(path: str) -> Target | None:
    """The target of a resource path; None for discovery and unknown paths."""
    split = _split(path)
    if split is None:
        return None
    group, rest = split
    legacy = bool(rest) and rest[0] == "watch"
    if legacy:
        rest = rest[1:]
    if not rest:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        inner = resources.find(group, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    resource = resources.find(group, rest[0])
    if resource is None or len(rest) > 3:
        return None
    if namespace is None and resource.namespaced and len(rest) > 1:
        return None  # a namespaced object addressed without its namespace
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in resource.subresources:
        return None
    return Target(resource, namespace, name, sub, legacy)


def verb(method: str, target: Target | None, query: Mapping[str, str]) -> str:
    """The Kubernetes verb of a request (for a non-resource path: the HTTP method, lower)."""
    if target is None:
        return method.lower()
    watching = target.legacy_watch or query.get("watch", "") in ("1", "true", "True")
    if method == "GET":
        if watching:
            return "watch"
        return "get" if target.name else "list"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
