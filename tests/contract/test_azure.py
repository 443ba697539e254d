"""The provider contract (launcher.testing.contract) for Azure: the wire fake of Resource
Manager and Entra (fakes/azure/server.py) with the real Azure SDK, zones 1 and 2 of eastus,
every cluster in one resource group (as Ray's default `ray-cluster` group is shared),
stopped workers kept (deallocated)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.azure.server import AzureServer
from launcher.config.model import ClusterConfig
from launcher.providers.base import TAG_CLUSTER, NodeProvider
from launcher.providers.registry import SPECS
from launcher.testing.contract import (
    RUNS_COMMANDS,
    ConfigHarness,
    Harness,
    Lack,
    ProviderContract,
    Types,
)
from tests.conftest import REPO
from tests.contract.types_text import typed_config

GROUP = "rg-contract"
IMAGE = "imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2"
SCARCE_SIZE = "Standard_D4s_v3"


class AzureHarness(ConfigHarness):
    types = Types("head", "worker")

    def __init__(self, server: AzureServer) -> None:
        self.server = server
        # Cluster -> the principal of its head identity, as bootstrap made it (its role
        # assignment outlives the identity if purge forgets it).
        self.principals: dict[str, str] = {}

    def config(self, cluster: str) -> ClusterConfig:
        node = f"{{azure_arm_parameters: {{vmSize: Standard_D2s_v3, {IMAGE}}}}}"
        scarce = f"{{azure_arm_parameters: {{vmSize: {SCARCE_SIZE}, {IMAGE}}}}}"
        provider = (
            f"provider: {{type: azure, location: eastus, resource_group: {GROUP},"
            " availability_zone: '1,2', use_internal_ips: true, cache_stopped_nodes: true,"
            " subnet_mask: 127.19.0.0/16, allow_ssh_from: [127.0.0.0/8]}\n"
            "auth: {ssh_user: ubuntu}\n"
        )
        return typed_config(cluster, provider, node, scarce)

    def provider(self, cluster: str) -> NodeProvider:
        provider = super().provider(cluster)
        name = SPECS["azure"].derived_names(self.config(cluster))["head managed identity"]
        identity = self.server.clients().msi.user_assigned_identities.get(GROUP, name)
        self.principals[cluster] = identity.principal_id
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        self.server.set_capacity(SCARCE_SIZE, 0)  # in every zone of the location
        return "scarce"

    def restore(self) -> None:
        self.server.set_capacity(SCARCE_SIZE, None)

    def leftovers(self, cluster: str) -> list[str]:
        clients = self.server.clients()
        if not clients.resource.resource_groups.check_existence(GROUP):
            return []  # purged with the group its first cluster made (nothing else was left)
        names = SPECS["azure"].derived_names(self.config(cluster))
        ours = {
            names[kind].lower()
            for kind in ("virtual network", "network security group", "head managed identity")
        }
        prefix = names["VM name prefix"].lower() + "-"
        found = [
            f"{r.type} {r.name}"
            for r in clients.resource.resources.list_by_resource_group(GROUP)
            if (r.tags or {}).get(TAG_CLUSTER) == cluster
            or r.name.lower() in ours
            or r.name.lower().startswith(prefix)
        ]
        principal = self.principals.get(cluster)
        scope = f"/subscriptions/{self.server.subscription}/resourceGroups/{GROUP}"
        assignments = clients.authorization.role_assignments.list_for_scope(scope)
        return found + [
            f"role assignment {a.name}" for a in assignments if a.principal_id == principal
        ]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("contract-azure")
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        AzureServer(retry_after=0, lro_s=0.05) as server,
    ):
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
        for variable, value in server.env().items():
            monkeypatch.setenv(variable, value)
        monkeypatch.setenv("LAUNCHER_AZURE_POLL_S", "0.05")  # operations take 0.05 s here
        yield AzureHarness(server)


class TestAzure(ProviderContract):
    provider_type = "azure"
    example = REPO / "example-configs" / "azure-minimal.yaml"
    lacks = (
        Lack(
            RUNS_COMMANDS,
            "the fake's VMs are API records here "
            "(tests/test_azure_cluster.py runs commands on VMs as SSH hosts)",
        ),
    )
