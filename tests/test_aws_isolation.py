"""AWS clusters that cannot hurt each other, and inputs that cannot hurt the launcher
(issue 25): names derived from a cluster name are unique and valid, and `plan` prints them;
the head's policy grants what its autoscaler calls and no more; the SSH rules follow the
config; bad regions and address ranges are refused at validate time. Against moto's
EC2/IAM server where AWS is involved; no Ray cluster."""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fakes.aws.server import LoopbackVpc, MotoServer, loopback_vpc
from launcher.cli.main import cli
from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import ConfigError, ProviderError
from launcher.providers.aws import provider as aws_provider
from launcher.providers.aws.iam import POLICY_NAME, head_policy
from launcher.providers.aws.names import AWS_EC2, AWS_IAM
from launcher.providers.aws.provider import AwsProvider
from launcher.providers.aws.spec import AwsSpec
from launcher.providers.base import NodeKind

LONG_A = "a" * 60 + "one"  # 63 characters, the longest cluster name; the first 60 shared
LONG_B = "a" * 60 + "two"
# EC2 compares security group names without case (CreateSecurityGroup's documentation).
EC2_CASE_BLIND = dataclasses.replace(AWS_EC2, ignores_case=True)
COLLIDING = ["ml.prod", "ml_prod", "ML-prod", "ml-prod", LONG_A, LONG_B]
RULES = {
    "head IAM role": AWS_IAM,
    "head instance profile": AWS_IAM,
    "security group": EC2_CASE_BLIND,
    "key pair": AWS_EC2,
}


def text(name: str, provider: str = "", workers: str = "", subnets: str = "") -> str:
    where = f", SubnetIds: [{subnets}]" if subnets else ""
    return f"""
cluster_name: {name}
max_workers: 4
provider: {{type: aws, region: us-west-2{provider}}}
auth: {{ssh_user: root}}
available_node_types:
  head:
    node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b{where}}}
    resources: {{CPU: 2}}
  od:
    node_config: {{InstanceType: m5.large, ImageId: ami-12c6146b{where}{workers}}}
    resources: {{CPU: 2}}
    max_workers: 4
head_node_type: head
"""


def parse(name: str, provider: str = "", workers: str = "", subnets: str = "") -> ClusterConfig:
    return parse_config(text(name, provider, workers, subnets), "c.yaml", Overrides())


# -- names ---------------------------------------------------------------------------------


def test_names_of_colliding_clusters_are_distinct_valid_and_those_plan_prints() -> None:
    spec = AwsSpec()
    names = {cluster: spec.derived_names(parse(cluster)) for cluster in COLLIDING}
    for cluster, derived in names.items():
        assert set(derived) == set(RULES), cluster
        for kind, name in derived.items():
            assert RULES[kind].valid(name), (kind, name)
        # `plan` shows the names `up` makes (it showed a 73-character role name).
        planned = {r.kind: r.name for r in spec.bootstrap_plan(parse(cluster))}
        assert planned["IAM role + instance profile"] == derived["head IAM role"]
        assert planned["security group"] == derived["security group"]
        assert planned["key pair"] == derived["key pair"]
    for kind, rule in RULES.items():
        for one, two in itertools.combinations(COLLIDING, 2):
            # IAM and EC2 group names are compared without case: so are they here.
            fold = str.lower if rule.ignores_case else str
            assert fold(names[one][kind]) != fold(names[two][kind]), (kind, one, two)
    # A name AWS takes as it is stays as it is.
    assert names["ml-prod"]["head IAM role"] == "launcher-head-ml-prod"
    assert names["ml-prod"]["security group"] == "launcher-ml-prod"
    assert names["ml-prod"]["key pair"] == "launcher-ml-prod-us-west-2"


def test_names_the_user_gives_are_not_derived() -> None:
    config = parse(
        "x",
        ", security_group: {GroupName: mine}, key_pair: {key_name: my-key}",
    )
    assert AwsSpec().derived_names(config) == {
        "head IAM role": "launcher-head-x",
        "head instance profile": "launcher-head-x",
    }
    planned = {r.kind: r.name for r in AwsSpec().bootstrap_plan(config)}
    assert planned["security group"] == "mine" and planned["key pair"] == "my-key"


# -- inputs --------------------------------------------------------------------------------


def problems_of(config_text: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(config_text, "c.yaml", Overrides())
    return [p.render("c.yaml") for p in raised.value.problems]


@pytest.mark.parametrize("region", ["../../etc", "us-west-2/../x", "US-WEST-2", "us west 2"])
def test_a_region_that_is_not_a_region_name_is_refused(region: str) -> None:
    found = problems_of(text("x").replace("region: us-west-2", f"region: '{region}'"))
    assert len(found) == 1 and "provider.region" in found[0], found
    assert "us-west-2" in found[0]  # the fix names a real one


@pytest.mark.parametrize(
    ("entry", "fix"),
    [
        ("999.1.1.1/99", "203.0.113.0/24"),
        ("10.0.0.1/8", "10.0.0.0/8"),
        ("2001:db8::/129", "2001:db8::/32"),
    ],
)
def test_an_ssh_source_that_is_not_a_network_is_refused_naming_it(entry: str, fix: str) -> None:
    found = problems_of(text("x", f", allow_ssh_from: [198.51.100.0/24, '{entry}']"))
    assert len(found) == 1, found
    assert "provider.allow_ssh_from[1]" in found[0] and entry in found[0] and fix in found[0]


def _cli(verb: str, path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [verb, str(path)])
    return result.exit_code, result.stdout + result.stderr


@pytest.mark.parametrize("world", ["0.0.0.0/0", "::/0"])
def test_ssh_open_to_the_world_is_a_warning_in_validate_and_plan(
    world: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    path = tmp_path / "c.yaml"
    path.write_text(text("x", f", allow_ssh_from: ['{world}']"))
    for verb in ("validate", "plan"):
        code, output = _cli(verb, path)
        assert code == 0, output
        warned = [line for line in output.splitlines() if "warning:" in line]
        assert len(warned) == 1 and "provider.allow_ssh_from[0]" in warned[0], output
        assert "opens SSH to every address" in warned[0]
    code, output = _cli("plan", path)
    assert f"SSH from every address on the internet ({world})" in output, output


# -- the head's policy ---------------------------------------------------------------------


def test_the_head_may_pass_exactly_the_roles_it_is_given_and_only_to_ec2() -> None:
    roles = ["arn:aws:iam::123456789012:role/workers"]
    policy = head_policy("c1", "us-west-2", "123456789012", roles)
    passing = [s for s in policy["Statement"] if "iam:PassRole" in str(s["Action"])]
    assert len(passing) == 1
    assert passing[0]["Resource"] == roles
    assert passing[0]["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    assert "iam:" not in str(head_policy("c1", "us-west-2", "123456789012"))


def test_plan_says_which_profiles_the_head_may_pass() -> None:
    config = parse("x", workers=", IamInstanceProfile: {Name: worker-profile}")
    role = next(r for r in AwsSpec().bootstrap_plan(config) if r.kind.startswith("IAM role"))
    assert "worker-profile (od)" in role.detail and "iam:PassRole" in role.detail
    assert "resolved at `up`" in role.detail


# -- against moto ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as running:
        yield running


@pytest.fixture
def vpc(server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LoopbackVpc:
    server.reset()
    server.apply_env(monkeypatch)
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    return loopback_vpc(server.client("ec2"))


def on_moto(vpc: LoopbackVpc, name: str, provider: str = "", workers: str = "") -> ClusterConfig:
    return parse(name, ", use_internal_ips: true" + provider, workers, vpc.subnet_ids[0])


def role_policy(server: MotoServer, role: str) -> dict[str, Any]:
    found = server.client("iam").get_role_policy(RoleName=role, PolicyName=POLICY_NAME)
    document = found["PolicyDocument"]
    return dict(json.loads(document) if isinstance(document, str) else document)


def own_cluster(policy: dict[str, Any]) -> set[str]:
    """The cluster names the policy's tag conditions name."""
    return set(re.findall(r"launcher-cluster': '([^']+)'", str(policy)))


def groups(server: MotoServer) -> dict[str, str]:
    found = server.client("ec2").describe_security_groups()["SecurityGroups"]
    return {g["GroupName"]: g["GroupId"] for g in found if g["GroupName"] != "default"}


def test_clusters_whose_names_share_60_characters_keep_their_own_role_and_group(
    server: MotoServer, vpc: LoopbackVpc
) -> None:
    one, two = on_moto(vpc, LONG_A), on_moto(vpc, LONG_B)
    AwsProvider(one).bootstrap()
    AwsProvider(two).bootstrap()
    iam = server.client("iam")
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    profiles = [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]]
    assert len(roles) == len(profiles) == len(groups(server)) == 2
    # Each role's policy is its own cluster's (a second `up` rewrote a shared one).
    assert sorted(own_cluster(role_policy(server, role)).pop() for role in roles) == [
        LONG_A,
        LONG_B,
    ]
    names = {c.cluster_name: AwsSpec().derived_names(c) for c in (one, two)}
    assert set(roles) == {n["head IAM role"] for n in names.values()}
    assert set(profiles) == {n["head instance profile"] for n in names.values()}
    assert set(groups(server)) == {n["security group"] for n in names.values()}
    # Purging one leaves the other's role, policy, profile, group and key pair alone.
    removed = AwsProvider(two).cleanup(purge=True)
    assert f"IAM role {names[LONG_B]['head IAM role']}" in removed
    left = names[LONG_A]
    assert own_cluster(role_policy(server, left["head IAM role"])) == {LONG_A}
    profile = iam.get_instance_profile(InstanceProfileName=left["head instance profile"])
    assert [r["RoleName"] for r in profile["InstanceProfile"]["Roles"]] == [left["head IAM role"]]
    assert set(groups(server)) == {left["security group"]}
    keys = server.client("ec2").describe_key_pairs()["KeyPairs"]
    assert [k["KeyName"] for k in keys] == [left["key pair"]]
    # And the remaining cluster still starts its head with its own profile.
    provider = AwsProvider(one)
    provider.bootstrap()
    provider.create_nodes(one.head_type, NodeKind.HEAD, 1, {})
    run = server.calls("RunInstances")[-1].call
    assert left["head instance profile"] in str(run)


def test_the_policy_lets_the_head_pass_the_worker_profile_s_role(
    server: MotoServer, vpc: LoopbackVpc
) -> None:
    iam = server.client("iam")
    role = iam.create_role(RoleName="workers", AssumeRolePolicyDocument="{}")["Role"]
    made = iam.create_instance_profile(InstanceProfileName="worker-profile")["InstanceProfile"]
    iam.add_role_to_instance_profile(InstanceProfileName="worker-profile", RoleName="workers")
    for given in ("{Name: worker-profile}", f"{{Arn: '{made['Arn']}'}}"):
        config = on_moto(vpc, "passes", workers=f", IamInstanceProfile: {given}")
        AwsProvider(config).bootstrap()
        policy = role_policy(server, "launcher-head-passes")
        passing = [s for s in policy["Statement"] if s["Action"] == "iam:PassRole"]
        assert [s["Resource"] for s in passing] == [[role["Arn"]]], given
    # A worker type without one: the next `up` takes the grant back.
    AwsProvider(on_moto(vpc, "passes")).bootstrap()
    assert "iam:PassRole" not in str(role_policy(server, "launcher-head-passes"))


def test_up_refuses_a_worker_profile_that_does_not_exist_before_making_anything(
    server: MotoServer, vpc: LoopbackVpc
) -> None:
    config = on_moto(vpc, "refused", workers=", IamInstanceProfile: {Name: no-such-profile}")
    with pytest.raises(ProviderError) as refused:
        AwsProvider(config).bootstrap()
    message = str(refused.value)
    assert "\n" not in message
    assert "no-such-profile" in message
    assert "available_node_types.od.node_config.IamInstanceProfile" in message
    assert server.client("iam").list_roles()["Roles"] == []
    assert server.client("ec2").describe_key_pairs()["KeyPairs"] == []
    assert groups(server) == {}


def _allowed(policy: dict[str, Any], action: str) -> bool:
    """Whether some statement names the action (IAM's wildcards included)."""
    for statement in policy["Statement"]:
        actions = statement["Action"]
        for allowed in [actions] if isinstance(actions, str) else actions:
            if fnmatch.fnmatchcase(action, allowed):
                return True
    return False


def test_the_head_s_policy_allows_every_call_its_autoscaler_makes(
    server: MotoServer, vpc: LoopbackVpc
) -> None:
    config = on_moto(vpc, "calls", workers=", InstanceMarketOptions: {MarketType: spot}")
    AwsProvider(config).bootstrap()
    server.clear_calls()
    head = AwsProvider(config, on_head=True)
    head.bootstrap()
    od = config.node_types["od"]
    workers = head.create_nodes(od, NodeKind.WORKER, 2, {}, request_id="r1")
    head.nodes()
    head.set_tags(workers[0].id, {"launcher-status": "up-to-date"})
    head.stop_nodes([w.id for w in workers])
    head.terminate_nodes([w.id for w in workers])
    head.cleanup()  # what autostop's `down` runs on the head
    called = {f"ec2:{c.call.action}" for c in server.calls() if c.call.action}
    assert "ec2:DescribeInstances" in called and "ec2:RunInstances" in called
    policy = role_policy(server, "launcher-head-calls")
    assert [a for a in sorted(called) if not _allowed(policy, a)] == []
    assert not _allowed(policy, "ec2:DescribeInstanceAttribute")


# -- the SSH rules follow the config ---------------------------------------------------------


def ssh_sources(server: MotoServer, name: str) -> list[str]:
    group = server.client("ec2").describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [name]}]
    )["SecurityGroups"][0]
    found = []
    for rule in group["IpPermissions"]:
        if rule.get("FromPort") == 22:
            found += [r["CidrIp"] for r in rule.get("IpRanges", [])]
            found += [r["CidrIpv6"] for r in rule.get("Ipv6Ranges", [])]
    return sorted(found)


def test_ssh_rules_follow_allow_ssh_from_and_leave_others_rules_alone(
    server: MotoServer, vpc: LoopbackVpc
) -> None:
    AwsProvider(on_moto(vpc, "ssh", ", allow_ssh_from: [198.51.100.0/24]")).bootstrap()
    ec2 = server.client("ec2")
    group_id = groups(server)["launcher-ssh"]
    ec2.authorize_security_group_ingress(  # added by hand: not the launcher's to remove
        GroupId=group_id,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "IpRanges": [{"CidrIp": "192.0.2.9/32"}],
            }
        ],
    )
    narrowed = ", allow_ssh_from: [203.0.113.0/24]"
    done = AwsProvider(on_moto(vpc, "ssh", narrowed)).bootstrap()
    assert ssh_sources(server, "launcher-ssh") == ["192.0.2.9/32", "203.0.113.0/24"]
    assert any("no longer allowed from 198.51.100.0/24" in line for line in done)
    assert AwsProvider(on_moto(vpc, "ssh", narrowed)).bootstrap() == []  # settled


def test_an_ipv6_ssh_source_is_allowed_as_ipv6(server: MotoServer, vpc: LoopbackVpc) -> None:
    sources = ", allow_ssh_from: [203.0.113.0/24, '2001:db8::/32']"
    AwsProvider(on_moto(vpc, "six", sources)).bootstrap()  # EC2 refused it as an IPv4 range
    assert ssh_sources(server, "launcher-six") == ["2001:db8::/32", "203.0.113.0/24"]
    AwsProvider(on_moto(vpc, "six", ", allow_ssh_from: [203.0.113.0/24]")).bootstrap()
    assert ssh_sources(server, "launcher-six") == ["203.0.113.0/24"]


def test_ssh_rule_follows_the_caller_s_address(
    server: MotoServer, vpc: LoopbackVpc, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse("moved", subnets=vpc.subnet_ids[0])  # SSH from the caller's address
    for address in ("198.51.100.7/32", "203.0.113.8/32"):
        monkeypatch.setattr(aws_provider, "public_address", lambda a=address: a)
        AwsProvider(config).bootstrap()
        assert ssh_sources(server, "launcher-moved") == [address]
