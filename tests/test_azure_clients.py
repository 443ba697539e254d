"""The Azure provider's clients (launcher/providers/azure/clients.py) built from the
environment a user's Azure setup gives, against the wire fake (fakes/azure/): the default
credential chain with a custom authority host, the Resource Manager endpoint and the CA from
the environment, ARM's errors as one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.azure.server import AzureServer
from launcher.config.loader import parse_config
from launcher.errors import UsageError
from launcher.providers.azure.clients import (
    arm_code,
    arm_message,
    authority_is_known,
    make_clients,
    resource_manager,
    subscription_of,
)
from launcher.providers.azure.model import AzureProviderConfig


def _settings(extra: str = "") -> AzureProviderConfig:
    config = parse_config(
        "cluster_name: c\nprovider: {type: azure, location: eastus, resource_group: rg"
        f"{extra}}}\n",
        "inline",
    )
    assert isinstance(config.provider, AzureProviderConfig)
    return config.provider


@pytest.fixture(scope="module")
def server() -> Iterator[AzureServer]:
    with AzureServer(retry_after=0, lro_s=0.05) as server:
        yield server


def test_the_clients_reach_resource_manager_with_the_default_credential_chain(
    server: AzureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    assert not authority_is_known()  # 127.0.0.1: msal's instance discovery must be off
    clients = make_clients(_settings(), polling_interval=0.05)
    assert clients.subscription == server.subscription
    assert clients.endpoint == server.url
    clients.resources.resource_groups.create_or_update("rg", {"location": "eastus"})
    assert clients.resources.resource_groups.check_existence("rg")
    assert [g.name for g in clients.resources.resource_groups.list()] == ["rg"]
    with pytest.raises(Exception) as caught:
        clients.compute.virtual_machines.get("rg", "no-such-vm")
    assert arm_code(caught.value) == "ResourceNotFound"
    line = arm_message(caught.value)
    assert line.startswith("ResourceNotFound: ") and "\n" not in line
    # Nothing went anywhere but the fake (its log has every call, each authenticated).
    assert server.calls("resourceGroups.*") and all(
        c.call.principal for c in server.calls("resourceGroups.*")
    )


def test_known_authorities_and_endpoints() -> None:
    assert authority_is_known({})
    assert authority_is_known({"AZURE_AUTHORITY_HOST": "login.microsoftonline.us"})
    assert authority_is_known({"AZURE_AUTHORITY_HOST": "https://login.chinacloudapi.cn/"})
    assert not authority_is_known({"AZURE_AUTHORITY_HOST": "https://adfs.contoso.example"})
    assert resource_manager({}) == "https://management.azure.com"
    assert resource_manager({"AZURE_RESOURCE_MANAGER_ENDPOINT": "https://arm.local/"}) == (
        "https://arm.local"
    )


def test_the_subscription_is_the_configs_else_the_environments_else_a_clear_line() -> None:
    sub = "00000000-0000-0000-0000-000000000001"
    assert subscription_of(_settings(f", subscription_id: '{sub}'"), {}) == sub
    assert subscription_of(_settings(), {"AZURE_SUBSCRIPTION_ID": sub}) == sub
    with pytest.raises(UsageError) as caught:
        subscription_of(_settings(), {})
    assert "provider.subscription_id" in str(caught.value) and "\n" not in str(caught.value)
