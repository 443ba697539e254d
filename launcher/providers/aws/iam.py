"""The head node's IAM role and instance profile: it may manage only its own cluster's
instances.

The policy (a pure function of cluster, region, account and the roles it may pass) lets the
head launch instances only when they carry the cluster's tag, and start, stop, terminate or
retag only instances that already carry it. Describe calls cannot be limited by tag in EC2;
the head is allowed exactly the ones its autoscaler makes (`HEAD_DESCRIBE_ACTIONS`), so it
cannot read, for instance, another instance's user data (DescribeInstanceAttribute). A
worker type whose node_config names an instance profile is launched with it, which needs
iam:PassRole on that profile's role: `profile_roles` resolves those roles at `up`, and the
policy allows passing exactly them, to EC2 only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.aws.clients import AwsClients, boto_errors, error_message, is_not_found
from launcher.providers.aws.names import head_role_name
from launcher.providers.base import TAG_CLUSTER

POLICY_NAME = "launcher-head"
PROPAGATION_WAIT_S = 60.0  # a new instance profile is not usable by RunInstances at once
# What the head's provider describes (provider.py, bootstrap.py with create=False, images.py,
# network.py's lookups, and `cleanup` when autostop takes the cluster down); nothing else.
HEAD_DESCRIBE_ACTIONS = (
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotInstanceRequests",
    "ec2:DescribeSubnets",
)

# What the head's autoscaler reads prices with (launcher.pricing.aws): public prices only.
PRICE_ACTIONS = ("ec2:DescribeSpotPriceHistory", "pricing:GetProducts")

__all__ = ["HEAD_DESCRIBE_ACTIONS", "head_policy", "head_role_name", "profile_roles"]


def trust_policy() -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }


def head_policy(
    cluster_name: str, region: str, account: str, passed_roles: Sequence[str] = ()
) -> dict[str, Any]:
    instances = f"arn:aws:ec2:{region}:{account}:instance/*"
    own = {"StringEquals": {f"ec2:ResourceTag/{TAG_CLUSTER}": cluster_name}}
    statements = [
        {"Sid": "Look", "Effect": "Allow", "Action": list(HEAD_DESCRIBE_ACTIONS), "Resource": "*"},
        {"Sid": "ReadPrices", "Effect": "Allow", "Action": list(PRICE_ACTIONS), "Resource": "*"},
        {
            "Sid": "LaunchTaggedInstances",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": instances,
            "Condition": {"StringEquals": {f"aws:RequestTag/{TAG_CLUSTER}": cluster_name}},
        },
        {
            "Sid": "LaunchWithTheRest",
            "Effect": "Allow",
            "Action": "ec2:RunInstances",
            "Resource": [
                f"arn:aws:ec2:{region}:{account}:{kind}/*"
                for kind in (
                    "volume",
                    "network-interface",
                    "subnet",
                    "security-group",
                    "key-pair",
                    "spot-instances-request",
                )
            ]
            + [f"arn:aws:ec2:{region}::image/*", f"arn:aws:ec2:{region}:{account}:image/*"],
        },
        {
            "Sid": "TagAtLaunch",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": "*",
            "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
        },
        {
            "Sid": "ManageOwnInstances",
            "Effect": "Allow",
            "Action": [
                "ec2:CreateTags",
                "ec2:StartInstances",
                "ec2:StopInstances",
                "ec2:TerminateInstances",
            ],
            "Resource": instances,
            "Condition": own,
        },
        {
            "Sid": "CancelOwnSpotRequests",
            "Effect": "Allow",
            "Action": "ec2:CancelSpotInstanceRequests",
            "Resource": f"arn:aws:ec2:{region}:{account}:spot-instances-request/*",
            "Condition": own,
        },
    ]
    if passed_roles:
        statements.append(
            {
                "Sid": "PassWorkerRoles",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": sorted(set(passed_roles)),
                "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def profile_roles(clients: AwsClients, profiles: Mapping[str, str]) -> list[str]:
    """The ARNs of the roles of the instance profiles node types name (node type -> profile
    name), looked up in IAM. Raises ProviderError naming the node type when one is missing."""
    roles: list[str] = []
    for node_type, name in sorted(profiles.items()):
        try:
            found = clients.iam.get_instance_profile(InstanceProfileName=name)
        except boto_errors() as exc:
            where = f"available_node_types.{node_type}.node_config.IamInstanceProfile"
            if is_not_found(exc):
                raise ProviderError(
                    f"instance profile {name} ({where}) does not exist in IAM; create it, or "
                    "name an existing one there"
                ) from exc
            raise ProviderError(
                f"cannot read instance profile {name} ({where}): {error_message(exc)}; the "
                "credentials `up` runs with need iam:GetInstanceProfile to let the head pass "
                "its role"
            ) from exc
        roles += [str(role["Arn"]) for role in found["InstanceProfile"].get("Roles", ())]
    return roles


def find_head_profile(clients: AwsClients, cluster_name: str) -> str | None:
    """The ARN of the cluster's head instance profile, or None when it does not exist."""
    try:
        found = clients.iam.get_instance_profile(InstanceProfileName=head_role_name(cluster_name))
    except boto_errors() as exc:
        if is_not_found(exc):
            return None
        raise ProviderError(f"cannot read IAM instance profiles: {error_message(exc)}") from exc
    return str(found["InstanceProfile"]["Arn"])


def ensure_head_profile(
    clients: AwsClients, cluster_name: str, region: str, passed_roles: Sequence[str] = ()
) -> tuple[str, list[str]]:
    """The head's instance profile ARN, creating the role, its policy and the profile where
    missing (the policy is written every time, allowing `passed_roles` to be passed).
    Returns the ARN and what was created."""
    iam = clients.iam
    name = head_role_name(cluster_name)
    created: list[str] = []
    try:
        account = str(clients.sts.get_caller_identity()["Account"])
        try:
            iam.get_role(RoleName=name)
        except boto_errors() as exc:
            if not is_not_found(exc):
                raise
            iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(trust_policy()),
                Description=f"Head node of launcher cluster {cluster_name}",
                Tags=[{"Key": TAG_CLUSTER, "Value": cluster_name}],
            )
            created.append(f"IAM role {name}")
        # Written every time: cheap, and a policy edited by hand is put back.
        iam.put_role_policy(
            RoleName=name,
            PolicyName=POLICY_NAME,
            PolicyDocument=json.dumps(head_policy(cluster_name, region, account, passed_roles)),
        )
        arn = find_head_profile(clients, cluster_name)
        if arn is None:
            profile = iam.create_instance_profile(InstanceProfileName=name)
            arn = str(profile["InstanceProfile"]["Arn"])
            created.append(f"IAM instance profile {name}")
        roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
        if not any(r["RoleName"] == name for r in roles):
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    except boto_errors() as exc:
        raise ProviderError(
            f"cannot set up the head's IAM role {name}: {error_message(exc)}; give the head an "
            "existing profile with node_config.IamInstanceProfile, or use credentials that may "
            "create IAM roles"
        ) from exc
    return arn, created


def delete_head_profile(clients: AwsClients, cluster_name: str) -> list[str]:
    """Remove the head's instance profile and role (for `down --purge`)."""
    iam = clients.iam
    name = head_role_name(cluster_name)
    removed: list[str] = []
    errors = boto_errors()
    try:
        roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Roles"]
        for role in roles:
            iam.remove_role_from_instance_profile(
                InstanceProfileName=name, RoleName=role["RoleName"]
            )
        iam.delete_instance_profile(InstanceProfileName=name)
        removed.append(f"IAM instance profile {name}")
    except errors as exc:
        if not is_not_found(exc):
            raise ProviderError(
                f"cannot delete instance profile {name}: {error_message(exc)}"
            ) from exc
    try:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
        iam.delete_role(RoleName=name)
        removed.append(f"IAM role {name}")
    except errors as exc:
        if not is_not_found(exc):
            raise ProviderError(f"cannot delete IAM role {name}: {error_message(exc)}") from exc
    return removed


def is_profile_not_ready(exc: BaseException) -> bool:
    """RunInstances refuses an instance profile created moments ago (IAM is eventually
    consistent); such a launch is retried."""
    text = error_message(exc)
    return "iamInstanceProfile" in text or "Invalid IAM Instance Profile" in text


def wait_between_profile_retries(attempt: int) -> None:
    time.sleep(min(2.0 * (attempt + 1), 10.0))
