"""The Azure provider's clients (launcher/providers/azure/clients.py) built from the
environment a user's Azure setup gives, against the wire fake (fakes/azure/): the default
credential chain with a custom authority host, the Resource Manager endpoint and the CA from
the environment, ARM's errors as one line."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.azure.server import AzureServer
from launcher.config.loader import parse_config
from launcher.errors import ProviderError, UsageError
from launcher.providers.azure import names
from launcher.providers.azure.bodies import nic_body, node_tags, public_ip_body, vm_body
from launcher.providers.azure.clients import (
    arm_code,
    arm_message,
    authority_is_known,
    make_clients,
    poll_interval,
    resource_manager,
    subscription_of,
)
from launcher.providers.azure.identity import ensure_identity, remove_identity
from launcher.providers.azure.model import AzureProviderConfig
from launcher.providers.azure.network import ensure_group, ensure_network, remove_network
from launcher.providers.azure.vms import TAG_PRIVATE_IP, power_state, to_node
from launcher.providers.nodes import NodeState


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
    # The calls reached the fake, each with a token of the principal.
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


def test_the_subscription_is_the_configs_else_the_environments_else_a_clear_line(
    tmp_path: Path,
) -> None:
    sub = "00000000-0000-0000-0000-000000000001"
    no_cli = {"AZURE_CONFIG_DIR": str(tmp_path)}  # no Azure CLI login here
    assert subscription_of(_settings(f", subscription_id: '{sub}'"), no_cli) == sub
    assert subscription_of(_settings(), {**no_cli, "AZURE_SUBSCRIPTION_ID": sub}) == sub
    with pytest.raises(UsageError) as caught:
        subscription_of(_settings(), no_cli)
    assert "provider.subscription_id" in str(caught.value) and "\n" not in str(caught.value)


def test_without_one_given_the_subscription_is_the_cli_default_else_the_only_one_seen(
    tmp_path: Path,
) -> None:
    one, two = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
    cli = {"AZURE_CONFIG_DIR": str(tmp_path)}
    # `az login` then `az account set`: the profile (written with a byte-order mark) says
    # which is the default.
    profile = {"subscriptions": [{"id": one, "isDefault": False}, {"id": two, "isDefault": True}]}
    (tmp_path / "azureProfile.json").write_text("\ufeff" + json.dumps(profile), "utf-8")
    assert subscription_of(_settings(), cli, lambda: [one]) == two
    (tmp_path / "azureProfile.json").unlink()
    assert subscription_of(_settings(), cli, lambda: [one]) == one
    with pytest.raises(UsageError) as caught:
        subscription_of(_settings(), cli, lambda: [two, one])
    line = str(caught.value)
    assert f"sees 2 ({one}, {two})" in line and "provider.subscription_id" in line
    with pytest.raises(UsageError, match="sees none"):
        subscription_of(_settings(), cli, lambda: [])


def test_the_only_subscription_a_login_sees_is_found_through_the_api(
    server: AzureServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    server.clear_calls()
    clients = make_clients(_settings(), polling_interval=0.05)
    assert clients.subscription == server.subscription
    assert server.calls("subscriptions.list*")


def test_the_polling_interval_is_two_seconds_unless_the_environment_says() -> None:
    assert poll_interval({}) == 2.0
    assert poll_interval({"LAUNCHER_AZURE_POLL_S": " 0.25 "}) == 0.25
    for bad in ("fast", "0", "-1", "61"):
        with pytest.raises(UsageError) as caught:
            poll_interval({"LAUNCHER_AZURE_POLL_S": bad})
        text = str(caught.value)
        assert "LAUNCHER_AZURE_POLL_S" in text and "unset it" in text and "\n" not in text


def test_a_nodes_bodies_make_a_vm_that_takes_its_nic_disk_and_ip_with_it(
    server: AzureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    clients = make_clients(_settings(), polling_interval=0.05)
    clients.resources.resource_groups.create_or_update("rg", {"location": "eastus"})
    vnet = {
        "location": "eastus",
        "properties": {
            "addressSpace": {"addressPrefixes": ["127.19.0.0/16"]},
            "subnets": [{"name": "s", "properties": {"addressPrefix": "127.19.0.0/16"}}],
        },
    }
    network = clients.network
    made = network.virtual_networks.begin_create_or_update("rg", "v", vnet).result()
    subnet_id = made.subnets[0].id
    tags = {"launcher-cluster": "c", "launcher-node-kind": "worker", TAG_PRIVATE_IP: "127.19.0.9"}
    node_config = {
        "azure_arm_parameters": {
            "vmSize": "Standard_D2s_v3",
            "imagePublisher": "microsoft-dsvm",
            "imageOffer": "ubuntu-2204",
            "imageSku": "2204-gen2",
            "priority": "Spot",
            "billingProfile": {"maxPrice": 0.05},
            "vmTags": {"team": "ml", "launcher-cluster": "not-this"},
        }
    }
    ip = network.public_ip_addresses.begin_create_or_update(
        "rg", "n1-ip", public_ip_body("eastus", "2", tags)
    ).result()
    assert ip.ip_address
    nic = network.network_interfaces.begin_create_or_update(
        "rg", "n1-nic", nic_body("eastus", subnet_id, tags, public_ip_id=ip.id)
    ).result()
    assert nic.ip_configurations[0].private_ip_address.startswith("127.19.")
    body = vm_body(
        node_config,
        name="n1",
        location="eastus",
        zone="2",
        tags=node_tags(node_config, tags),
        admin_user="ubuntu",
        public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5 test",
        nic_id=nic.id,
    )
    vm = clients.compute.virtual_machines.begin_create_or_update("rg", "n1", body).result()
    assert (vm.priority, vm.eviction_policy, vm.billing_profile.max_price) == (
        "Spot",
        "Deallocate",
        0.05,
    )
    assert vm.zones == ["2"] and vm.hardware_profile.vm_size == "Standard_D2s_v3"
    assert vm.tags == {**tags, "team": "ml"}  # the launcher's tags over the user's
    listed = list(clients.compute.virtual_machines.list("rg", expand="instanceView"))
    node = to_node(listed[0], internal=True)
    assert node is not None and node.state is NodeState.RUNNING and node.zone == "2"
    assert node.ip == "127.19.0.9" and "team" in node.tags
    server.evict("n1", notice_s=0, wait=True)
    evicted = clients.compute.virtual_machines.get("rg", "n1", expand="instanceView")
    assert power_state(evicted) == "deallocated"
    gone = to_node(evicted, internal=True)
    assert gone is not None and gone.state is NodeState.PREEMPTED
    assert to_node(evicted, internal=True, answered={"n1"}) is None
    clients.compute.virtual_machines.begin_delete("rg", "n1").result()
    left = {r.name for r in clients.resources.resources.list_by_resource_group("rg")}
    assert left == {"v"}  # the NIC, public IP and OS disk went with the VM


def test_the_network_is_made_once_reused_and_purged_only_where_it_is_ours(
    server: AzureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    settings = _settings(", subnet_mask: 127.19.0.0/16, allow_ssh_from: [198.51.100.7/32]")
    settings = dataclasses.replace(settings, resource_group="net-rg")
    clients = make_clients(settings, polling_interval=0.05)
    assert ensure_group(clients, settings, "ml.prod") == ["created resource group net-rg in eastus"]
    made, done = ensure_network(clients, settings, "ml.prod", ["198.51.100.7/32"])
    assert len(done) == 2 and made.subnet_id.endswith("/subnets/launcher-ml.prod-subnet")
    # A second up, from a new process: nothing made, the same network.
    again = make_clients(settings, polling_interval=0.05)
    assert ensure_group(again, settings, "ml.prod") == []
    assert ensure_network(again, settings, "ml.prod", ["198.51.100.7/32"]) == (made, [])
    # A new caller address updates the rule in place.
    _, done = ensure_network(again, settings, "ml.prod", ["203.0.113.9/32"])
    assert done == ["updated network security group launcher-ml.prod-nsg (SSH from 203.0.113.9/32)"]
    # Another cluster of the group (ml_prod) has its own; purging ml.prod leaves it.
    other, _ = ensure_network(again, settings, "ml_prod", ["198.51.100.7/32"])
    assert other.subnet_id != made.subnet_id
    assert remove_network(again, settings, "ml.prod") == [
        "virtual network launcher-ml.prod-vnet",
        "network security group launcher-ml.prod-nsg",
    ]
    left = {r.name for r in again.resources.resources.list_by_resource_group("net-rg")}
    assert left == {names.vnet("ml_prod"), names.security_group("ml_prod")}


def test_the_heads_identity_is_granted_its_group_only_and_purged_only_if_ours(
    server: AzureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    settings = dataclasses.replace(_settings(), resource_group="id-rg")
    clients = make_clients(settings, polling_interval=0.05)
    ensure_group(clients, settings, "c")
    # Entra replicates a new principal for a while: the grant is tried again meanwhile.
    monkeypatch.setattr(server, "principal_delay", 0.5)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(0.2)

    head, done = ensure_identity(clients, settings, "c", sleep=sleep)
    assert done == [
        "created managed identity launcher-c-head (the head's)",
        "granted launcher-c-head Contributor on resource group id-rg only",
    ]
    assert waits and server.calls("roleAssignments.*")
    refused = [c for c in server.calls("roleAssignments.*") if c.error == "PrincipalNotFound"]
    assert refused
    scope = f"/subscriptions/{server.subscription}/resourceGroups/id-rg"
    granted = list(clients.authorization.role_assignments.list_for_scope(scope))
    assert [(a.principal_id, a.scope) for a in granted] == [(head.principal_id, scope)]
    assert ensure_identity(clients, settings, "c") == (head, [])  # a second up
    # The user's own identity (msi_name) is used as it is, and never removed.
    mine = dataclasses.replace(settings, msi_name="launcher-c-head")
    assert ensure_identity(clients, mine, "c") == (head, [])
    assert remove_identity(clients, mine, "c") == []
    assert remove_identity(clients, settings, "c") == [
        "role assignment of launcher-c-head on id-rg",
        "managed identity launcher-c-head",
    ]
    assert not list(clients.authorization.role_assignments.list_for_scope(scope))
    missing = dataclasses.replace(settings, msi_name="nope")
    with pytest.raises(ProviderError, match=r"provider\.msi_name: no managed identity nope"):
        ensure_identity(clients, missing, "c")
