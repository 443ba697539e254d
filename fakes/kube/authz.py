"""SelfSubjectAccessReview (authorization.k8s.io/v1) on the fake API server: may the
caller do a verb on a resource? Decided from the RBAC objects in the store as the real
RBAC authorizer decides: `system:masters` may do anything; otherwise a ClusterRoleBinding's
rules apply in every namespace and a RoleBinding's (to a Role of its namespace or a
ClusterRole) in its own, to subjects matched by user name, group or serviceaccount; a rule
matches by verb, API group, resource (`pods/exec` for a subresource, `*` for all) and,
where it lists them, resource names.

The fake enforces none of this on the other calls (every authenticated caller may do
everything there): the review answers what a real cluster with these RBAC objects would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .kubeconfig import Identity
from .resources import RBAC, named
from .store import Store

GROUP = "authorization.k8s.io"
PATH = f"/apis/{GROUP}/v1/selfsubjectaccessreviews"
KIND = "SelfSubjectAccessReview"


def _subject_matches(subject: Mapping[str, Any], who: Identity, namespace: str | None) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == who.user)
    if kind == "Group":
        return name in who.groups
    if kind == "ServiceAccount" and who.serviceaccount is not None:
        return (subject.get("namespace") or namespace, name) == who.serviceaccount
    return False


def _rule_matches(rule: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    def has(key: str, value: str) -> bool:
        listed = rule.get(key) or []
        return "*" in listed or value in listed

    resource = str(attributes.get("resource") or "")
    sub = str(attributes.get("subresource") or "")
    wanted = f"{resource}/{sub}" if sub else resource
    resources = rule.get("resources") or []
    resource_ok = wanted in resources or "*" in resources or (sub and f"*/{sub}" in resources)
    names = rule.get("resourceNames") or []
    name_ok = not names or attributes.get("name") in names
    return (
        has("verbs", str(attributes.get("verb") or ""))
        and has("apiGroups", str(attributes.get("group") or ""))
        and bool(resource_ok)
        and name_ok
    )


def _rules(store: Store, ref: Mapping[str, Any], namespace: str | None) -> list[Any]:
    if ref.get("kind") == "ClusterRole":
        role = store.find(named("clusterroles", RBAC), "", str(ref.get("name")))
    else:
        role = store.find(named("roles", RBAC), namespace or "", str(ref.get("name")))
    return list((role or {}).get("rules") or [])


def _bindings(store: Store, namespace: str | None) -> Iterable[tuple[Any, str | None]]:
    for binding in store.list(named("clusterrolebindings", RBAC))[0]:
        yield binding, None
    if namespace:
        for binding in store.list(named("rolebindings", RBAC), namespace)[0]:
            yield binding, namespace


def decide(store: Store, who: Identity, attributes: Mapping[str, Any]) -> tuple[bool, str]:
    """(allowed, reason) for `who` doing what `attributes` (resourceAttributes) say."""
    if "system:masters" in who.groups:
        return True, "member of system:masters"
    namespace = attributes.get("namespace") or None
    for binding, where in _bindings(store, namespace):
        subjects = binding.get("subjects") or []
        if not any(_subject_matches(s, who, where) for s in subjects):
            continue
        ref = binding.get("roleRef") or {}
        if any(_rule_matches(r, attributes) for r in _rules(store, ref, where)):
            kind = "ClusterRoleBinding" if where is None else "RoleBinding"
            name = binding["metadata"]["name"]
            return (
                True,
                f'RBAC: allowed by {kind} "{name}" of {ref.get("kind")} "{ref.get("name")}"',
            )
    return False, ""


def review(store: Store, who: Identity, body: Mapping[str, Any]) -> dict[str, Any]:
    """The answer to a SelfSubjectAccessReview: the request with its status filled in."""
    spec = body.get("spec") or {}
    attributes = spec.get("resourceAttributes")
    if attributes is not None:
        allowed, reason = decide(store, who, attributes)
    else:  # nonResourceAttributes (/healthz and such): masters only, here
        allowed = "system:masters" in who.groups
        reason = "member of system:masters" if allowed else ""
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {
        "kind": KIND,
        "apiVersion": f"{GROUP}/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def resource_list() -> dict[str, Any]:
    """The APIResourceList of authorization.k8s.io/v1 (for kubectl's discovery)."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/v1",
        "resources": [
            {
                "name": "selfsubjectaccessreviews",
                "singularName": "selfsubjectaccessreview",
                "namespaced": False,
                "kind": KIND,
                "verbs": ["create"],
            }
        ],
    }
