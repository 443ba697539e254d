"""Autostop on AWS, end to end against moto with instances as real SSH hosts: the head's
autoscaler stops the idle cluster by itself (workers, then the head, tagged autostopped);
`list --refresh` finds it autostopped; `up` starts the same instances again and Ray runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.aws.server import tag
from fakes.hosts.ssh import isolation_unavailable
from tests.aws_clusters import AwsCluster, aws_config, running_cluster
from tests.cluster_helpers import wait_for

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

CONFIG = aws_config(
    """\
  head:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    max_workers: 0
  worker:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    min_workers: 1
    max_workers: 2
""",
    max_workers=2,
    cache_stopped=True,
)


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsCluster]:
    with running_cluster(tmp_path, CONFIG) as cluster:
        yield cluster


def test_autostop_stops_the_idle_cluster_and_up_starts_the_same_instances_again(
    aws: AwsCluster,
) -> None:
    up = aws.run("up", "-y", str(aws.path))
    assert up.returncode == 0, up.stdout + up.stderr
    first = {i["InstanceId"]: tag(i, "launcher-node-kind") for i in aws.instances("running")}
    assert sorted(first.values()) == ["head", "worker"]
    shown = aws.run("status", str(aws.path))
    assert "Autostop: off" in shown.stdout, shown.stdout
    set_it = aws.run("autostop", str(aws.path), "-i", "0.05")
    assert set_it.returncode == 0, set_it.stderr
    assert "Autostop set for cluster aws-e2e: stop after 0.05 min idle" in set_it.stdout
    # The head acts alone: the idle cluster's workers and then its head are stopped.
    wait_for(
        lambda: {i["InstanceId"] for i in aws.instances("stopped")} == set(first),
        240,
        "every instance stopped",
    )
    assert not aws.instances("terminated", "shutting-down")
    (head,) = [i for i in aws.instances("stopped") if tag(i, "launcher-node-kind") == "head"]
    assert tag(head, "launcher-autostopped")
    listed = aws.run("list", "--refresh", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["clusters"]
    assert row["state"] == "autostopped" and row["nodes"] == [], row
    assert row["per_hour_now"] == 0.0 and row["cost_so_far"] > 0
    # Started again with a longer autostop (the head keeps the last one set, as it keeps its
    # disk); a cluster coming up is never idle meanwhile.
    again = aws.run("up", "-y", "-i", "30", str(aws.path))
    assert again.returncode == 0, again.stdout + again.stderr
    running = {i["InstanceId"] for i in aws.instances("running")}
    assert running == set(first), (running, first)  # the same machines, started again
    wait_for(
        lambda: "0.0/2.0 CPU" in aws.run("exec", str(aws.path), "ray status").stdout,
        60,
        "Ray on both started instances",
    )
    assert "Autostop: stop after 30 min idle" in aws.run("status", str(aws.path)).stdout
    listed = aws.run("list", "--json")
    (row,) = json.loads(listed.stdout)["clusters"]
    assert row["state"] == "up" and row["autostop"] is not None
