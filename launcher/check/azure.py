"""`launcher check` for Azure: a Resource Manager token from the launcher's credential chain
(azure-identity's DefaultAzureCredential), a read of the subscription and the cluster's
resource group, and the location's vCPU usage (regional and spot) against the config's
node types. Imports the Azure SDK only when probing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from launcher.check.decide import needs_by_type, node_counts, quota_findings
from launcher.check.model import Aspect, Finding, QuotaReading, Status
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.providers.azure import clients as az
from launcher.providers.azure.model import AzureProviderConfig, is_spot

QUOTA_FIX = "ask for more on the Quotas page of the Azure portal (Compute, this location)"
# Usage names (`usage.name.value`) of the regional vCPU limits a VM counts against.
REGULAR, SPOT = "cores", "lowPriorityCores"


@contextmanager
def _quiet_identity() -> Iterator[None]:
    """azure-identity logs each credential it tried as a warning: the finding says it."""
    logger = logging.getLogger("azure.identity")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _first_line(exc: BaseException) -> str:
    text = az.arm_message(exc)
    return text.split(". ")[0] if len(text) > 300 else text


def probe(config: ClusterConfig, in_depth: bool) -> list[Finding]:
    settings = config.provider
    assert isinstance(settings, AzureProviderConfig)
    endpoint = az.resource_manager()
    try:
        credential = az.make_credential()
        with _quiet_identity():
            credential.get_token(az.credential_scope(endpoint))
    except Exception as exc:  # azure-identity's ClientAuthenticationError and kin
        return [
            Finding(
                Aspect.CREDENTIALS,
                Status.PROBLEM,
                f"no Azure token for {endpoint} ({_first_line(exc)})",
                az.CREDENTIALS_HINT,
            )
        ]
    try:
        subscription = az.subscription_of(
            settings, visible=lambda: az.visible_subscriptions(credential, endpoint)
        )
    except LauncherError as exc:
        return [Finding(Aspect.CREDENTIALS, Status.PROBLEM, str(exc))]
    clients = az.AzureClients(credential, subscription, endpoint)
    reads = _reads(clients, settings)
    if reads.status is Status.PROBLEM:
        return [reads]
    return [reads, *_quotas(clients, config, in_depth)]


def _reads(clients: az.AzureClients, settings: AzureProviderConfig) -> Finding:
    from azure.mgmt.resource.subscriptions import SubscriptionClient

    endpoint = clients.endpoint
    subscriptions = SubscriptionClient(
        clients.credential, base_url=endpoint, credential_scopes=[az.credential_scope(endpoint)]
    ).subscriptions
    group = settings.resource_group
    try:
        found = subscriptions.get(clients.subscription)
        name = getattr(found, "display_name", None) or clients.subscription
        exists = az.get_or_none(lambda: clients.resources.resource_groups.get(group))
    except LauncherError as exc:
        return Finding(Aspect.CREDENTIALS, Status.PROBLEM, str(exc), az.SUBSCRIPTION_FIX)
    except Exception as exc:
        return Finding(
            Aspect.CREDENTIALS,
            Status.PROBLEM,
            f"cannot read subscription {clients.subscription} ({_first_line(exc)})",
            az.SUBSCRIPTION_FIX,
        )
    where = f"resource group {group} " + ("found" if exists is not None else "(up creates it)")
    return Finding(
        Aspect.CREDENTIALS,
        Status.OK,
        f"subscription {name} ({clients.subscription}), {where}",
    )


def _quotas(clients: az.AzureClients, config: ClusterConfig, in_depth: bool) -> list[Finding]:
    settings = config.provider
    assert isinstance(settings, AzureProviderConfig)
    location = settings.location
    try:
        usages = list(clients.compute.usage.list(location))
    except Exception as exc:
        return [
            Finding(
                Aspect.QUOTA,
                Status.UNKNOWN,
                f"vCPU usage in {location} ({_first_line(exc)})",
            )
        ]
    readings = [
        QuotaReading(
            f"{_usage_name(u)} in {location}",
            float(u.limit),
            float(u.current_value),
            fix=QUOTA_FIX,
        )
        for u in usages
        if getattr(u.name, "value", None) in (REGULAR, SPOT)
    ]
    names = {r.name.split(" in ")[0]: r.name for r in readings}
    per_type: dict[str, tuple[str, float] | None] = {}
    for name in node_counts(config):
        node_type = config.node_types[name]
        key = SPOT if is_spot(node_type.node_config) else REGULAR
        cpus = float(node_type.resources.get("CPU", 0))
        shown = names.get(_shown(key))
        per_type[name] = (shown, cpus) if shown and cpus else None
    needs = needs_by_type(node_counts(config), per_type) if in_depth else []
    return quota_findings(readings, needs)


def _shown(key: str) -> str:
    return "Total Regional Spot vCPUs" if key == SPOT else "Total Regional vCPUs"


def _usage_name(usage: Any) -> str:
    return _shown(SPOT if usage.name.value == SPOT else REGULAR)
