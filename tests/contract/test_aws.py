"""The provider contract (launcher.testing.contract) for AWS: moto's EC2/IAM server, one
loopback VPC with three subnets (three zones)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.aws.server import LoopbackVpc, MotoServer, loopback_vpc
from launcher.config.model import ClusterConfig
from launcher.providers.base import NodeProvider
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


class AwsHarness(ConfigHarness):
    types = Types("head", "worker")

    def __init__(self, server: MotoServer, vpc: LoopbackVpc) -> None:
        self.server, self.vpc = server, vpc
        ec2 = server.client("ec2")
        self.image = str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])

    def config(self, cluster: str) -> ClusterConfig:
        subnets = ", ".join(self.vpc.subnet_ids)
        node = f"{{InstanceType: m5.large, ImageId: {self.image}, SubnetIds: [{subnets}]}}"
        provider = (
            "provider: {type: aws, region: us-west-2, use_internal_ips: true}\n"
            "auth: {ssh_user: root}\n"
        )
        return typed_config(cluster, provider, node, node)

    def exhaust(self, provider: NodeProvider) -> str:
        self.server.faults.add("RunInstances", "InsufficientInstanceCapacity")
        return "scarce"

    def restore(self) -> None:
        self.server.faults.clear()

    def leftovers(self, cluster: str) -> list[str]:
        ec2 = self.server.client("ec2")
        live = ec2.describe_instances(
            Filters=[
                {"Name": "tag:launcher-cluster", "Values": [cluster]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                },
            ]
        )["Reservations"]
        found = [i["InstanceId"] for r in live for i in r["Instances"]]
        names = SPECS["aws"].derived_names(self.config(cluster))
        groups = ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [names["security group"]]}]
        )["SecurityGroups"]
        found += [g["GroupId"] for g in groups]
        keys = ec2.describe_key_pairs()["KeyPairs"]
        found += [k["KeyName"] for k in keys if k["KeyName"] == names["key pair"]]
        roles = self.server.client("iam").list_roles()["Roles"]
        found += [r["RoleName"] for r in roles if r["RoleName"] == names["head IAM role"]]
        return found


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("contract-aws")
    with pytest.MonkeyPatch.context() as monkeypatch, MotoServer() as server:
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
        server.apply_env(monkeypatch)
        yield AwsHarness(server, loopback_vpc(server.client("ec2")))


class TestAws(ProviderContract):
    provider_type = "aws"
    example = REPO / "example-configs" / "aws-minimal.yaml"
    lacks = (
        Lack(
            RUNS_COMMANDS,
            "moto's instances are API records here "
            "(tests/test_aws_cluster.py runs commands on instances as SSH hosts)",
        ),
    )
