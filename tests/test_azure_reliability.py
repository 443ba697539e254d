"""Azure clusters survive a launcher killed at any moment: seeded random runs kill `up` (and
sometimes the `down` after it) with SIGKILL after a random delay, then require a second `up`
to converge on one head and `down --purge` to leave nothing: no VM, NIC, public IP or disk,
no network, security group, identity or role assignment, and no resource group it made.
Against the Azure wire fake with VMs as real SSH hosts (fakes/azure/server.py).

LAUNCHER_RELIABILITY_SEED and LAUNCHER_RELIABILITY_RUNS reproduce or widen the search.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.azure.server import AzureServer
from fakes.hosts.ssh import isolation_unavailable
from tests.azure_clusters import azure_vms, cli_env
from tests.cluster_helpers import kill_plan, killed_then_up, purged_leaves_nothing, run

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

SEED = int(os.environ.get("LAUNCHER_RELIABILITY_SEED", "15"))
RUNS = int(os.environ.get("LAUNCHER_RELIABILITY_RUNS", "4"))
NAME = "azure-chaos"
GROUP = "rg-azure-chaos"
IMAGE = "imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2"
CONFIG = f"""
cluster_name: {NAME}
max_workers: 1
provider:
  type: azure
  location: eastus
  resource_group: {GROUP}
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
head_node_type: head
setup_commands:
  - echo set up >> ~/setup.log
head_start_ray_commands:
  - echo "no Ray in this test" > ~/started.log
worker_start_ray_commands: []
"""


@dataclass
class Chaos:
    server: AzureServer
    path: Path
    env: dict[str, str]

    def heads(self) -> list[str]:
        return [
            v.name
            for v in self.server.vms()
            if v.tags.get("launcher-cluster") == NAME and v.provisioning_state != "Deleting"
        ]

    def left(self) -> list[str]:
        """What the cluster still holds: its group's resources, its role assignments, and
        the group itself (which `up` made here)."""
        clients = self.server.clients()
        if not clients.resource.resource_groups.check_existence(GROUP):
            return []
        found = [r.name for r in clients.resource.resources.list_by_resource_group(GROUP)]
        return [f"resource group {GROUP}", *found]


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    tmp = tmp_path_factory.mktemp("azure-chaos")
    with azure_vms() as (server, _hosts):
        path = tmp / "cluster.yaml"
        path.write_text(CONFIG)
        env = cli_env(server, tmp / "home")
        made = Chaos(server, path, env)
        yield made
        run("down", "-y", "--purge", str(path), env=env, timeout=300)


@pytest.mark.parametrize("index", range(RUNS))
def test_killed_commands_leave_nothing_that_the_next_up_and_down_miss(
    chaos: Chaos, index: int
) -> None:
    plan = kill_plan(SEED, index, up_max_s=6.0, down_max_s=2.0)
    killed_then_up(plan, chaos.path, chaos.env, down_args=("--purge",))
    assert len(chaos.heads()) == 1, f"{plan.what}: {chaos.heads()}"
    purged_leaves_nothing(plan, chaos.path, chaos.env, chaos.left)
