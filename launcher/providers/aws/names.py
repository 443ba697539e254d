"""Names of what `up` makes on AWS for a cluster, derived from the cluster's name (pure).

Each is unique per exact cluster name and valid for AWS's rules (launcher/naming.py): IAM
compares role and instance profile names without case and allows 64 characters, and EC2
compares security group names without case. Key pair names take every cluster name as it is
(255 characters of a wide set), so they are what earlier versions made. The provider and
`plan` (spec.py) both call these, so `plan` prints the names `up` uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from launcher.naming import NameRule, derive

# AWS IAM role, instance profile and policy names: 64 of [A-Za-z0-9+=,.@_-], case-blind.
AWS_IAM = NameRule(64, r"[^A-Za-z0-9+=,.@_-]+", ignores_case=True, start=".", end=".")
# EC2 security group and key pair names: 255 characters, compared with case.
AWS_EC2 = NameRule(255, r"[^A-Za-z0-9 ._:/()#,@\[\]+=&;{}!$*-]+", start=".", end=".")
# EC2: "Names are case-insensitive and must be unique within the VPC" (CreateSecurityGroup).
EC2_CASE_BLIND = dataclasses.replace(AWS_EC2, ignores_case=True)


def head_role_name(cluster_name: str) -> str:
    """The head's IAM role, and its instance profile (same name)."""
    return derive("launcher-head-", cluster_name, AWS_IAM)


def default_group_name(cluster_name: str) -> str:
    return derive("launcher-", cluster_name, EC2_CASE_BLIND)


def default_key_name(cluster_name: str, region: str) -> str:
    return derive("launcher-", cluster_name, AWS_EC2, f"-{region}")


def profile_name(profile: Mapping[str, Any]) -> str | None:
    """The instance profile a node_config's `IamInstanceProfile` names, by Name or by Arn
    (`arn:aws:iam::ACCOUNT:instance-profile/PATH/NAME`); None when it names neither."""
    name = profile.get("Name")
    if isinstance(name, str) and name:
        return name
    arn = profile.get("Arn")
    if isinstance(arn, str) and ":instance-profile/" in arn:
        return arn.rsplit("/", 1)[-1] or None
    return None
