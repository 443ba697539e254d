"""The Azure NodeProvider (launcher/providers/azure/provider.py) against the wire fake with
the real SDK: bootstrap, launches by request id, capacity moving to the next zone, a quota
ending the launch, tags, removal with everything a node owns, and purge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.azure.server import AzureServer
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import CapacityError
from launcher.providers.azure.provider import AzureProvider
from launcher.providers.nodes import NodeKind, NodeState

CONFIG = """
cluster_name: {name}
max_workers: 4
provider:
  type: azure
  location: eastus
  resource_group: {group}
  availability_zone: "1,2"
  subnet_mask: 127.19.0.0/16
  allow_ssh_from: [127.0.0.1/32]
auth: {{ssh_user: ubuntu}}
available_node_types:
  head:
    resources: {{CPU: 2}}
    node_config:
      azure_arm_parameters: {{vmSize: Standard_D2s_v3, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2}}
  spot:
    min_workers: 0
    max_workers: 4
    resources: {{CPU: 2}}
    node_config:
      azure_arm_parameters: {{vmSize: Standard_D2s_v3, imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2, priority: Spot}}
head_node_type: head
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    with AzureServer(retry_after=1, lro_s=0.05) as server, pytest.MonkeyPatch.context() as mp:
        for name, value in server.env().items():
            mp.setenv(name, value)
        mp.setenv("LAUNCHER_HOME", str(tmp_path_factory.mktemp("az") / "home"))
        yield server


def _config(name: str, group: str) -> ClusterConfig:
    return parse_config(CONFIG.format(name=name, group=group), "inline")


def test_a_cluster_comes_and_goes_leaving_nothing(server: AzureServer) -> None:
    config = _config("c1", "rg1")
    provider = AzureProvider(config)
    done = provider.bootstrap()
    assert any("resource group rg1" in line for line in done)
    assert Path(provider._key).is_file()
    assert AzureProvider(config).bootstrap() == []  # a second up makes nothing
    head = provider.create_nodes(config.head_type, NodeKind.HEAD, 1, {}, request_id="h")
    assert len(head) == 1 and head[0].ip and head[0].ip.startswith("127.20.")  # public
    spot = config.node_types["spot"]
    workers = provider.create_nodes(spot, NodeKind.WORKER, 2, {}, request_id="r1")
    again = provider.create_nodes(spot, NodeKind.WORKER, 2, {}, request_id="r1")
    assert {n.id for n in again} == {n.id for n in workers}  # a repeated request: no more
    listed = AzureProvider(config).nodes()
    assert len(listed) == 3 and all(n.state is NodeState.RUNNING for n in listed)
    provider.set_tags(workers[0].id, {"k": "v"})
    tagged = {n.id: n for n in provider.nodes()}[workers[0].id]
    assert tagged.tags["k"] == "v" and tagged.tags["launcher-node-type"] == "spot"
    # A zone out of room: the rest go to the next one.
    server.set_capacity("Standard_D2s_v3", 0, zone="1")
    more = provider.create_nodes(spot, NodeKind.WORKER, 1, {}, request_id="r2")
    assert [n.zone for n in more] == ["2"]
    server.set_capacity("Standard_D2s_v3", 0, zone="2")
    with pytest.raises(CapacityError) as caught:
        provider.create_nodes(spot, NodeKind.WORKER, 1, {}, request_id="r3")
    assert caught.value.zones == ("1", "2")
    server.set_capacity("Standard_D2s_v3", 100, zone="1")
    server.set_capacity("Standard_D2s_v3", 100, zone="2")
    provider.terminate_nodes([n.id for n in provider.nodes()])
    assert provider.nodes() == []
    removed = provider.cleanup(purge=True)
    assert any("managed identity" in line for line in removed)
    left = {r.name for r in provider.clients.resources.resources.list_by_resource_group("rg1")}
    assert left == set()
