"""GCP clusters survive a launcher killed at any moment: seeded random runs kill `up` (and
sometimes the `down` after it) with SIGKILL after a random delay, then require a second `up`
to converge on one head and `down --purge` to leave no instance, firewall rule or service
account. Against the fake GCE with instances as real SSH hosts (fakes/gce/server.py).

LAUNCHER_RELIABILITY_SEED and LAUNCHER_RELIABILITY_RUNS reproduce or widen the search.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.gce.hosts import GceHosts
from fakes.gce.server import PROJECT, GceServer
from fakes.hosts.ssh import isolation_unavailable
from tests.cluster_helpers import kill_plan, killed_then_up, purged_leaves_nothing, run

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

SEED = int(os.environ.get("LAUNCHER_RELIABILITY_SEED", "15"))
RUNS = int(os.environ.get("LAUNCHER_RELIABILITY_RUNS", "6"))
IMAGE = "projects/debian-cloud/global/images/family/debian-12"
CONFIG = f"""
cluster_name: gcp-chaos
max_workers: 1
provider:
  type: gcp
  region: us-west1
  availability_zone: us-west1-a
  project_id: {PROJECT}
  use_internal_ips: true
  allow_ssh_from: [127.0.0.0/8]
auth:
  ssh_user: root
available_node_types:
  head:
    node_config:
      machineType: n1-standard-2
      disks: [{{boot: true, autoDelete: true, initializeParams: {{sourceImage: {IMAGE}}}}}]
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
    server: GceServer
    hosts: GceHosts
    path: Path
    env: dict[str, str]

    def left(self) -> list[str]:
        found = [
            i.name
            for i in self.server.instances()
            if i.labels.get("launcher-cluster") == "gcp-chaos"
        ]
        compute = self.server.client("compute")
        rules = compute.firewalls().list(project=PROJECT).execute().get("items") or []
        found += [r["name"] for r in rules if r["name"].startswith("launcher-gcp-chaos")]
        accounts = self.server.client("iam").projects().serviceAccounts()
        listed = accounts.list(name=f"projects/{PROJECT}").execute().get("accounts") or []
        return found + [a["email"] for a in listed if a["email"].startswith("launcher-gcp-chaos")]


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    tmp = tmp_path_factory.mktemp("gcp-chaos")
    with GceServer() as server, GceHosts(server) as hosts:
        path = tmp / "cluster.yaml"
        path.write_text(CONFIG)
        env = {**os.environ, **server.env(), "LAUNCHER_HOME": str(tmp / "home")}
        made = Chaos(server, hosts, path, env)
        yield made
        run("down", "-y", "--purge", str(path), env=env, timeout=300)
        hosts.check()


@pytest.mark.parametrize("index", range(RUNS))
def test_killed_commands_leave_nothing_that_the_next_up_and_down_miss(
    chaos: Chaos, index: int
) -> None:
    plan = kill_plan(SEED, index, up_max_s=8.0, down_max_s=3.0)
    killed_then_up(plan, chaos.path, chaos.env)
    heads = [
        i
        for i in chaos.server.instances()
        if i.labels.get("launcher-cluster") == "gcp-chaos" and i.status != "TERMINATED"
    ]
    assert len(heads) == 1, f"{plan.what}: {[h.name for h in heads]}"
    purged_leaves_nothing(plan, chaos.path, chaos.env, chaos.left)
