"""`launcher check` for GCE: Application Default Credentials (or the config's own),
Resource Manager's `projects.testIamPermissions` for what `up` does, and the region's CPU
quotas (`regions.get`) against the config's node types. Imports Google's SDK only when
probing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.check.decide import needs_by_type, node_counts, permission_finding, quota_findings
from launcher.check.model import Aspect, Finding, QuotaReading, Status
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.providers.gcp import clients as gcp
from launcher.providers.gcp.spec import GcpProviderConfig, is_spot

# What `up` calls on the project (instances, their boot disks, the SSH firewall rule).
LAUNCH_PERMISSIONS = (
    "compute.instances.create",
    "compute.instances.get",
    "compute.instances.list",
    "compute.instances.delete",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.disks.create",
    "compute.firewalls.list",
    "compute.firewalls.create",
    "compute.zoneOperations.get",
)
# What it adds when the head runs as the launcher's own service account.
ACCOUNT_PERMISSIONS = (
    "iam.serviceAccounts.create",
    "iam.serviceAccounts.actAs",
    "resourcemanager.projects.getIamPolicy",
    "resourcemanager.projects.setIamPolicy",
)
POLICY_FIX = (
    "grant the account roles/compute.instanceAdmin.v1 and roles/iam.serviceAccountUser "
    "(and roles/resourcemanager.projectIamAdmin and roles/iam.serviceAccountAdmin for the "
    "head's service account), or give the head's node_config serviceAccounts of your own"
)
QUOTA_FIX = "ask for more on the Quotas page of the Google Cloud console"


def wanted_permissions(config: ClusterConfig) -> tuple[str, ...]:
    head = config.node_types[config.head_node_type].node_config
    return LAUNCH_PERMISSIONS + (() if head.get("serviceAccounts") else ACCOUNT_PERMISSIONS)


def quota_metric(spot: bool, limits: Mapping[str, float]) -> str:
    """The regional quota a node takes: spot ones PREEMPTIBLE_CPUS where the region has
    such a quota (GCE counts them against CPUS otherwise), other nodes CPUS."""
    return "PREEMPTIBLE_CPUS" if spot and limits.get("PREEMPTIBLE_CPUS", 0) > 0 else "CPUS"


def probe(config: ClusterConfig, in_depth: bool) -> list[Finding]:
    settings = config.provider
    assert isinstance(settings, GcpProviderConfig)
    try:
        credentials, project = gcp.credentials_and_project(settings)
    except LauncherError as exc:
        return [Finding(Aspect.CREDENTIALS, Status.PROBLEM, str(exc))]
    clients = gcp.GcpClients(credentials, project)
    who = getattr(credentials, "service_account_email", None) or "your user credentials"
    found = Finding(Aspect.CREDENTIALS, Status.OK, f"project {project} as {who}")
    permissions = _permissions(clients, wanted_permissions(config))
    if permissions.status is Status.PROBLEM and permissions.aspect is Aspect.CREDENTIALS:
        return [permissions]
    return [found, permissions, *_quotas(clients, config, in_depth)]


def _permissions(clients: gcp.GcpClients, wanted: tuple[str, ...]) -> Finding:
    request = clients.crm.projects().testIamPermissions(
        resource=clients.project, body={"permissions": list(wanted)}
    )
    try:
        answer = request.execute()
    except gcp.api_errors() as exc:
        aspect = Aspect.CREDENTIALS if gcp.http_status(exc) in (0, 401) else Aspect.PERMISSIONS
        return Finding(aspect, Status.PROBLEM, gcp.error_message(exc), gcp.CREDENTIALS_HINT)
    granted = set(answer.get("permissions") or ())
    denied = [p for p in wanted if p not in granted]
    return permission_finding(
        [f"{len(wanted)} permissions"], denied, f"project {clients.project}", POLICY_FIX
    )


def _quotas(clients: gcp.GcpClients, config: ClusterConfig, in_depth: bool) -> list[Finding]:
    settings = config.provider
    assert isinstance(settings, GcpProviderConfig)
    region = settings.region
    try:
        answer = gcp.call(
            clients.compute.regions().get(project=clients.project, region=region),
            f"read region {region}",
        )
        limits = {str(q["metric"]): float(q["limit"]) for q in answer.get("quotas") or ()}
        usage = {str(q["metric"]): float(q.get("usage", 0)) for q in answer.get("quotas") or ()}
        counts = node_counts(config)
        per_type: dict[str, tuple[str, float] | None] = {}
        for name in counts:
            node_config = config.node_types[name].node_config
            metric = quota_metric(is_spot(node_config), limits)
            cpus = _cpus(clients, node_config, settings.availability_zone)
            per_type[name] = (f"{metric} in {region}", cpus) if cpus else None
    except LauncherError as exc:
        return [Finding(Aspect.QUOTA, Status.UNKNOWN, str(exc))]
    shown = {"CPUS"} | {q[0].split()[0] for q in per_type.values() if q}
    readings = [
        QuotaReading(f"{m} in {region}", limits[m], usage.get(m, 0.0), fix=QUOTA_FIX)
        for m in sorted(shown)
        if m in limits
    ]
    return quota_findings(readings, needs_by_type(counts, per_type) if in_depth else [])


def _cpus(clients: gcp.GcpClients, node_config: Mapping[str, Any], zone: str) -> float:
    machine = str(node_config.get("machineType", "n1-standard-2")).rsplit("/", 1)[-1]
    where = str(node_config.get("zone") or zone).rsplit("/", 1)[-1]
    request = clients.compute.machineTypes().get(
        project=clients.project, zone=where, machineType=machine
    )
    answer = gcp.call(request, f"read machine type {machine} in {where}")
    return float(answer.get("guestCpus") or 0)
