"""Autostop on GCP, end to end against the fake GCE with instances as real SSH hosts: with
`cache_stopped_nodes` the head's autoscaler stops the idle cluster (workers, then the head,
labelled autostopped); `list --refresh` finds it autostopped; `up` starts the same instances
again and Ray runs on both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.gce.server import PROJECT
from fakes.hosts.ssh import isolation_unavailable, ray_start_commands
from tests.cluster_helpers import wait_for
from tests.gcp_clusters import GcpCluster, running_gcp_cluster
from tests.test_gcp_cluster import NODE

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

CONFIG = f"""
cluster_name: gcp-e2e
max_workers: 2
idle_timeout_minutes: 5
provider:
  type: gcp
  region: us-west1
  availability_zone: us-west1-a
  project_id: {PROJECT}
  use_internal_ips: true
  allow_ssh_from: [127.0.0.0/8]
  cache_stopped_nodes: true
auth:
  ssh_user: root
available_node_types:
  head:
    node_config: {NODE}
    resources: {{CPU: 1}}
    max_workers: 0
  worker:
    node_config: {NODE}
    resources: {{CPU: 1}}
    min_workers: 1
    max_workers: 2
head_node_type: head
""" + ray_start_commands(num_cpus=1)


@pytest.fixture
def gcp(tmp_path: Path) -> Iterator[GcpCluster]:
    with running_gcp_cluster(tmp_path, CONFIG) as cluster:
        yield cluster


def test_autostop_stops_the_idle_cluster_and_up_starts_the_same_instances_again(
    gcp: GcpCluster,
) -> None:
    up = gcp.run("up", "-y", str(gcp.path))
    assert up.returncode == 0, up.stdout + up.stderr
    first = {i.name: i.labels["launcher-node-kind"] for i in gcp.instances()}
    assert sorted(first.values()) == ["head", "worker"]
    set_it = gcp.run("autostop", str(gcp.path), "-i", "0.05")
    assert set_it.returncode == 0, set_it.stderr
    wait_for(
        lambda: {i.name for i in gcp.instances() if i.status == "TERMINATED"} == set(first),
        240,
        "every instance stopped",
    )
    (head,) = [i for i in gcp.instances() if i.labels["launcher-node-kind"] == "head"]
    assert head.labels.get("launcher-autostopped")
    listed = gcp.run("list", "--refresh", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["clusters"]
    assert row["state"] == "autostopped" and row["nodes"] == [], row
    again = gcp.run("up", "-y", "-i", "30", str(gcp.path))
    assert again.returncode == 0, again.stdout + again.stderr
    running = {i.name for i in gcp.instances() if i.status == "RUNNING"}
    assert running == set(first), (running, first)  # the same machines, started again
    wait_for(
        lambda: "0.0/2.0 CPU" in gcp.run("exec", str(gcp.path), "ray status").stdout,
        60,
        "Ray on both started instances",
    )
