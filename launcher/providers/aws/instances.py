"""Reading EC2 instances as the launcher's nodes: pure functions of DescribeInstances output."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from launcher.config.frozen import thaw
from launcher.providers.base import TAG_KIND, TAG_TYPE, Node, NodeKind, NodeState

TAG_LAUNCH_CONFIG = "launcher-launch-config"  # digest of node_config; reuse needs a match
LIVE_STATES = ("pending", "running")
# What AWS reports when it takes a spot instance back (terminated, stopped or hibernated).
SPOT_REASONS = frozenset(
    {
        "Server.SpotInstanceTermination",
        "Server.SpotInstanceShutdown",
        "Server.SpotInstanceHibernate",
    }
)
_STATES = {"pending": NodeState.PENDING, "running": NodeState.RUNNING}


def tags_of(instance: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in instance.get("Tags", ())}


def aws_tags(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """`tags` in EC2's form: [{"Key": ..., "Value": ...}] (the inverse of `tags_of`)."""
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def launch_config_digest(node_config: Mapping[str, Any]) -> str:
    text = json.dumps(thaw(node_config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def was_reclaimed(instance: Mapping[str, Any]) -> bool:
    """AWS took this (spot) instance back."""
    return str(instance.get("StateReason", {}).get("Code", "")) in SPOT_REASONS


def to_node(
    instance: Mapping[str, Any], use_private_ip: bool, acknowledged: Collection[str]
) -> Node | None:
    """The node an instance is, or None when it is not one of the cluster's live nodes.
    A worker AWS reclaimed is listed PREEMPTED until the autoscaler has answered it
    (`acknowledged`)."""
    tags = tags_of(instance)
    state_name = str(instance.get("State", {}).get("Name", ""))
    kind_tag = tags.get(TAG_KIND)
    if kind_tag not in (NodeKind.HEAD.value, NodeKind.WORKER.value):
        return None
    kind = NodeKind(kind_tag)
    state = _STATES.get(state_name)
    if state is None:
        reclaimed = kind is NodeKind.WORKER and was_reclaimed(instance)
        if not reclaimed or instance["InstanceId"] in acknowledged:
            return None
        state = NodeState.PREEMPTED
    ip = instance.get("PrivateIpAddress") if use_private_ip else instance.get("PublicIpAddress")
    launched = instance.get("LaunchTime")
    return Node(
        id=str(instance["InstanceId"]),
        kind=kind,
        node_type=tags.get(TAG_TYPE, ""),
        ip=str(ip) if ip else None,
        state=state,
        tags=tags,
        created_at=launched.timestamp() if isinstance(launched, datetime) else 0.0,
        zone=str(instance.get("Placement", {}).get("AvailabilityZone", "")),
    )
