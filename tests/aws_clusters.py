"""A whole AWS cluster under test: moto's server, its instances as real SSH hosts, a
loopback VPC, a cluster file and the environment the `launcher` CLI runs with against
them (tests/test_aws_*.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakes.aws.server import InstanceHosts, LoopbackVpc, MotoServer, loopback_vpc, tag
from fakes.hosts.ssh import IsolatedHost

LIVE = ("pending", "running", "stopping", "stopped")


@dataclass
class AwsCluster:
    server: MotoServer
    hosts: InstanceHosts
    vpc: LoopbackVpc
    path: Path
    env: dict[str, str]
    name: str = "aws-e2e"

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "launcher", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def instances(self, *states: str) -> list[dict[str, Any]]:
        reply = self.server.client("ec2").describe_instances(
            Filters=[
                {"Name": "tag:launcher-cluster", "Values": [self.name]},
                {"Name": "instance-state-name", "Values": list(states or LIVE)},
            ]
        )
        return [i for r in reply["Reservations"] for i in r["Instances"]]

    def of_type(self, node_type: str) -> list[dict[str, Any]]:
        return [i for i in self.instances() if tag(i, "launcher-node-type") == node_type]


@contextlib.contextmanager
def running_cluster(
    tmp: Path,
    config: str,
    name: str = "aws-e2e",
    on_boot: Callable[[IsolatedHost], None] | None = None,
) -> Iterator[AwsCluster]:
    """`config` (with AMI, SUBNET_A and SUBNET_B standing for moto's image and two subnets
    of the VPC) written to tmp/cluster.yaml; `launcher down` and the hosts' check at exit."""
    with MotoServer() as server, InstanceHosts(server, on_boot=on_boot) as hosts:
        ec2 = server.client("ec2")
        vpc = loopback_vpc(ec2)
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        a, b, _ = vpc.subnet_ids
        path = tmp / "cluster.yaml"
        path.write_text(config.replace("AMI", ami).replace("SUBNET_A", a).replace("SUBNET_B", b))
        env = {**os.environ, **server.env(), "LAUNCHER_HOME": str(tmp / "home")}
        for variable in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(variable, None)
        cluster = AwsCluster(server, hosts, vpc, path, env, name)
        yield cluster
        cluster.run("down", "-y", str(path))
        hosts.check()


def aws_config(
    node_types: str, *, max_workers: int = 3, cache_stopped: bool = False, extra: str = ""
) -> str:
    """A cluster file for `running_cluster`: `node_types` is the available_node_types
    section's body (indented two spaces), `extra` more top-level YAML; Ray started with one
    CPU per node."""
    from fakes.hosts.ssh import ray_start_commands

    return (
        "cluster_name: aws-e2e\n"
        f"max_workers: {max_workers}\n"
        "idle_timeout_minutes: 5\n"
        "provider:\n"
        "  type: aws\n"
        "  region: us-west-2\n"
        "  use_internal_ips: true\n"
        f"  cache_stopped_nodes: {'true' if cache_stopped else 'false'}\n"
        "auth:\n"
        "  ssh_user: root\n"
        "available_node_types:\n"
        f"{node_types}"
        "head_node_type: head\n"
        f"{extra}" + ray_start_commands(num_cpus=1)
    )
