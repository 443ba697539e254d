"""`launcher check` for Kubernetes: the kubeconfig's context (as `up` loads it), a
SelfSubjectAccessReview for each thing `up` does in the namespace, and the namespace's
ResourceQuotas against the config's pods. Imports the kubernetes client only when probing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.check.decide import node_counts, permission_finding, quota_findings
from launcher.check.model import Aspect, Finding, QuotaNeed, QuotaReading, Status
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.providers.kubernetes.clients import connect
from launcher.providers.kubernetes.spec import KubernetesProviderConfig, parse_quantity

RBAC = "rbac.authorization.k8s.io"
POLICY_FIX = (
    "bind the user a Role in the namespace allowing these verbs (or ask the cluster's "
    "admin); `kubectl auth can-i --list -n NAMESPACE` shows what it may do"
)
QUOTA_FIX = "raise the namespace's ResourceQuota (or ask the cluster's admin)"
# ResourceQuota keys the launcher's pods count against, by what one pod takes of it.
CPU_KEYS = ("cpu", "requests.cpu")


@dataclass(frozen=True)
class Access:
    """One SelfSubjectAccessReview: `verb` on `resource` (`pods/exec`) in `group`."""

    verb: str
    resource: str
    group: str = ""

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}"


def wanted_access(settings: KubernetesProviderConfig) -> list[Access]:
    """What `up`, the autoscaler and exec need in the namespace."""
    wanted = [Access(v, "pods") for v in ("create", "get", "list", "watch", "patch", "delete")]
    wanted.append(Access("create", "pods/exec"))
    if settings.services:
        wanted.append(Access("create", "services"))
    if settings.service_account:
        wanted.append(Access("create", "serviceaccounts"))
    if settings.role:
        wanted.append(Access("create", "roles", RBAC))
    if settings.role_binding:
        wanted.append(Access("create", "rolebindings", RBAC))
    return wanted


def readings_of(quotas: list[Mapping[str, Any]], namespace: str) -> list[QuotaReading]:
    """The CPU and pod limits of the namespace's ResourceQuotas, with their use."""
    readings = []
    for quota in quotas:
        name = str((quota.get("metadata") or {}).get("name", "quota"))
        status = quota.get("status") or {}
        hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
        used = status.get("used") or {}
        for key in (*CPU_KEYS, "pods", "count/pods"):
            limit = parse_quantity(hard.get(key)) if key in hard else None
            if limit is None:
                continue
            readings.append(
                QuotaReading(
                    f"ResourceQuota {name} {key} in namespace {namespace}",
                    limit,
                    parse_quantity(used.get(key, 0)) or 0.0,
                    "CPUs" if key in CPU_KEYS else "pods",
                    QUOTA_FIX,
                )
            )
    return readings


def needs_of(readings: list[QuotaReading], config: ClusterConfig) -> list[QuotaNeed]:
    """Each node is a pod: one of a pod quota, its CPU request of a CPU quota."""
    needs = []
    for name, (least, most) in node_counts(config).items():
        cpus = float(config.node_types[name].resources.get("CPU", 0))
        for reading in readings:
            per_pod = cpus if reading.unit == "CPUs" else 1.0
            if per_pod:
                needs.append(QuotaNeed(reading.name, name, per_pod, least, most))
    return needs


def default_settings() -> KubernetesProviderConfig:
    """A namespace-less check: the current context's namespace (else `default`)."""
    return KubernetesProviderConfig(
        type="kubernetes",
        extra={},
        namespace=_context_namespace() or "default",
        use_internal_ips=False,
        service_account=None,
        role=None,
        role_binding=None,
        services=(),
    )


def _context_namespace() -> str | None:
    from kubernetes import config as kube_config

    loader: Any = kube_config  # partly typed: its loaders are not
    try:
        _, active = loader.list_kube_config_contexts()
    except Exception:  # no kubeconfig, or an unreadable one: connect() says which
        return None
    found = (active or {}).get("context", {}).get("namespace")
    return str(found) if found else None


def probe(config: ClusterConfig | None, in_depth: bool) -> list[Finding]:
    settings = config.provider if config is not None else default_settings()
    assert isinstance(settings, KubernetesProviderConfig)
    try:
        apis = connect(settings, on_head=False)
    except LauncherError as exc:
        return [Finding(Aspect.CREDENTIALS, Status.PROBLEM, str(exc))]
    from kubernetes import client

    namespace = settings.namespace
    authorization = client.AuthorizationV1Api(apis.api_client)
    wanted = wanted_access(settings)
    denied = []
    try:
        for access in wanted:
            if not _allowed(client, authorization, namespace, access):
                denied.append(str(access))
    except Exception as exc:  # ApiException, or urllib3's connection errors
        return [_refused(exc, apis.source)]
    found = Finding(
        Aspect.CREDENTIALS,
        Status.OK,
        f"{apis.source}, server {apis.api_client.configuration.host}, namespace {namespace}",
    )
    allowed = permission_finding(
        [str(a) for a in wanted], denied, f"namespace {namespace}", POLICY_FIX
    )
    return [found, allowed, *_quotas(apis, namespace, config if in_depth else None)]


def _allowed(client: Any, authorization: Any, namespace: str, access: Access) -> bool:
    resource, _, subresource = access.resource.partition("/")
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace,
                verb=access.verb,
                group=access.group,
                resource=resource,
                subresource=subresource or None,
            )
        )
    )
    answer = authorization.create_self_subject_access_review(review)
    return bool(answer.status and answer.status.allowed)


def _refused(exc: BaseException, source: str) -> Finding:
    status = getattr(exc, "status", None)
    if status == 401:
        detail = f"the API server refused the credentials of {source} (401 Unauthorized)"
        fix = "refresh the kubeconfig's credentials (log in to the cluster again)"
    else:
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        detail = f"cannot reach the API server of {source}: {reason}"
        fix = "check the kubeconfig's server address and this machine's network"
    return Finding(Aspect.CREDENTIALS, Status.PROBLEM, detail, fix)


def _quotas(apis: Any, namespace: str, config: ClusterConfig | None) -> list[Finding]:
    try:
        listed = apis.api_client.sanitize_for_serialization(
            apis.core.list_namespaced_resource_quota(namespace)
        )
    except Exception as exc:  # a role that may not list quotas: not known, not a problem
        reason = getattr(exc, "reason", None) or type(exc).__name__
        return [Finding(Aspect.QUOTA, Status.UNKNOWN, f"ResourceQuotas of {namespace} ({reason})")]
    readings = readings_of(list(listed.get("items") or []), namespace)
    if not readings:
        return [Finding(Aspect.QUOTA, Status.OK, f"no CPU or pod quota in namespace {namespace}")]
    return quota_findings(readings, needs_of(readings, config) if config else [])
