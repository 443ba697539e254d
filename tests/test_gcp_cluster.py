"""GCP clusters end to end: the launcher CLI against the fake GCE (fakes/gce/server.py), where
each RUNNING instance is a real SSH host on its 127.17.x.y address running real Ray
(fakes/gce/hosts.py). The autoscaler runs on the head from the wheel `up` installs there and
reaches the fake through the endpoint overrides and the instance's metadata server, as the
head's service account would on GCE.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.gce.server import PROJECT, Call
from fakes.hosts.ssh import COUNT_NODES, isolation_unavailable, ray_start_commands
from tests.cluster_helpers import wait_for
from tests.gcp_clusters import GcpCluster, running_gcp_cluster

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

IMAGE = "projects/debian-cloud/global/images/family/debian-12"
NODE = (
    "{machineType: n1-standard-2, disks: [{boot: true, autoDelete: true, "
    f"initializeParams: {{sourceImage: {IMAGE}}}}}]}}"
)
CONFIG = f"""
cluster_name: gcp-e2e
max_workers: 3
idle_timeout_minutes: 5
provider:
  type: gcp
  region: us-west1
  availability_zone: us-west1-a,us-west1-b
  project_id: {PROJECT}
  use_internal_ips: true
  allow_ssh_from: [127.0.0.0/8]
auth:
  ssh_user: root
available_node_types:
  head:
    node_config: {NODE}
    resources: {{CPU: 1}}
    max_workers: 0
  spot:
    node_config:
      machineType: n1-standard-2
      disks: [{{boot: true, autoDelete: true, initializeParams: {{sourceImage: {IMAGE}}}}}]
      scheduling: {{provisioningModel: SPOT, instanceTerminationAction: DELETE}}
    resources: {{CPU: 1}}
    min_workers: 1
    max_workers: 2
  ondemand:
    node_config: {NODE}
    resources: {{CPU: 1}}
    max_workers: 2
head_node_type: head
metadata:
  launcher:
    fallbacks:
      spot: [ondemand]
setup_commands:
  - echo "setup on $LAUNCHER_NODE_IP" >> ~/setup.log
""" + ray_start_commands(num_cpus=1)


@pytest.fixture(scope="module")
def gcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcpCluster]:
    with running_gcp_cluster(tmp_path_factory.mktemp("gcp"), CONFIG) as cluster:
        yield cluster


def test_up_runs_ray_on_gce_instances(gcp: GcpCluster) -> None:
    result = gcp.run("up", "-y", str(gcp.path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "created SSH key" in out and "created firewall rule" in out
    assert "launcher installed on the head" in out
    (head,) = [i for i in gcp.instances() if i.labels.get("launcher-node-kind") == "head"]
    (spot,) = gcp.of_type("spot")
    assert spot.termination == "DELETE"  # a spot instance, as the node type asks
    assert spot.labels["launcher-node-status"] == "up-to-date"
    assert any(user == "root" for user, _ in head.ssh_keys)  # the launcher's key, as asked
    counted = gcp.run("exec", str(gcp.path), COUNT_NODES)
    assert counted.returncode == 0, counted.stdout + counted.stderr
    assert "alive 2" in counted.stdout
    assert gcp.run("get-head-ip", str(gcp.path)).stdout.strip() == head.ip
    assert gcp.hosts.host(head.name).path("~/setup.log").read_text() == f"setup on {head.ip}\n"
    # The worker was launched by the head's autoscaler, through the head's own credentials.
    inserts = gcp.server.calls("compute.instances.insert")
    assert any(c.call.origin == head.name for c in inserts), [c.call.origin for c in inserts]


def _is_spot(call: Call) -> bool:
    scheduling = (call.body or {}).get("scheduling") or {}
    return bool(scheduling.get("provisioningModel") == "SPOT")


def test_a_reclaimed_spot_worker_is_replaced_by_its_fallback(gcp: GcpCluster) -> None:
    (spot,) = gcp.of_type("spot")
    refusal = gcp.server.faults.add(
        "compute.instances.insert", "ZONE_RESOURCE_POOL_EXHAUSTED", when=_is_spot
    )
    try:
        gcp.server.preempt(spot.name)  # DELETE: the instance is gone
        wait_for(
            lambda: any(
                i.labels.get("launcher-node-status") == "up-to-date"
                for i in gcp.of_type("ondemand")
            ),
            300,
            "an on-demand worker standing in for the reclaimed spot worker",
        )
    finally:
        gcp.server.faults.remove(refusal)
    refused = [c.call for c in gcp.server.calls("compute.instances.insert") if _is_spot(c.call)]
    assert {c.zone for c in refused} >= {"us-west1-a", "us-west1-b"}  # every zone first
    # Ray sees the head and the stand-in (the reclaimed node once its GCS lets it go).
    wait_for(
        lambda: "alive 2" in gcp.run("exec", str(gcp.path), COUNT_NODES).stdout,
        180,
        "Ray to count the head and the stand-in only",
    )


def test_down_leaves_no_instance_and_no_firewall_rule(gcp: GcpCluster) -> None:
    result = gcp.run("down", "-y", "--purge", str(gcp.path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Terminated" in result.stdout and "firewall rule" in result.stdout
    assert gcp.instances() == []
    firewalls = gcp.server.client("compute").firewalls().list(project=PROJECT).execute()
    assert not [f for f in firewalls.get("items") or () if f["name"].startswith("launcher-gcp-e2e")]
    assert "service account launcher-gcp-e2e@" in result.stdout
    accounts = gcp.server.client("iam").projects().serviceAccounts()
    listed = accounts.list(name=f"projects/{PROJECT}").execute().get("accounts") or []
    assert not [a for a in listed if a["email"].startswith("launcher-gcp-e2e@")]
