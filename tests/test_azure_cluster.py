"""An Azure cluster end to end: the launcher CLI against the Azure wire fake
(fakes/azure/server.py), where each running VM is a real SSH host at its NIC's loopback
address running real Ray (fakes/azure/hosts.py). The VMs' sessions have only what a real
VM has (its metadata service, trusted CAs): the subscription, the endpoints and the head's
identity come from the launcher, and the autoscaler on the head launches the spot worker
as that identity, hears its eviction notice and replaces it; a script is submitted, a shell
attached and files copied both ways; autostop deallocates the idle cluster and `up` starts the same VMs again.
One cluster for the module;
`down --purge` removes the resource group `up` made. The admin user is `azureuser`: Azure
(and the fake) refuse `root`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.azure.hosts import AzureHosts
from fakes.azure.server import AzureServer
from fakes.hosts.ssh import COUNT_NODES, isolation_unavailable, ray_start_commands
from tests.azure_clusters import azure_vms, cli_env
from tests.cluster_helpers import on_terminal, run, wait_for

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

NAME = "azure-e2e"
GROUP = "rg-azure-e2e"
IMAGE = "imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2"
CONFIG = f"""
cluster_name: {NAME}
max_workers: 1
idle_timeout_minutes: 5
provider:
  type: azure
  location: eastus
  resource_group: {GROUP}
  availability_zone: "1,2"
  use_internal_ips: true
  subnet_mask: 127.19.0.0/16
  allow_ssh_from: [127.0.0.0/8]
auth:
  ssh_user: azureuser
available_node_types:
  head:
    node_config: {{azure_arm_parameters: {{vmSize: Standard_D2s_v3, {IMAGE}}}}}
    resources: {{CPU: 1}}
    max_workers: 0
  spot:
    node_config:
      azure_arm_parameters: {{vmSize: Standard_D2s_v3, {IMAGE}, priority: Spot}}
    resources: {{CPU: 1}}
    min_workers: 1
    max_workers: 1
head_node_type: head
setup_commands:
  - echo "setup on $LAUNCHER_NODE_IP" >> ~/setup.log
""" + ray_start_commands(num_cpus=1)


@dataclass
class AzureCluster:
    server: AzureServer
    hosts: AzureHosts
    path: Path
    env: dict[str, str]

    def cli(self, verb: str, *args: str, timeout: float = 400) -> tuple[int, str]:
        """`launcher VERB [-y] CLUSTER.yaml ARGS...`."""
        flags = ("-y",) if verb in ("up", "down") else ()
        result = run(verb, *flags, str(self.path), *args, env=self.env, timeout=timeout)
        return result.returncode, result.stdout + result.stderr

    def vms(self) -> dict[str, str]:
        """The cluster's VMs: name -> node kind."""
        return {
            v.name: v.tags.get("launcher-node-kind", "")
            for v in self.server.clients().compute.virtual_machines.list(GROUP)
            if (v.tags or {}).get("launcher-cluster") == NAME
        }


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureCluster]:
    tmp = tmp_path_factory.mktemp("azure")
    with azure_vms() as (server, hosts):
        path = tmp / "cluster.yaml"
        path.write_text(CONFIG)
        cluster = AzureCluster(server, hosts, path, cli_env(server, tmp / "home"))
        yield cluster
        cluster.cli("down", "--purge")


def test_up_runs_ray_on_azure_vms_and_the_head_acts_as_its_identity(azure: AzureCluster) -> None:
    code, out = azure.cli("up")
    assert code == 0, out
    assert "created managed identity" in out and "launcher installed on the head" in out
    kinds = azure.vms()
    (head,) = [name for name, kind in kinds.items() if kind == "head"]
    (spot,) = [name for name, kind in kinds.items() if kind == "worker"]
    code, out = azure.cli("exec", COUNT_NODES)
    assert code == 0 and "alive 2" in out, out
    head_host, spot_host = azure.hosts.host(head), azure.hosts.host(spot)
    assert head_host is not None and spot_host is not None
    assert head_host.path("~/setup.log").read_text().startswith("setup on 127.19.")
    # The spot worker was made by the head's autoscaler, with the head identity's token: its
    # VM by the deployment the head sent.
    (create,) = [
        c.call for c in azure.server.calls("virtualMachines.create") if c.call.name == spot
    ]
    deployment = str(create.origin).removeprefix("deployment:")
    sent = [c.call for c in azure.server.calls("deployments.create*") if c.call.name == deployment]
    assert sent and all(c.origin == head for c in sent), [c.origin for c in sent]
    # ... and it watches Azure's Scheduled Events for its eviction notice.
    wait_for(
        lambda: spot_host.path("~/.launcher-notice-watch.pid").is_file(),
        30,
        "the spot worker's notice watcher",
    )


def test_an_evicted_spot_worker_gives_notice_and_is_replaced(azure: AzureCluster) -> None:
    kinds = azure.vms()
    (head,) = [name for name, kind in kinds.items() if kind == "head"]
    (spot,) = [name for name, kind in kinds.items() if kind == "worker"]
    head_host = azure.hosts.host(head)
    assert head_host is not None
    azure.server.evict(spot, notice_s=8)  # a Preempt event, then the VM deallocated
    monitor = head_host.path("~/.launcher/head/monitor.log")
    wait_for(
        lambda: f"{spot} (spot): reclaim notice" in monitor.read_text(),
        60,
        "the head's autoscaler to hear the worker's eviction notice",
    )

    def replaced() -> bool:
        workers = [n for n, kind in azure.vms().items() if kind == "worker"]
        return spot not in workers and len(workers) == 1

    try:
        wait_for(replaced, 120, "the evicted worker deleted and a new spot worker made")
    except AssertionError as exc:
        views = [(v.name, v.provisioning_state, v.power, v.zone) for v in azure.server.vms()]
        raise AssertionError(
            f"{exc}; VMs {views}; monitor:\n{monitor.read_text()[-3000:]}"
        ) from exc
    # Nothing of the evicted VM is left (its NIC and OS disk went with it).
    clients = azure.server.clients()
    left = [r.name for r in clients.resource.resources.list_by_resource_group(GROUP)]
    assert not [name for name in left if name.startswith(spot)], left
    wait_for(
        lambda: "alive 2" in azure.cli("exec", COUNT_NODES)[1],
        120,
        "Ray to count the head and the new worker",
    )


def test_submit_attach_and_rsync_both_ways_reach_the_head(
    azure: AzureCluster, tmp_path: Path
) -> None:
    kinds = azure.vms()
    (head,) = [name for name, kind in kinds.items() if kind == "head"]
    head_host = azure.hosts.host(head)
    assert head_host is not None
    script = tmp_path / "count.py"
    script.write_text(
        "import ray\nray.init()\n"
        'print("submitted sees", sum(n["Alive"] for n in ray.nodes()), "nodes")\n'
    )
    code, out = azure.cli("submit", str(script))
    assert code == 0 and "submitted sees 2 nodes" in out, out
    local = tmp_path / "up.txt"
    local.write_text("from the laptop\n")
    code, out = azure.cli("rsync-up", str(local), "~/from-laptop.txt")
    assert code == 0, out
    assert head_host.path("~/from-laptop.txt").read_text() == "from the laptop\n"
    typed = b"echo on-$LAUNCHER_NODE_IP-$((6 * 7)); exit 3\n"
    output, code = on_terminal(["attach", str(azure.path)], azure.env, typed)
    assert code == 3 and f"on-{head_host.ip}-42" in output, output
    head_host.path("~/from-head.txt").write_text("made on the head\n")
    back = tmp_path / "down.txt"
    code, out = azure.cli("rsync-down", "~/from-head.txt", str(back))
    assert code == 0, out
    assert back.read_text() == "made on the head\n"


def test_autostop_deallocates_the_idle_cluster_and_up_starts_the_same_vms(
    azure: AzureCluster,
) -> None:
    before = azure.vms()
    code, out = azure.cli("autostop", "-i", "0.05")
    assert code == 0, out

    def power() -> dict[str, str]:
        return {v.name: v.power for v in azure.server.vms() if v.name in before}

    wait_for(
        lambda: set(power().values()) == {"deallocated"},
        240,
        "every VM of the idle cluster deallocated",
    )
    (head,) = [name for name, kind in before.items() if kind == "head"]
    head_vm = next(v for v in azure.server.vms() if v.name == head)
    assert head_vm.tags.get("launcher-autostopped")
    listed = run("list", "--refresh", "--json", env=azure.env)
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["clusters"]
    assert row["state"] == "autostopped" and row["nodes"] == [], row
    code, out = azure.cli("up")
    assert code == 0, out
    assert azure.vms() == before  # the same VMs, started again
    assert set(power().values()) == {"running"}
    wait_for(
        lambda: "alive 2" in azure.cli("exec", COUNT_NODES)[1],
        120,
        "Ray on both started VMs",
    )


def test_down_purge_removes_the_resource_group_up_made(azure: AzureCluster) -> None:
    code, out = azure.cli("down", "--purge")
    assert code == 0, out
    assert "managed identity" in out and f"resource group {GROUP}" in out
    clients = azure.server.clients()
    assert not clients.resource.resource_groups.check_existence(GROUP)
    assert azure.server.resource_ids() == [], azure.server.resource_ids()
