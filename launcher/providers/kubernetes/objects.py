"""What a cluster needs in its namespace besides pods: the autoscaler's ServiceAccount,
Role and RoleBinding, and the services Ray's config declares.

Created if missing and reused if present (`ensure`). Where the config names no autoscaler
objects, the launcher's own are the cluster's alone, named from the exact cluster name
(`names.autoscaler_name`). Objects the config names may be shared by several clusters: the
objects the launcher created carry an annotation saying so and another listing the clusters
that use them; `down --purge` removes a cluster from that list and deletes an object no
cluster uses any more. Objects the user or an administrator made are never deleted.

Services are the cluster's own: labelled with it, selecting only its pods (the cluster's
label is added to the selector, so `component: ray-head` in two clusters' configs never
reaches the other's head), and gone with `down`. A service of the same name that another
cluster owns is not taken over: `up` says so.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import thaw
from launcher.errors import ProviderError, UsageError
from launcher.providers.base import TAG_CLUSTER
from launcher.providers.kubernetes.clients import KubeApis
from launcher.providers.kubernetes.names import autoscaler_name
from launcher.providers.kubernetes.spec import KubernetesProviderConfig

CREATED_BY = "launcher.created-by"
USED_BY = "launcher.clusters"
# The one ServiceAccount, Role and RoleBinding that earlier versions of the launcher shared
# among all clusters of a namespace: `down --purge` still releases a cluster's use of them.
SHARED_NAME = "launcher-autoscaler"
# What the autoscaler in the head pod does, in its namespace only.
AUTOSCALER_RULES = (
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete", "patch"],
    },
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "create", "delete"]},
)


@dataclass(frozen=True)
class Kind:
    label: str  # for messages: "service account"
    api: str  # "core" or "rbac"
    suffix: str  # in the client's method names: read_namespaced_<suffix>


SERVICE_ACCOUNT = Kind("service account", "core", "service_account")
ROLE = Kind("role", "rbac", "role")
ROLE_BINDING = Kind("role binding", "rbac", "role_binding")
SERVICE = Kind("service", "core", "service")


def api_error() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    exception: type[Exception] = ApiException
    return exception


def status_of(exc: Exception) -> int:
    return int(getattr(exc, "status", 0) or 0)


def message_of(exc: Exception) -> str:
    """The API server's message from an ApiException's Status body."""
    body = getattr(exc, "body", None)
    try:
        text = json.loads(body)["message"] if body else None
    except (ValueError, KeyError, TypeError):
        text = None
    return str(text or getattr(exc, "reason", None) or exc)


def autoscaler_objects(
    settings: KubernetesProviderConfig, cluster_name: str
) -> list[tuple[Kind, dict[str, Any]]]:
    """The service account, role and binding for the head pod: the config's (Ray's
    `autoscaler_*` keys), or the cluster's own, made by the launcher, where it gives none."""
    own = autoscaler_name(cluster_name)
    account = _manifest(settings.service_account) or {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": own},
    }
    role = _manifest(settings.role) or {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": own},
        "rules": [dict(r) for r in AUTOSCALER_RULES],
    }
    binding = _manifest(settings.role_binding) or {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": own},
        "subjects": [{"kind": "ServiceAccount", "name": name_of(account)}],
        "roleRef": {
            "kind": "Role",
            "name": name_of(role),
            "apiGroup": "rbac.authorization.k8s.io",
        },
    }
    return [(SERVICE_ACCOUNT, account), (ROLE, role), (ROLE_BINDING, binding)]


def _manifest(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return copy.deepcopy(thaw(value)) if value else None


def name_of(manifest: Mapping[str, Any]) -> str:
    return str((manifest.get("metadata") or {}).get("name", ""))


def service_body(manifest: Mapping[str, Any], cluster_name: str) -> dict[str, Any]:
    """The service to create: labelled with the cluster, and, when it selects pods,
    selecting only the cluster's."""
    body: dict[str, Any] = copy.deepcopy(thaw(manifest))
    labels = body.setdefault("metadata", {}).setdefault("labels", {})
    labels[TAG_CLUSTER] = cluster_name
    spec = body.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("selector"), dict) and spec["selector"]:
        spec["selector"][TAG_CLUSTER] = cluster_name
    return body


def owner_of(found: Any) -> str | None:
    """The cluster a service read from the API belongs to (its cluster label), or None."""
    labels = getattr(getattr(found, "metadata", None), "labels", None) or {}
    owner = labels.get(TAG_CLUSTER)
    return str(owner) if owner is not None else None


class Objects:
    """Reads, creates and deletes the cluster's namespaced objects."""

    def __init__(self, apis: KubeApis, namespace: str, cluster_name: str) -> None:
        self.apis = apis
        self.namespace = namespace
        self.cluster_name = cluster_name

    def _call(self, kind: Kind, verb: str, *args: Any, **kwargs: Any) -> Any:
        """The client's `VERB_namespaced_KIND`. Only reads build the client's models from
        the answer: what a write answers (the object, or a Status) is not needed."""
        api = self.apis.core if kind.api == "core" else self.apis.rbac
        if verb != "read":
            kwargs["_preload_content"] = False
        return getattr(api, f"{verb}_namespaced_{kind.suffix}")(*args, **kwargs)

    def read(self, kind: Kind, name: str) -> Any | None:
        try:
            return self._call(kind, "read", name, self.namespace)
        except api_error() as exc:
            if status_of(exc) == 404:
                return None
            raise ProviderError(f"cannot read {kind.label} {name}: {message_of(exc)}") from exc

    def ensure_shared(self, kind: Kind, manifest: Mapping[str, Any]) -> str | None:
        """Create the object if missing (marked as the launcher's, used by this cluster),
        or record this cluster as a user of the launcher's. Returns what it did, for the
        user, or None when the object was there for this cluster already."""
        name = name_of(manifest)
        found = self.read(kind, name)
        if found is None:
            body: dict[str, Any] = copy.deepcopy(thaw(manifest))
            annotations = body.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[CREATED_BY] = "launcher"
            annotations[USED_BY] = self.cluster_name
            self._create(kind, body)
            return f"created {kind.label} {name} in namespace {self.namespace}"
        annotations = dict(found.metadata.annotations or {})
        if annotations.get(CREATED_BY) != "launcher":
            return None  # someone else's: used as it is, never changed or deleted
        users = _users(annotations)
        if self.cluster_name in users:
            return None
        self._set_users(kind, name, [*users, self.cluster_name])
        return None

    def release_shared(self, kind: Kind, name: str) -> str | None:
        """This cluster no longer uses the object: delete it if the launcher made it and no
        other cluster uses it. Returns what it removed, or None."""
        found = self.read(kind, name)
        if found is None:
            return None
        annotations = dict(found.metadata.annotations or {})
        if annotations.get(CREATED_BY) != "launcher":
            return None
        users = [u for u in _users(annotations) if u != self.cluster_name]
        if users:
            self._set_users(kind, name, users)
            return None
        self.delete(kind, name)
        return f"{kind.label} {name}"

    def ensure_service(self, manifest: Mapping[str, Any]) -> str | None:
        """Create the service if missing. One the user made (no cluster label) is used as
        it is; one another cluster owns is refused (its `down` would delete it)."""
        name = name_of(manifest)
        found = self.read(SERVICE, name)
        if found is None:
            self._create(SERVICE, service_body(manifest, self.cluster_name))
            return f"created service {name} in namespace {self.namespace}"
        owner = owner_of(found)
        if owner is not None and owner != self.cluster_name:
            raise UsageError(
                f"service {name} in namespace {self.namespace} belongs to cluster {owner}; "
                "give this cluster's service another name in provider.services"
            )
        return None

    def services(self) -> list[str]:
        """The names of this cluster's services."""
        try:
            found = self.apis.core.list_namespaced_service(
                self.namespace, label_selector=f"{TAG_CLUSTER}={self.cluster_name}"
            )
        except api_error() as exc:
            raise ProviderError(f"cannot list services: {message_of(exc)}") from exc
        return [str(s.metadata.name) for s in found.items]

    def delete(self, kind: Kind, name: str) -> bool:
        """Delete the object; False if it was gone already."""
        try:
            self._call(kind, "delete", name, self.namespace)
        except api_error() as exc:
            if status_of(exc) == 404:
                return False
            raise ProviderError(f"cannot delete {kind.label} {name}: {message_of(exc)}") from exc
        return True

    def _create(self, kind: Kind, body: Mapping[str, Any]) -> None:
        try:
            self._call(kind, "create", self.namespace, body)
        except api_error() as exc:
            if status_of(exc) == 409:
                return  # made meanwhile (another `up`): reused
            raise ProviderError(
                f"cannot create {kind.label} {name_of(body)} in namespace {self.namespace}: "
                f"{message_of(exc)}"
            ) from exc

    def _set_users(self, kind: Kind, name: str, users: list[str]) -> None:
        patch = {"metadata": {"annotations": {USED_BY: ",".join(sorted(set(users)))}}}
        try:
            self._call(kind, "patch", name, self.namespace, patch)
        except api_error() as exc:
            raise ProviderError(f"cannot update {kind.label} {name}: {message_of(exc)}") from exc


def _users(annotations: Mapping[str, str]) -> list[str]:
    return [u for u in (annotations.get(USED_BY) or "").split(",") if u]
