"""The Azure NodeProvider (launcher/providers/azure/provider.py) against the wire fake with
the real SDK: bootstrap, launches by request id, capacity moving to the next zone, a quota
ending the launch, tags, removal with everything a node owns, and purge."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    # Operations are polled every 0.05 s, as they take 0.05 s here (no Retry-After: with
    # Retry-After: 1 each of the module's ~50 long-running operations waited a second).
    with AzureServer(retry_after=0, lro_s=0.05) as server, pytest.MonkeyPatch.context() as mp:
        for name, value in server.env().items():
            mp.setenv(name, value)
        mp.setenv("LAUNCHER_AZURE_POLL_S", "0.05")
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
    # The group bootstrap made (tagged as the cluster's) goes too, with nothing left in it.
    assert "resource group rg1" in removed
    assert not server.clients().resource.resource_groups.check_existence("rg1")


def test_purge_keeps_a_group_the_cluster_did_not_make_or_that_holds_others(
    server: AzureServer,
) -> None:
    groups = server.clients().resource.resource_groups
    groups.create_or_update("rg3", {"location": "eastus"})  # the user's own group
    mine = AzureProvider(_config("c3", "rg3"))
    mine.bootstrap()
    removed = mine.cleanup(purge=True)
    assert removed and not any("resource group" in line for line in removed)
    assert groups.check_existence("rg3")
    assert list(server.clients().resource.resources.list_by_resource_group("rg3")) == []
    # A group cluster c4 made, which sibling c5 joined: c4's purge leaves it to c5's nodes.
    first, second = AzureProvider(_config("c4", "rg4")), AzureProvider(_config("c5", "rg4"))
    first.bootstrap()
    second.bootstrap()
    assert not any("resource group" in line for line in first.cleanup(purge=True))
    assert groups.check_existence("rg4")
    held = server.clients().resource.resources.list_by_resource_group("rg4")
    assert held and all((r.tags or {}).get("launcher-created-for") == "c5" for r in held)
    second.cleanup(purge=True)  # not the group's maker: its group stays
    assert groups.check_existence("rg4")


# Run on "the head" as its autoscaler would: lists the cluster's nodes with the credential
# azure-identity's default chain finds in this environment.
AS_THE_HEAD = """
import sys
from launcher.config.loader import parse_config
from launcher.providers.azure.provider import AzureProvider
config = parse_config(sys.stdin.read(), "inline")
print(sorted(n.id for n in AzureProvider(config, on_head=True).nodes()))
"""


def test_the_heads_commands_act_as_its_identity_and_spot_workers_watch(
    server: AzureServer,
) -> None:
    text = CONFIG.format(name="c2", group="rg2")
    config = parse_config(text, "inline")
    provider = AzureProvider(config)
    provider.bootstrap()
    (head,) = provider.create_nodes(config.head_type, NodeKind.HEAD, 1, {}, request_id="h")
    (spot,) = provider.create_nodes(config.node_types["spot"], NodeKind.WORKER, 1, {})
    regular = dataclasses.replace(spot, node_type="head")
    # Another process (`launcher exec`) knows the head only from its listing.
    access = AzureProvider(config).access
    env = access.node_env(head, head)
    identity = server.clients().msi.user_assigned_identities
    (made,) = list(identity.list_by_resource_group("rg2"))
    assert env["AZURE_CLIENT_ID"] == made.client_id != os.environ["AZURE_CLIENT_ID"]
    assert env["AZURE_SUBSCRIPTION_ID"] == os.environ["AZURE_SUBSCRIPTION_ID"]
    assert env["AZURE_RESOURCE_MANAGER_ENDPOINT"] == server.url
    assert not {"AZURE_CLIENT_SECRET", "AZURE_TENANT_ID"} & set(env)  # never the user's
    worker_env = access.node_env(spot, head)
    assert not any(k.startswith("AZURE_") for k in worker_env)
    # With that environment alone, on the head VM (its metadata service, the fake's CA), the
    # launcher lists the cluster as the head's identity.
    machine = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ["HOME"],
        "LAUNCHER_HOME": os.environ["LAUNCHER_HOME"],
        "AZURE_POD_IDENTITY_AUTHORITY_HOST": server.host_env(head.id)[
            "AZURE_POD_IDENTITY_AUTHORITY_HOST"
        ],
        "REQUESTS_CA_BUNDLE": str(server.ca_bundle),
        "NO_PROXY": "127.0.0.0/8,localhost",
        "AZURE_AUTHORITY_HOST": server.url,  # no Entra: a token from anywhere else fails
    }
    listed = subprocess.run(
        [sys.executable, "-c", AS_THE_HEAD],
        check=False,
        input=text,
        env={**machine, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.strip() == repr(sorted([head.id, spot.id]))
    (listing,) = [c for c in server.calls("virtualMachines.list") if c.call.rg == "rg2"][-1:]
    assert listing.call.origin == head.id and listing.call.principal == made.principal_id
    # A spot worker runs the Scheduled Events watcher beside Ray; the head and on-demand
    # workers none.
    (watch,) = access.after_ray_start(spot)
    assert "--cloud azure" in watch and spot.id in watch
    assert access.after_ray_start(head) == () == access.after_ray_start(regular)
    provider.terminate_nodes([head.id, spot.id])
    provider.cleanup(purge=True)


def test_an_evicted_spot_worker_is_deleted_when_answered_never_kept_for_reuse(
    server: AzureServer,
) -> None:
    config = _config("c6", "rg6")  # cache_stopped_nodes: Azure's default, on
    provider = AzureProvider(config)
    provider.bootstrap()
    spot = config.node_types["spot"]
    evictee, kept = provider.create_nodes(spot, NodeKind.WORKER, 2, {}, request_id="e")
    server.evict(evictee.id, notice_s=0.1, wait=True)
    head = AzureProvider(config, on_head=True)  # the autoscaler's, in another process
    states = {n.id: n.state for n in head.nodes()}
    assert states == {evictee.id: NodeState.PREEMPTED, kept.id: NodeState.RUNNING}
    head.stop_nodes([evictee.id, kept.id])  # the preempted one answered, the other freed
    assert head.nodes() == []
    assert [n.id for n in head.stopped_nodes()] == [kept.id]
    left = {r.name for r in server.clients().resource.resources.list_by_resource_group("rg6")}
    assert not {name for name in left if name.startswith(evictee.id)}  # VM, NIC, disk gone
    # A launch avoiding the kept worker's zone makes a new VM instead of starting it there.
    (fresh,) = head.create_nodes(
        spot, NodeKind.WORKER, 1, {}, avoid_zones=frozenset({kept.zone}), request_id="f"
    )
    assert fresh.id != kept.id and fresh.zone != kept.zone
    (again,) = head.create_nodes(spot, NodeKind.WORKER, 1, {}, request_id="g")
    assert again.id == kept.id  # resumed where no zone is avoided
    head.terminate_nodes([fresh.id, again.id])
    head.cleanup(purge=True)


def test_with_internal_ips_a_refused_worker_costs_no_public_ip_call(server: AzureServer) -> None:
    """A worker refused for capacity had no public IP made (use_internal_ips): none is
    deleted either (it was one ARM call wasted per refused node, answered 404)."""
    text = CONFIG.format(name="c-int", group="rg-int").replace(
        "  subnet_mask:", "  use_internal_ips: true\n  subnet_mask:"
    )
    config = parse_config(text, "inline")
    provider = AzureProvider(config)
    provider.bootstrap()
    server.set_capacity("Standard_D2s_v3", 0, zone="1")
    try:
        server.clear_calls()
        spot = config.node_types["spot"]
        (made,) = provider.create_nodes(spot, NodeKind.WORKER, 1, {}, request_id="int")
        assert made.zone == "2"
        assert server.calls("virtualMachines.create*")  # zone 1 was tried and refused
        assert server.calls("publicIPAddresses.*") == []
    finally:
        server.set_capacity("Standard_D2s_v3", 100, zone="1")
        provider.terminate_nodes([n.id for n in provider.nodes()])
        provider.cleanup(purge=True)


def _resources(server: AzureServer, kind: str, group: str) -> list[dict[str, Any]]:
    """The fake's resources of `kind` in `group`, as it holds them."""
    marker = f"/resourcegroups/{group}/providers/{kind}/".lower()
    found = (server.resource(i) for i in server.resource_ids() if marker in i.lower())
    return [r for r in found if r is not None]


def _client_calls(server: AzureServer, operation: str) -> list[str]:
    """The provider's own calls of `operation` (not those the fake's deployment engine made
    on its behalf, whose origin is the deployment)."""
    return [
        c.operation
        for c in server.calls(operation)
        if not str(c.call.origin or "").startswith("deployment:")
    ]


def test_a_launch_is_one_deployment_whose_output_gives_the_addresses(server: AzureServer) -> None:
    """Three workers in one zone: one listing, then one template deployment (no NIC or VM
    call of the provider's own, no read of each VM), the nodes' addresses from its output; a provider
    that did not launch them (the head's) learns them with one NIC listing, then none; the
    same request again makes nothing more."""
    config = _config("c-dep", "rg-dep")
    provider = AzureProvider(config)
    provider.bootstrap()
    spot = config.node_types["spot"]
    try:
        server.clear_calls()
        made = provider.create_nodes(spot, NodeKind.WORKER, 3, {}, request_id="dep")
        assert len(made) == 3 and all(n.ip for n in made)
        assert len(_client_calls(server, "deployments.create*")) == 1
        for operation in ("networkInterfaces.*", "publicIPAddresses.*"):
            assert _client_calls(server, operation) == [], operation
        # One listing (a repeated request finds what the first made), no VM call of its own.
        assert _client_calls(server, "virtualMachines.*") == ["virtualMachines.list"]
        assert {n.zone for n in made} == {"1"}
        private = {
            str(nic["name"]).removesuffix("-nic"): nic["properties"]["ipConfigurations"][0][
                "properties"
            ]["privateIPAddress"]
            for nic in _resources(server, "Microsoft.Network/networkInterfaces", "rg-dep")
        }
        public = {
            str(ip["name"]).removesuffix("-ip"): ip["properties"]["ipAddress"]
            for ip in _resources(server, "Microsoft.Network/publicIPAddresses", "rg-dep")
        }
        assert {n.id: n.ip for n in made} == {n.id: public[n.id] for n in made}

        on_head = AzureProvider(config, on_head=True)
        server.clear_calls()
        listed = {n.id: n.ip for n in on_head.nodes()}
        assert listed == {n.id: private[n.id] for n in made}
        assert len(_client_calls(server, "networkInterfaces.list*")) == 1
        assert _client_calls(server, "publicIPAddresses.*") == []  # internal: not needed
        server.clear_calls()
        assert {n.id: n.ip for n in on_head.nodes()} == listed
        assert _client_calls(server, "networkInterfaces.*") == []

        server.clear_calls()
        again = provider.create_nodes(spot, NodeKind.WORKER, 3, {}, request_id="dep")
        assert sorted(n.id for n in again) == sorted(n.id for n in made)
        assert _client_calls(server, "deployments.*") == []
    finally:
        provider.terminate_nodes([n.id for n in provider.nodes()])
        provider.cleanup(purge=True)


def test_a_zone_out_of_capacity_leaves_nothing_of_what_it_refused(server: AzureServer) -> None:
    """Zone 1 refuses: the launch's nodes come up in zone 2 under names of their own, and the
    failed VMs of zone 1, their NICs and public IPs are gone when create_nodes returns."""
    config = _config("c-full", "rg-full")
    provider = AzureProvider(config)
    provider.bootstrap()
    server.set_capacity("Standard_D2s_v3", 0, zone="1")
    try:
        made = provider.create_nodes(
            config.node_types["spot"], NodeKind.WORKER, 2, {}, request_id="full"
        )
        assert [n.zone for n in made] == ["2", "2"] and all(n.ip for n in made)
        ids = {n.id for n in made}
        vms = _resources(server, "Microsoft.Compute/virtualMachines", "rg-full")
        assert {vm["name"] for vm in vms} == ids
        for kind, suffix in (
            ("Microsoft.Network/networkInterfaces", "-nic"),
            ("Microsoft.Network/publicIPAddresses", "-ip"),
        ):
            left = {
                str(r["name"]).removesuffix(suffix) for r in _resources(server, kind, "rg-full")
            }
            assert left == ids, kind
    finally:
        server.set_capacity("Standard_D2s_v3", 100, zone="1")
        provider.terminate_nodes([n.id for n in provider.nodes()])
        provider.cleanup(purge=True)
