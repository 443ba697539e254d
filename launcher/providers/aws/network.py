"""Subnets to launch in and the cluster's security group.

Subnets: the ones node_config names (in order), else the default VPC's default subnet of
each zone in `provider.availability_zone` (in that order), else of every zone.

The security group (`launcher-CLUSTER` unless named) lets the cluster's nodes talk to each
other freely and lets SSH in only from the caller: `provider.allow_ssh_from` when given,
else the VPC's own address range with `use_internal_ips` (the caller is inside it), else the
caller's public address as AWS sees it (https://checkip.amazonaws.com). Each `up` brings the
SSH rules it made (marked with `SSH_RULE_NOTE`) to that: a caller's old address, or a range
since left out of `allow_ssh_from`, loses its rule.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.aws.clients import (
    AwsClients,
    boto_errors,
    error_message,
    is_duplicate,
    is_not_found,
)
from launcher.providers.aws.launch import Placement
from launcher.providers.base import TAG_CLUSTER

SSH_RULE_NOTE = "launcher: SSH from the launcher's address"
PEER_RULE_NOTE = "launcher: all traffic between the cluster's nodes"


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    vpc_id: str


def describe_subnets(clients: AwsClients, ids: Sequence[str]) -> dict[str, Subnet]:
    try:
        found = clients.ec2.describe_subnets(SubnetIds=list(ids))["Subnets"]
    except boto_errors() as exc:
        raise ProviderError(
            f"cannot use subnets {', '.join(ids)}: {error_message(exc)}; check node_config "
            "SubnetIds/SubnetId and provider.region"
        ) from exc
    return {s["SubnetId"]: Subnet(s["SubnetId"], s["AvailabilityZone"], s["VpcId"]) for s in found}


def default_subnets(clients: AwsClients, region: str, zones: Sequence[str]) -> list[Subnet]:
    """The default VPC's default subnets, in the order of `zones` (all zones when empty)."""
    filters = [{"Name": "default-for-az", "Values": ["true"]}]
    if zones:
        filters.append({"Name": "availability-zone", "Values": list(zones)})
    try:
        found = clients.ec2.describe_subnets(Filters=filters)["Subnets"]
    except boto_errors() as exc:
        raise ProviderError(f"cannot list subnets in {region}: {error_message(exc)}") from exc
    subnets = [Subnet(s["SubnetId"], s["AvailabilityZone"], s["VpcId"]) for s in found]
    if not subnets:
        where = ", ".join(zones) if zones else region
        raise ProviderError(
            f"no default subnet in {where}; name your subnets in node_config.SubnetIds"
        )
    order = {zone: i for i, zone in enumerate(zones)}
    return sorted(subnets, key=lambda s: (order.get(s.zone, len(order)), s.zone))


def placements(subnets: Iterable[Subnet]) -> tuple[Placement, ...]:
    return tuple(Placement(s.id, s.zone) for s in subnets)


def vpc_cidrs(clients: AwsClients, vpc_id: str) -> list[str]:
    try:
        vpc = clients.ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
    except boto_errors() as exc:
        raise ProviderError(f"cannot read VPC {vpc_id}: {error_message(exc)}") from exc
    blocks = [b["CidrBlock"] for b in vpc.get("CidrBlockAssociationSet", ())]
    return blocks or [vpc["CidrBlock"]]


def wanted_rules(
    group_id: str, ssh_from: Sequence[str], extra: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Inbound rules of the cluster's group: one per (protocol, ports, source)."""
    rules: list[dict[str, Any]] = [
        {
            "IpProtocol": "-1",
            "UserIdGroupPairs": [{"GroupId": group_id, "Description": PEER_RULE_NOTE}],
        }
    ]
    for cidr in ssh_from:
        rules.append({**_SSH, **_ranges(cidr, SSH_RULE_NOTE)})
    rules.extend(dict(rule) for rule in extra)
    return rules


_SSH = {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22}


def _ranges(cidr: str, note: str | None = None) -> dict[str, Any]:
    """The source part of a permission: IPv6 ranges go in Ipv6Ranges, as EC2 requires."""
    described = {"Description": note} if note else {}
    if ":" in cidr:
        return {"Ipv6Ranges": [{"CidrIpv6": cidr, **described}]}
    return {"IpRanges": [{"CidrIp": cidr, **described}]}


def _network(cidr: str) -> str:
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        return cidr


def stale_ssh_rules(
    present: Sequence[Mapping[str, Any]], ssh_from: Sequence[str]
) -> list[dict[str, Any]]:
    """The SSH permissions the launcher made (they carry its note) for sources it no longer
    allows: an address the caller had before, or one left out of `allow_ssh_from` since.
    Rules anyone else added are left alone."""
    wanted = {_network(c) for c in ssh_from}
    stale: list[dict[str, Any]] = []
    for rule in present:
        if (rule.get("IpProtocol"), rule.get("FromPort"), rule.get("ToPort")) != ("tcp", 22, 22):
            continue
        sources = [r.get("CidrIp") for r in rule.get("IpRanges", ()) if _ours(r)]
        sources += [r.get("CidrIpv6") for r in rule.get("Ipv6Ranges", ()) if _ours(r)]
        for cidr in sources:
            if isinstance(cidr, str) and _network(cidr) not in wanted:
                stale.append({**_SSH, **_ranges(cidr)})
    return stale


def _ours(source: Mapping[str, Any]) -> bool:
    return source.get("Description") == SSH_RULE_NOTE


def _rule_keys(rule: Mapping[str, Any]) -> set[tuple[str, Any, Any, str]]:
    """Comparable (protocol, from, to, source) of each source in a permission."""
    base = (str(rule.get("IpProtocol")), rule.get("FromPort"), rule.get("ToPort"))
    if base[0] == "-1":
        base = ("-1", None, None)
    keys = {(*base, "cidr:" + r["CidrIp"]) for r in rule.get("IpRanges", ())}
    keys |= {(*base, "cidr6:" + r["CidrIpv6"]) for r in rule.get("Ipv6Ranges", ())}
    keys |= {(*base, "group:" + r["GroupId"]) for r in rule.get("UserIdGroupPairs", ())}
    keys |= {(*base, "prefix:" + r["PrefixListId"]) for r in rule.get("PrefixListIds", ())}
    return keys


def missing_rules(
    wanted: Sequence[Mapping[str, Any]], present: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    have: set[tuple[str, Any, Any, str]] = set()
    for rule in present:
        have |= _rule_keys(rule)
    return [rule for rule in wanted if not _rule_keys(rule) <= have]


def find_group(clients: AwsClients, name: str, vpc_id: str) -> dict[str, Any] | None:
    try:
        groups = clients.ec2.describe_security_groups(
            Filters=[
                {"Name": "group-name", "Values": [name]},
                {"Name": "vpc-id", "Values": [vpc_id]},
            ]
        )["SecurityGroups"]
    except boto_errors() as exc:
        raise ProviderError(f"cannot read security group {name}: {error_message(exc)}") from exc
    return dict(groups[0]) if groups else None


def ensure_group(
    clients: AwsClients,
    name: str,
    vpc_id: str,
    cluster_name: str,
    ssh_from: Sequence[str],
    extra: Sequence[Mapping[str, Any]],
) -> tuple[str, list[str]]:
    """The group's id, created and given its missing rules as needed; and what was done."""
    done: list[str] = []
    try:
        group = find_group(clients, name, vpc_id)
        if group is None:
            try:
                made = clients.ec2.create_security_group(
                    GroupName=name,
                    Description=f"launcher cluster {cluster_name}",
                    VpcId=vpc_id,
                    TagSpecifications=[
                        {
                            "ResourceType": "security-group",
                            "Tags": [{"Key": TAG_CLUSTER, "Value": cluster_name}],
                        }
                    ],
                )
                group = {"GroupId": made["GroupId"], "IpPermissions": []}
                done.append(f"created security group {name} ({made['GroupId']}) in {vpc_id}")
            except boto_errors() as exc:
                if not is_duplicate(exc):  # made by a concurrent `up`: use it
                    raise
                group = find_group(clients, name, vpc_id) or {}
        group_id = str(group["GroupId"])
        present = group.get("IpPermissions", [])
        missing = missing_rules(wanted_rules(group_id, ssh_from, extra), present)
        if missing:
            try:
                clients.ec2.authorize_security_group_ingress(
                    GroupId=group_id, IpPermissions=list(missing)
                )
            except boto_errors() as exc:
                if not is_duplicate(exc):
                    raise
            sources = ", ".join(sorted(ssh_from))
            done.append(f"security group {name}: SSH allowed from {sources} and between nodes")
        stale = stale_ssh_rules(present, ssh_from)
        if stale:
            _revoke(clients, group_id, stale)
            gone = ", ".join(_source(rule) for rule in stale)
            done.append(f"security group {name}: SSH no longer allowed from {gone}")
    except boto_errors() as exc:
        raise ProviderError(
            f"cannot set up security group {name}: {error_message(exc)}; name existing groups "
            "with node_config.SecurityGroupIds"
        ) from exc
    return group_id, done


def _source(rule: Mapping[str, Any]) -> str:
    ranges = [*rule.get("IpRanges", ()), *rule.get("Ipv6Ranges", ())]
    return ", ".join(str(r.get("CidrIp") or r.get("CidrIpv6")) for r in ranges)


def _revoke(clients: AwsClients, group_id: str, rules: Sequence[Mapping[str, Any]]) -> None:
    try:
        clients.ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=list(rules))
    except boto_errors() as exc:
        if not is_not_found(exc):  # InvalidPermission.NotFound: revoked meanwhile
            raise


def delete_groups(clients: AwsClients, name: str, cluster_name: str) -> list[str]:
    """Delete the cluster's security groups called `name` (in any VPC)."""
    removed = []
    try:
        groups = clients.ec2.describe_security_groups(
            Filters=[
                {"Name": "group-name", "Values": [name]},
                {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_name]},
            ]
        )["SecurityGroups"]
        for group in groups:
            clients.ec2.delete_security_group(GroupId=group["GroupId"])
            removed.append(f"security group {name} ({group['GroupId']})")
    except boto_errors() as exc:
        raise ProviderError(f"cannot delete security group {name}: {error_message(exc)}") from exc
    return removed
