"""`launcher check` for Azure: a Resource Manager token from the launcher's credential chain
(azure-identity's DefaultAzureCredential), a read of the subscription and the cluster's
resource group, and the location's vCPU usage (regional, each VM family's, and spot as
`lowPriorityCores`) against the config's node types, each taking its VM size's vCPUs (as
Resource SKUs give them, not Ray's `resources`). Imports the Azure SDK only when probing."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from launcher.check.decide import node_counts, quota_findings
from launcher.check.model import Aspect, Finding, QuotaNeed, QuotaReading, Status
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.providers.azure import clients as az
from launcher.providers.azure.model import AzureProviderConfig, is_spot, vm_size

QUOTA_FIX = "ask for more on the Quotas page of the Azure portal (Compute, this location)"
ROLE_FIX = (
    "give the identity a role on subscription {subscription}: Contributor for `up` "
    "(az role assignment create --assignee <its client id> --role Contributor "
    "--scope /subscriptions/{subscription})"
)
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


# How azure-identity words a credential of the chain that found nothing to use (as opposed
# to one that tried and was refused).
_UNAVAILABLE = ("unavailable", "not found", "not installed", "could not be found", "requires")


def _token_problem(exc: BaseException) -> str:
    """Why the credential chain gave no token, in a line: the answer of each credential
    that tried (a refused secret: Entra's AADSTS code and first sentence), else that none
    found anything to sign in with. DefaultAzureCredential's message lists each credential
    it tried on a line of its own, after a tab: `EnvironmentCredential: <why>`."""
    tried: list[str] = []
    refused: list[str] = []
    for line in str(exc).splitlines():
        name, sep, reason = line.strip().partition(": ")
        if not line.startswith("\t") or not sep or " " in name:
            continue
        tried.append(name)
        if any(word in reason.lower() for word in _UNAVAILABLE):
            continue
        reason = reason.removeprefix("Authentication failed: ").split(" Trace ID:")[0]
        if len(reason) > 160 and ". " in reason:
            reason = reason.split(". ")[0] + "."
        refused.append(f"{name}: {reason}")
    if refused:
        return "; ".join(refused)
    if tried:
        return f"no credentials found; tried {', '.join(tried)}"
    return _first_line(exc)


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
                f"no Azure token for {endpoint} ({_token_problem(exc)})",
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
    except LauncherError as exc:  # the group's read (get_or_none), refused
        return Finding(
            Aspect.CREDENTIALS,
            Status.PROBLEM,
            f"cannot read resource group {group} ({exc})",
            _read_fix(exc, clients.subscription),
        )
    except Exception as exc:
        return Finding(
            Aspect.CREDENTIALS,
            Status.PROBLEM,
            f"cannot read subscription {clients.subscription} ({_first_line(exc)})",
            _read_fix(exc, clients.subscription),
        )
    where = f"resource group {group} " + ("found" if exists is not None else "(up creates it)")
    return Finding(
        Aspect.CREDENTIALS,
        Status.OK,
        f"subscription {name} ({clients.subscription}), {where}",
    )


def _read_fix(exc: BaseException, subscription: str) -> str:
    """What to do about a refused read: a role for the identity when ARM said it has none
    (403), else the subscription to name."""
    cause = exc.__cause__ or exc
    if getattr(cause, "status_code", None) == 403 or az.arm_code(cause) == "AuthorizationFailed":
        return ROLE_FIX.format(subscription=subscription)
    return az.SUBSCRIPTION_FIX


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
    by_name = {str(getattr(u.name, "value", "")).lower(): u for u in usages}
    counts = node_counts(config) if in_depth else {}
    sizes = _sizes(clients, location, config, counts)
    shown: dict[str, str] = {}  # usage name (lower case) -> its reading's name
    needs: list[QuotaNeed] = []
    for name in (REGULAR, SPOT):
        if name.lower() in by_name:
            shown[name.lower()] = f"{_regional(name)} in {location}"
    for type_name, (least, most) in counts.items():
        node_type = config.node_types[type_name]
        size = vm_size(node_type.node_config) or ""
        vcpus, family = sizes.get(size.lower(), (0, ""))
        keys = [SPOT] if is_spot(node_type.node_config) else [REGULAR, family]
        for key in filter(None, keys):
            usage = by_name.get(key.lower())
            if usage is None or not vcpus:
                continue
            if key.lower() not in shown:
                label = getattr(usage.name, "localized_value", None) or key
                shown[key.lower()] = f"{label} in {location}"
            needs.append(QuotaNeed(shown[key.lower()], type_name, float(vcpus), least, most))
    readings = [
        QuotaReading(
            reading,
            float(by_name[key].limit),
            float(by_name[key].current_value),
            fix=QUOTA_FIX,
        )
        for key, reading in shown.items()
    ]
    return quota_findings(readings, needs)


def _regional(name: str) -> str:
    return "Total Regional Spot vCPUs" if name == SPOT else "Total Regional vCPUs"


def _sizes(
    clients: az.AzureClients,
    location: str,
    config: ClusterConfig,
    counts: Mapping[str, tuple[int, int]],
) -> dict[str, tuple[int, str]]:
    """(vCPUs, quota family) of the node types' VM sizes, by size in lower case: Azure's
    resource SKUs for the location (a VM counts its vCPUs against its quotas whatever Ray's
    `resources` say), else the launcher's price table (vCPUs, no family)."""
    wanted = {
        size.lower()
        for name in counts
        if (size := vm_size(config.node_types[name].node_config)) is not None
    }
    if not wanted:
        return {}
    found: dict[str, tuple[int, str]] = {}
    try:
        for sku in clients.compute.resource_skus.list(filter=f"location eq '{location}'"):
            name = str(sku.name or "").lower()
            if sku.resource_type != "virtualMachines" or name not in wanted:
                continue
            if location.lower() not in {str(x).lower() for x in sku.locations or []}:
                continue
            caps = {c.name: c.value for c in sku.capabilities or []}
            vcpus = caps.get("vCPUs")
            if vcpus and str(vcpus).isdigit():
                found[name] = (int(vcpus), str(sku.family or ""))
    except Exception:  # the SKU list refused or failed: the price table's sizes below
        pass
    if len(found) < len(wanted):
        from launcher.pricing import load_prices

        rows = load_prices().machines.get("azure", {})
        for size, info in rows.items():
            if size.lower() in wanted and size.lower() not in found:
                found[size.lower()] = (info.vcpus, "")
    return found
