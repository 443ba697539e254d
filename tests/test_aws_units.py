"""The AWS provider's pure parts: RunInstances requests, instances read as nodes, security
group rules, the head's IAM policy."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

from launcher.config.frozen import freeze
from launcher.providers.aws.clients import error_message
from launcher.providers.aws.iam import (
    HEAD_DESCRIBE_ACTIONS,
    PRICE_ACTIONS,
    head_policy,
    head_role_name,
)
from launcher.providers.aws.instances import launch_config_digest, to_node
from launcher.providers.aws.launch import (
    LaunchContext,
    Placement,
    placements_to_try,
    run_request,
    subnet_ids,
)
from launcher.providers.aws.names import profile_name
from launcher.providers.aws.network import missing_rules, stale_ssh_rules, wanted_rules
from launcher.providers.base import NodeKind, NodeState

A = Placement("subnet-a", "us-west-2a")
B = Placement("subnet-b", "us-west-2b")
CONTEXT = LaunchContext(
    placements=(A, B),
    image_id="ami-default",
    key_name="launcher-key",
    security_group_id="sg-1",
    instance_profile_arn="arn:aws:iam::123:instance-profile/launcher-head-c",
)
OURS = {"launcher-cluster": "c", "launcher-node-kind": "worker"}


def request(node_config: dict[str, object], context: LaunchContext = CONTEXT) -> dict[str, object]:
    return run_request(freeze(node_config), 3, B, context, OURS, {"launcher-cluster": "c"}, "tok")


def tag_map(req: dict[str, object], kind: str) -> dict[str, str]:
    specs = req["TagSpecifications"]
    assert isinstance(specs, list)
    found = [s for s in specs if s["ResourceType"] == kind]
    assert len(found) == 1, specs
    return {t["Key"]: t["Value"] for t in found[0]["Tags"]}


def test_node_config_passes_through_and_the_launcher_adds_only_what_is_missing() -> None:
    req = request(
        {
            "InstanceType": "m5.large",
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}],
            "SubnetIds": ["subnet-a", "subnet-b"],
            "MetadataOptions": {"HttpTokens": "required"},
        }
    )
    assert req["InstanceType"] == "m5.large"
    assert req["BlockDeviceMappings"] == [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}]
    assert req["MetadataOptions"] == {"HttpTokens": "required"}
    assert "SubnetIds" not in req  # ours, not a RunInstances argument
    assert req["SubnetId"] == "subnet-b"
    assert req["SecurityGroupIds"] == ["sg-1"]
    assert req["KeyName"] == "launcher-key"
    assert req["ImageId"] == "ami-default"
    assert req["IamInstanceProfile"] == {"Arn": CONTEXT.instance_profile_arn}
    assert (req["MinCount"], req["MaxCount"], req["ClientToken"]) == (1, 3, "tok")


def test_what_the_user_names_is_never_overridden() -> None:
    req = request(
        {
            "InstanceType": "m5.large",
            "ImageId": "ami-mine",
            "KeyName": "my-key",
            "SecurityGroupIds": ["sg-mine"],
            "IamInstanceProfile": {"Name": "my-profile"},
        },
        LaunchContext(placements=(A, B), key_name="launcher-key", security_group_id="sg-1"),
    )
    assert req["ImageId"] == "ami-mine"
    assert req["KeyName"] == "my-key"
    assert req["SecurityGroupIds"] == ["sg-mine"]
    assert req["IamInstanceProfile"] == {"Name": "my-profile"}


def test_launch_template_keeps_its_own_key() -> None:
    req = request(
        {"LaunchTemplate": {"LaunchTemplateName": "t", "Version": "$Latest"}},
        LaunchContext(placements=(A, B), key_name="launcher-key"),
    )
    assert "KeyName" not in req
    assert "ImageId" not in req


def test_tags_merge_with_the_users_and_ours_win() -> None:
    req = request(
        {
            "InstanceType": "m5.large",
            "InstanceMarketOptions": {"MarketType": "spot"},
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [
                        {"Key": "team", "Value": "ml"},
                        {"Key": "launcher-cluster", "Value": "forged"},
                    ],
                },
                {"ResourceType": "volume", "Tags": [{"Key": "backup", "Value": "no"}]},
            ],
        }
    )
    assert tag_map(req, "instance") == {**OURS, "team": "ml"}
    assert tag_map(req, "volume") == {"backup": "no", "launcher-cluster": "c"}
    assert tag_map(req, "network-interface") == {"launcher-cluster": "c"}
    assert tag_map(req, "spot-instances-request") == {"launcher-cluster": "c"}


def test_on_demand_launch_tags_no_spot_request() -> None:
    req = request({"InstanceType": "m5.large"})
    kinds = {s["ResourceType"] for s in req["TagSpecifications"]}  # type: ignore[attr-defined]
    assert "spot-instances-request" not in kinds


def test_network_interfaces_keep_their_subnets_and_get_the_group() -> None:
    config = {
        "InstanceType": "m5.large",
        "NetworkInterfaces": [
            {"DeviceIndex": 1, "SubnetId": "subnet-y"},
            {"DeviceIndex": 0, "SubnetId": "subnet-x", "Groups": ["sg-x"]},
        ],
    }
    assert subnet_ids(freeze(config)) == ("subnet-x",)
    req = request(config)
    assert "SubnetId" not in req and "SecurityGroupIds" not in req
    assert req["NetworkInterfaces"] == [
        {"DeviceIndex": 1, "SubnetId": "subnet-y", "Groups": ["sg-1"]},
        {"DeviceIndex": 0, "SubnetId": "subnet-x", "Groups": ["sg-x"]},
    ]


def test_subnets_are_tried_in_order_without_avoided_zones() -> None:
    assert subnet_ids(freeze({"SubnetIds": ["s2", "s1"]})) == ("s2", "s1")
    assert subnet_ids(freeze({"SubnetId": "s3"})) == ("s3",)
    assert placements_to_try([A, B], ()) == [A, B]
    assert placements_to_try([A, B], {"us-west-2a"}) == [B]
    assert placements_to_try([A, B], {"us-west-2a", "us-west-2b"}) == []


def instance(state: str, kind: str = "worker", reason: str | None = None) -> dict[str, object]:
    data: dict[str, object] = {
        "InstanceId": "i-1",
        "State": {"Name": state},
        "PrivateIpAddress": "10.0.0.5",
        "PublicIpAddress": "3.3.3.3",
        "Placement": {"AvailabilityZone": "us-west-2b"},
        "LaunchTime": datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC),
        "Tags": [
            {"Key": "launcher-cluster", "Value": "c"},
            {"Key": "launcher-node-kind", "Value": kind},
            {"Key": "launcher-node-type", "Value": "spot"},
        ],
    }
    if reason:
        data["StateReason"] = {"Code": reason, "Message": reason}
    return data


def test_instances_read_as_nodes() -> None:
    running = to_node(instance("running"), use_private_ip=False, acknowledged=())
    assert running is not None
    assert (running.kind, running.state, running.ip, running.zone, running.node_type) == (
        NodeKind.WORKER,
        NodeState.RUNNING,
        "3.3.3.3",
        "us-west-2b",
        "spot",
    )
    assert running.created_at == datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC).timestamp()
    private = to_node(instance("pending"), use_private_ip=True, acknowledged=())
    assert private is not None and private.ip == "10.0.0.5"
    assert private.state is NodeState.PENDING
    for state in ("stopping", "stopped", "shutting-down", "terminated"):
        assert to_node(instance(state), use_private_ip=True, acknowledged=()) is None
    untagged = {**instance("running"), "Tags": []}
    assert to_node(untagged, use_private_ip=True, acknowledged=()) is None


def test_a_reclaimed_spot_worker_is_preempted_until_answered() -> None:
    gone = instance("terminated", reason="Server.SpotInstanceTermination")
    node = to_node(gone, use_private_ip=True, acknowledged=())
    assert node is not None and node.state is NodeState.PREEMPTED and node.zone == "us-west-2b"
    assert to_node(gone, use_private_ip=True, acknowledged={"i-1"}) is None
    stopped = instance("stopped", reason="Server.SpotInstanceShutdown")
    assert to_node(stopped, use_private_ip=True, acknowledged=()) is not None
    user_terminated = instance("terminated", reason="Client.UserInitiatedShutdown")
    assert to_node(user_terminated, use_private_ip=True, acknowledged=()) is None
    head = instance("terminated", kind="head", reason="Server.SpotInstanceTermination")
    assert to_node(head, use_private_ip=True, acknowledged=()) is None


def test_launch_config_digest_follows_node_config() -> None:
    one = launch_config_digest(freeze({"InstanceType": "m5.large", "ImageId": "ami-1"}))
    same = launch_config_digest(freeze({"ImageId": "ami-1", "InstanceType": "m5.large"}))
    other = launch_config_digest(freeze({"InstanceType": "m5.xlarge", "ImageId": "ami-1"}))
    assert one == same != other


def test_security_group_rules_missing_are_found_and_present_ones_are_not_added_again() -> None:
    wanted = wanted_rules(
        "sg-1",
        ["203.0.113.7/32"],
        [
            {
                "IpProtocol": "tcp",
                "FromPort": 8265,
                "ToPort": 8265,
                "IpRanges": [{"CidrIp": "10.0.0.0/8"}],
            }
        ],
    )
    assert len(missing_rules(wanted, [])) == 3
    present = [
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1", "UserId": "123"}]},
        {
            "IpProtocol": "tcp",
            "FromPort": 22,
            "ToPort": 22,
            "IpRanges": [{"CidrIp": "203.0.113.7/32"}, {"CidrIp": "198.51.100.0/24"}],
        },
    ]
    left = missing_rules(wanted, present)
    assert [r["FromPort"] for r in left] == [8265]
    ssh = [r for r in wanted if r.get("FromPort") == 22]
    assert [r["IpRanges"][0]["CidrIp"] for r in ssh] == ["203.0.113.7/32"]  # never 0.0.0.0/0


def test_head_policy_limits_changes_to_the_clusters_tagged_instances() -> None:
    policy = head_policy("c1", "us-west-2", "123456789012")
    statements = {s["Sid"]: s for s in policy["Statement"]}
    manage = statements["ManageOwnInstances"]
    assert set(manage["Action"]) >= {"ec2:TerminateInstances", "ec2:StopInstances"}
    assert manage["Condition"] == {"StringEquals": {"ec2:ResourceTag/launcher-cluster": "c1"}}
    assert manage["Resource"] == "arn:aws:ec2:us-west-2:123456789012:instance/*"
    launch = statements["LaunchTaggedInstances"]
    assert launch["Condition"] == {"StringEquals": {"aws:RequestTag/launcher-cluster": "c1"}}
    # Nothing but describing is allowed on every resource without a condition, and only
    # what the head's autoscaler describes (its instances, and public prices): not, say,
    # any instance's user data.
    unlimited = [
        set(s["Action"])
        for s in policy["Statement"]
        if s["Resource"] == "*" and "Condition" not in s
    ]
    assert unlimited == [set(HEAD_DESCRIBE_ACTIONS), set(PRICE_ACTIONS)]
    assert PRICE_ACTIONS == ("ec2:DescribeSpotPriceHistory", "pricing:GetProducts")
    assert "Describe*" not in str(policy) and "DescribeInstanceAttribute" not in str(policy)
    assert "iam:" not in str(policy)  # no worker type names a profile: nothing to pass
    assert head_role_name("my-cluster_1") == "launcher-head-my-cluster_1"
    assert len(head_role_name("x" * 100)) == 64


def test_errors_of_the_callers_setup_name_the_fix() -> None:
    from botocore.exceptions import ClientError, NoCredentialsError

    refused = ClientError(
        {"Error": {"Code": "UnauthorizedOperation", "Message": "You are not authorized"}},
        "RunInstances",
    )
    assert error_message(refused) == (
        "UnauthorizedOperation: You are not authorized (the credentials' IAM policy does not "
        "allow this call; see the README's AWS permissions)"
    )
    assert "aws configure" in error_message(NoCredentialsError())
    capacity = ClientError(
        {"Error": {"Code": "InsufficientInstanceCapacity", "Message": "none left"}},
        "RunInstances",
    )
    assert error_message(capacity) == "InsufficientInstanceCapacity: none left"


def test_up_without_credentials_says_how_to_give_them(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BOTO"))} | {
        "LAUNCHER_HOME": str(tmp_path / "home"),
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",  # never ask a metadata address
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # nothing leaves this machine
    }
    config = Path(__file__).resolve().parents[1] / "example-configs" / "aws-minimal.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "up", "-y", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "Unable to locate credentials" in lines[0] and "aws configure" in lines[0]
    assert not (tmp_path / "home" / "keys").exists()  # nothing made on the way


def test_only_the_launcher_s_own_ssh_rules_for_sources_no_longer_wanted_are_stale() -> None:
    ours = {"Description": "launcher: SSH from the launcher's address"}
    present = [
        {
            "IpProtocol": "tcp",
            "FromPort": 22,
            "ToPort": 22,
            "IpRanges": [
                {"CidrIp": "198.51.100.7/32", **ours},  # the caller's old address
                {"CidrIp": "203.0.113.0/24", **ours},  # still wanted
                {"CidrIp": "192.0.2.9/32"},  # someone else's
            ],
            "Ipv6Ranges": [{"CidrIpv6": "2001:DB8::/32", **ours}],  # wanted, other spelling
        },
        {
            "IpProtocol": "tcp",
            "FromPort": 80,
            "ToPort": 80,
            "IpRanges": [{"CidrIp": "0.0.0.0/0", **ours}],
        },
    ]
    stale = stale_ssh_rules(present, ["203.0.113.0/24", "2001:db8::/32"])
    assert stale == [
        {
            "IpProtocol": "tcp",
            "FromPort": 22,
            "ToPort": 22,
            "IpRanges": [{"CidrIp": "198.51.100.7/32"}],
        }
    ]
    six = wanted_rules("sg-1", ["2001:db8::/32"], [])[1]
    assert six["Ipv6Ranges"][0]["CidrIpv6"] == "2001:db8::/32" and "IpRanges" not in six


def test_an_instance_profile_is_named_by_name_or_by_the_last_part_of_its_arn() -> None:
    assert profile_name({"Name": "workers"}) == "workers"
    arn = "arn:aws:iam::123456789012:instance-profile/team/ml/workers"
    assert profile_name({"Arn": arn}) == "workers"
    assert profile_name({"Arn": "arn:aws:iam::123456789012:role/workers"}) is None
    assert profile_name({}) is None
