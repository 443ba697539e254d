"""Azure's management clients, as the user's Azure setup says: credentials, subscription and
endpoints. Imports the Azure SDK only when called.

- Credentials: azure-identity's default chain (`DefaultAzureCredential`): a service
  principal or workload identity from the environment (`AZURE_CLIENT_ID`,
  `AZURE_TENANT_ID`, `AZURE_CLIENT_SECRET` ...), the VM's managed identity (how the
  autoscaler on the head gets the head's identity), then the Azure CLI's login.
- Token authority: `AZURE_AUTHORITY_HOST` (azure-identity's own variable), for sovereign
  clouds and Azure Stack. msal checks an authority host it does not know with Microsoft's
  world-wide instance discovery service; for such a host (which that service cannot know)
  the check is turned off.
- Resource Manager: `AZURE_RESOURCE_MANAGER_ENDPOINT`, else the public cloud's; tokens are
  asked for that endpoint's `/.default` scope.
- TLS: the SDK's transport honours `REQUESTS_CA_BUNDLE` (a private CA).
- Subscription: `provider.subscription_id`, else `AZURE_SUBSCRIPTION_ID`, else the Azure
  CLI's default (`az account set`, in `$AZURE_CONFIG_DIR/azureProfile.json`), else the one
  subscription the credential can see (several: one line naming them).
- Polling: a long-running operation whose answers carry Retry-After is polled when that
  says (as the SDK does); one without is polled every `LAUNCHER_AZURE_POLL_S` seconds
  (2 by default; the SDK's own default, 30 s, would add up to half a minute to each step of
  a launch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

from launcher.errors import ProviderError, UsageError
from launcher.providers.azure.model import AzureProviderConfig

ENDPOINT_VARIABLE = "AZURE_RESOURCE_MANAGER_ENDPOINT"
PUBLIC_RESOURCE_MANAGER = "https://management.azure.com"
AUTHORITY_VARIABLE = "AZURE_AUTHORITY_HOST"
SUBSCRIPTION_VARIABLE = "AZURE_SUBSCRIPTION_ID"
POLL_VARIABLE = "LAUNCHER_AZURE_POLL_S"
DEFAULT_POLL_S = 2.0
CREDENTIALS_HINT = (
    "run `az login`, or set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET for a "
    "service principal"
)


def resource_manager(environ: Mapping[str, str] | None = None) -> str:
    """The Resource Manager endpoint (no trailing `/`)."""
    found = (environ if environ is not None else os.environ).get(ENDPOINT_VARIABLE)
    return (found or PUBLIC_RESOURCE_MANAGER).rstrip("/")


def credential_scope(endpoint: str) -> str:
    return f"{endpoint.rstrip('/')}/.default"


def authority_is_known(environ: Mapping[str, str] | None = None) -> bool:
    """Whether msal knows the token authority's host (the public and sovereign clouds';
    also when none is set: the public cloud's)."""
    from msal.authority import WELL_KNOWN_AUTHORITY_HOSTS

    value = (environ if environ is not None else os.environ).get(AUTHORITY_VARIABLE, "")
    if not value:
        return True
    host = urlparse(value if "://" in value else f"https://{value}").hostname or ""
    return host in WELL_KNOWN_AUTHORITY_HOSTS


def poll_interval(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between polls of an operation that sends no Retry-After (see the module)."""
    value = (environ if environ is not None else os.environ).get(POLL_VARIABLE, "").strip()
    if not value:
        return DEFAULT_POLL_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 60:
        raise UsageError(
            f"{POLL_VARIABLE}={value!r} is not a number of seconds between 0 and 60; "
            f"unset it to poll every {DEFAULT_POLL_S:g} s"
        )
    return seconds


SUBSCRIPTION_FIX = (
    f"set provider.subscription_id in the cluster config, or {SUBSCRIPTION_VARIABLE} "
    "(`az account show --query id -o tsv`)"
)


def subscription_of(
    settings: AzureProviderConfig,
    environ: Mapping[str, str] | None = None,
    visible: Callable[[], list[str]] | None = None,
) -> str:
    """The subscription the cluster lives in: the config's, else the environment's, else
    the Azure CLI's default, else the only one `visible` (the credential's) lists."""
    env = environ if environ is not None else os.environ
    found = settings.subscription_id or env.get(SUBSCRIPTION_VARIABLE) or cli_default(env)
    if found:
        return found
    seen = visible() if visible is not None else []
    if len(seen) == 1:
        return seen[0]
    if not seen:
        raise UsageError(
            f"no Azure subscription given, and your login sees none; {SUBSCRIPTION_FIX}"
        )
    raise UsageError(
        f"no Azure subscription given, and your login sees {len(seen)} "
        f"({', '.join(sorted(seen))}); {SUBSCRIPTION_FIX}"
    )


def cli_default(environ: Mapping[str, str]) -> str | None:
    """The subscription `az account set` made the default, if the Azure CLI is logged in
    here (its profile: `$AZURE_CONFIG_DIR`, else ~/.azure)."""
    folder = environ.get("AZURE_CONFIG_DIR") or os.path.expanduser("~/.azure")
    try:
        with open(os.path.join(folder, "azureProfile.json"), encoding="utf-8-sig") as profile:
            data = json.load(profile)
    except (OSError, ValueError):
        return None
    accounts = data.get("subscriptions") if isinstance(data, dict) else None
    for account in accounts if isinstance(accounts, list) else []:
        if isinstance(account, dict) and account.get("isDefault") and account.get("id"):
            return str(account["id"])
    return None


def visible_subscriptions(credential: Any, endpoint: str, **options: Any) -> list[str]:
    """The enabled subscriptions `credential` can see (the subscriptions API)."""
    try:
        from azure.mgmt.resource.subscriptions import SubscriptionClient
    except ImportError as exc:
        raise UsageError(
            "no Azure subscription given, and azure-mgmt-resource-subscriptions (to find "
            f"yours) is not installed: pip install 'launcher-ray[azure]'; or {SUBSCRIPTION_FIX}"
        ) from exc
    client = SubscriptionClient(
        credential, base_url=endpoint, credential_scopes=[credential_scope(endpoint)], **options
    )
    try:
        listed = list(client.subscriptions.list())
    except Exception as exc:
        raise ProviderError(
            f"cannot list your Azure subscriptions ({arm_message(exc)}); {SUBSCRIPTION_FIX}"
        ) from exc

    def state(subscription: Any) -> str:  # an enum of str in the SDK's models
        return str(getattr(subscription.state, "value", subscription.state) or "").lower()

    return [str(s.subscription_id) for s in listed if state(s) == "enabled"]


def make_credential(environ: Mapping[str, str] | None = None) -> Any:
    """azure-identity's default chain, with instance discovery off for an authority host
    msal does not know (see the module docstring). Interactive sign-in is never tried: the
    launcher runs unattended on the head."""
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential(disable_instance_discovery=not authority_is_known(environ))


@dataclass
class AzureClients:
    """The management clients of one subscription, each built on first use (building one
    loads its models: ~0.1 s), sharing one credential."""

    credential: Any
    subscription: str
    endpoint: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def _client_options(self) -> dict[str, Any]:
        return {
            "base_url": self.endpoint,
            "credential_scopes": [credential_scope(self.endpoint)],
            **self.options,
        }

    @cached_property
    def resources(self) -> Any:
        from azure.mgmt.resource.resources import ResourceManagementClient

        return ResourceManagementClient(
            self.credential, self.subscription, **self._client_options()
        )

    @cached_property
    def deployments(self) -> Any:
        """Template deployments (azure-mgmt-resource-deployments: azure-mgmt-resource 26
        moved them out of its ResourceManagementClient)."""
        from azure.mgmt.resource.deployments import DeploymentsMgmtClient

        return DeploymentsMgmtClient(
            self.credential, self.subscription, **self._client_options()
        ).deployments

    @cached_property
    def compute(self) -> Any:
        from azure.mgmt.compute import ComputeManagementClient

        return ComputeManagementClient(self.credential, self.subscription, **self._client_options())

    @cached_property
    def network(self) -> Any:
        from azure.mgmt.network import NetworkManagementClient

        return NetworkManagementClient(self.credential, self.subscription, **self._client_options())

    @cached_property
    def identities(self) -> Any:
        from azure.mgmt.msi import ManagedServiceIdentityClient

        return ManagedServiceIdentityClient(
            self.credential, self.subscription, **self._client_options()
        )

    @cached_property
    def authorization(self) -> Any:
        from azure.mgmt.authorization import AuthorizationManagementClient

        return AuthorizationManagementClient(
            self.credential, self.subscription, **self._client_options()
        )


def make_clients(
    settings: AzureProviderConfig,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> AzureClients:
    """The clients for `settings`, from this process's environment (or `environ`).
    `options` go to every client (e.g. `polling_interval`)."""
    credential = make_credential(environ)
    endpoint = resource_manager(environ)
    return AzureClients(
        credential=credential,
        subscription=subscription_of(
            settings,
            environ,
            lambda: visible_subscriptions(credential, endpoint, **options),
        ),
        endpoint=endpoint,
        options=options,
    )


def arm_code(exc: BaseException) -> str:
    """ARM's error code of an SDK error (`SkuNotAvailable`, `AllocationFailed` ...), or ""."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return str(code) if code else ""


def arm_message(exc: BaseException) -> str:
    """One line of an SDK error: ARM's code and message where it gave them."""
    error = getattr(exc, "error", None)
    message = getattr(error, "message", None)
    code = arm_code(exc)
    if message:
        text = f"{code}: {message}" if code else str(message)
    else:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return " ".join(text.split())


def not_found(exc: BaseException) -> bool:
    """Whether an SDK error says the resource does not exist."""
    return type(exc).__name__ == "ResourceNotFoundError" or getattr(exc, "status_code", 0) == 404


def get_or_none(read: Callable[[], Any]) -> Any | None:
    """`read()` (an SDK `get`), or None when ARM says the resource does not exist; any
    other error as a ProviderError of one line."""
    try:
        return read()
    except Exception as exc:
        if not_found(exc):
            return None
        raise ProviderError(arm_message(exc)) from exc
