"""The resource types the fake serves, and the discovery documents that describe them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
RBAC = "rbac.authorization.k8s.io"
VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str = ""  # "" is the core group (/api/v1)
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()  # field selectors beyond metadata.name/namespace
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(VERBS)

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
RESOURCES = [
    Resource(
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        fields=("status.phase",),
        subresources=("status", "finalize"),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    Resource("nodes", "Node", namespaced=False, short_names=("no",), subresources=("status",)),
    Resource(
        "pods",
        "Pod",
        short_names=("po",),
        fields=_POD_FIELDS,
        subresources=("status", "exec", "attach", "portforward", "log", "binding", "eviction"),
    ),
    Resource(
        "services",
        "Service",
        short_names=("svc",),
        subresources=("status",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    Resource("serviceaccounts", "ServiceAccount", short_names=("sa",), subresources=("token",)),
    Resource("secrets", "Secret", fields=("type",)),
    Resource("configmaps", "ConfigMap", short_names=("cm",)),
    Resource(
        "events",
        "Event",
        short_names=("ev",),
        fields=(
            "involvedObject.name",
            "involvedObject.namespace",
            "involvedObject.kind",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    Resource("resourcequotas", "ResourceQuota", short_names=("quota",), subresources=("status",)),
    Resource("roles", "Role", group=RBAC),
    Resource("rolebindings", "RoleBinding", group=RBAC),
    Resource("clusterroles", "ClusterRole", group=RBAC, namespaced=False),
    Resource("clusterrolebindings", "ClusterRoleBinding", group=RBAC, namespaced=False),
]
BY_PATH = {(r.group, r.plural): r for r in RESOURCES}


def find(group: str, plural: str) -> Resource | None:
    return BY_PATH.get((group, plural))


def named(plural: str, group: str = "") -> Resource:
    """A resource the fake serves (KeyError for any other)."""
    return BY_PATH[(group, plural)]


PODS = named("pods")
NODES = named("nodes")
NAMESPACES = named("namespaces")
EVENTS = named("events")
QUOTAS = named("resourcequotas")
SERVICEACCOUNTS = named("serviceaccounts")
SERVICES = named("services")


def _resource_entry(resource: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(resource.verbs),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    if resource.plural in ("pods", "services"):
        entry["categories"] = ["all"]
    return entry


def _subresource_entry(resource: Resource, sub: str) -> dict[str, Any]:
    kinds = {
        "exec": "PodExecOptions",
        "attach": "PodAttachOptions",
        "log": "Pod",
        "portforward": "PodPortForwardOptions",
        "binding": "Binding",
        "eviction": "Eviction",
        "token": "TokenRequest",
    }
    verbs = {
        "exec": ["create", "get"],
        "attach": ["create", "get"],
        "log": ["get"],
        "portforward": ["create", "get"],
        "binding": ["create"],
        "eviction": ["create"],
        "token": ["create"],
        "finalize": ["update"],
    }
    return {
        "name": f"{resource.plural}/{sub}",
        "singularName": "",
        "namespaced": resource.namespaced,
        "kind": kinds.get(sub, resource.kind),
        "verbs": verbs.get(sub, ["get", "patch", "update"]),
    }


def resource_list(group: str) -> dict[str, Any]:
    """The APIResourceList of /api/v1 (group "") or /apis/GROUP/v1."""
    entries: list[dict[str, Any]] = []
    for resource in RESOURCES:
        if resource.group != group:
            continue
        entries.append(_resource_entry(resource))
        entries.extend(_subresource_entry(resource, sub) for sub in resource.subresources)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/v1" if group else "v1",
        "resources": entries,
    }


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }


def _group(name: str) -> dict[str, Any]:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


AUTHORIZATION = "authorization.k8s.io"  # SelfSubjectAccessReview only (fakes/kube/authz.py)


def api_group_list() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(RBAC), _group(AUTHORIZATION)],
    }


def api_group(name: str) -> dict[str, Any] | None:
    if name not in (RBAC, AUTHORIZATION):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}
