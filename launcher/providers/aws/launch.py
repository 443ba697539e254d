"""What a RunInstances call for some nodes looks like, and where to try it: pure functions.

`node_config` from the user's YAML is passed through as RunInstances arguments; the launcher
adds only what it owns (subnet, security group, key pair, head instance profile, image when
none is named, tags) and never overrides what the user set, except that its own tags win.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import thaw
from launcher.providers.aws.instances import aws_tags

LATEST_DLAMI = "latest_dlami"
# Keys of node_config that are ours, not RunInstances arguments.
OWN_KEYS = frozenset({"SubnetIds"})


@dataclass(frozen=True)
class Placement:
    """A subnet a node may be launched in, and its availability zone."""

    subnet_id: str
    zone: str


@dataclass(frozen=True)
class LaunchContext:
    """What bootstrap resolved for one node type."""

    placements: tuple[Placement, ...]
    image_id: str | None = None  # set when node_config names no usable ImageId
    key_name: str | None = None  # set when node_config names no KeyName
    security_group_id: str | None = None  # set when node_config names no groups
    instance_profile_arn: str | None = None  # the head's, when node_config names none (heads only)


def subnet_ids(node_config: Mapping[str, Any]) -> tuple[str, ...]:
    """The subnets node_config names, in the order to try them."""
    interfaces = node_config.get("NetworkInterfaces") or ()
    for interface in interfaces:
        primary = int(interface.get("DeviceIndex", 0) or 0) == 0
        if isinstance(interface, Mapping) and interface.get("SubnetId") and primary:
            return (str(interface["SubnetId"]),)
    listed = node_config.get("SubnetIds")
    if isinstance(listed, Sequence) and not isinstance(listed, str):
        return tuple(str(s) for s in listed)
    if node_config.get("SubnetId"):
        return (str(node_config["SubnetId"]),)
    return ()


def names_groups(node_config: Mapping[str, Any]) -> bool:
    if "SecurityGroupIds" in node_config or "SecurityGroups" in node_config:
        return True
    interfaces = node_config.get("NetworkInterfaces") or ()
    return bool(interfaces) and all("Groups" in i for i in interfaces)


def is_spot(node_config: Mapping[str, Any]) -> bool:
    options = node_config.get("InstanceMarketOptions")
    return isinstance(options, Mapping) and options.get("MarketType") == "spot"


def needs_image(node_config: Mapping[str, Any]) -> bool:
    image = node_config.get("ImageId")
    if image == LATEST_DLAMI:
        return True
    return image is None and "LaunchTemplate" not in node_config


def needs_key(node_config: Mapping[str, Any]) -> bool:
    return "KeyName" not in node_config and "LaunchTemplate" not in node_config


def placements_to_try(
    placements: Sequence[Placement], avoid_zones: Collection[str]
) -> list[Placement]:
    """The subnets to try in order, leaving out zones the autoscaler avoids for now."""
    return [p for p in placements if p.zone not in avoid_zones]


def _merged_tags(
    user: Sequence[Mapping[str, Any]],
    ours: Mapping[str, str],
    cluster_tag: Mapping[str, str],
    owned: Sequence[str],
) -> list[dict[str, Any]]:
    """TagSpecifications: the user's, with our tags on the instance (ours win) and the
    cluster's tag on what it owns (`owned` resource types), so `down` can find them."""
    by_type: dict[str, dict[str, str]] = {}
    for spec in user:
        kind = str(spec.get("ResourceType", "instance"))
        tags = by_type.setdefault(kind, {})
        for tag in spec.get("Tags", ()):
            tags[str(tag["Key"])] = str(tag["Value"])
    by_type.setdefault("instance", {}).update(ours)
    for kind in owned:
        by_type.setdefault(kind, {}).update(cluster_tag)
    return [
        {"ResourceType": kind, "Tags": aws_tags(dict(sorted(tags.items())))}
        for kind, tags in by_type.items()
    ]


def run_request(
    node_config: Mapping[str, Any],
    count: int,
    placement: Placement | None,
    context: LaunchContext,
    tags: Mapping[str, str],
    cluster_tag: Mapping[str, str],
    client_token: str,
) -> dict[str, Any]:
    """The keyword arguments of one RunInstances call: up to `count` nodes (at least one)
    in `placement`'s subnet."""
    request: dict[str, Any] = {
        k: v for k, v in thaw(node_config).items() if k not in OWN_KEYS and k != "SubnetId"
    }
    if context.image_id is not None:
        request["ImageId"] = context.image_id
    if context.key_name is not None and needs_key(node_config):
        request["KeyName"] = context.key_name
    if context.instance_profile_arn is not None and "IamInstanceProfile" not in node_config:
        request["IamInstanceProfile"] = {"Arn": context.instance_profile_arn}
    interfaces = request.get("NetworkInterfaces")
    if interfaces:
        for interface in interfaces:
            if "Groups" not in interface and context.security_group_id:
                interface["Groups"] = [context.security_group_id]
    else:
        if placement is not None:
            request["SubnetId"] = placement.subnet_id
        if context.security_group_id and not names_groups(node_config):
            request["SecurityGroupIds"] = [context.security_group_id]
    owned = ["volume", "network-interface"]
    if is_spot(node_config):
        owned.append("spot-instances-request")
    request["TagSpecifications"] = _merged_tags(
        request.get("TagSpecifications") or (), tags, cluster_tag, owned
    )
    request["MinCount"] = 1
    request["MaxCount"] = count
    request["ClientToken"] = client_token
    return request
