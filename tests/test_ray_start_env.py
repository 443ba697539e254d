"""`ray start` is told each node type's declared resources and labels (Ray's
RAY_OVERRIDE_RESOURCES / RAY_OVERRIDE_LABELS) on cloud providers and this machine's localhost provider, as Ray's updater does, so
`resources: {CPU: 0}` keeps work off a head whatever its machine; on-prem machines advertise
what Ray detects, as with Ray."""

from __future__ import annotations

import json

from launcher.config.loader import parse_config
from launcher.providers.aws.access import AwsAccess
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.kubernetes.access import KubeExecAccess
from launcher.providers.localhost.access import DEFAULT_OBJECT_STORE_BYTES, LocalhostAccess
from launcher.providers.localhost.provider import LocalhostProvider
from launcher.providers.onprem.provider import OnPremAccess
from launcher.providers.ssh_access import SshNodeAccess

CONFIG = parse_config(
    "cluster_name: env\nprovider: {type: aws, region: us-west-2}\n"
    "auth: {ssh_user: ubuntu}\n"
    "available_node_types:\n"
    "  head: {node_config: {InstanceType: m5.large}, resources: {CPU: 0}, max_workers: 0}\n"
    "  gpu:\n"
    "    node_config: {InstanceType: g5.xlarge}\n"
    "    resources: {CPU: 4, GPU: 1, accel: 2}\n"
    "    labels: {zone-kind: spot}\n"
    "  plain: {node_config: {InstanceType: m5.large}}\n"
    "head_node_type: head\n",
    "env.yaml",
)


def _node(node_type: str) -> Node:
    return Node("n", NodeKind.WORKER, node_type, "10.0.0.1", NodeState.RUNNING)


def test_cloud_providers_pass_the_types_resources_and_labels_to_ray_start() -> None:
    access = AwsAccess(CONFIG, None, {})  # no cloud client is needed for this
    # As Ray fills them out: what the config says, memory from the instance size.
    head = json.loads(access.ray_start_env(_node("head"))["RAY_OVERRIDE_RESOURCES"])
    assert head["CPU"] == 0 and head["memory"] > 0
    gpu = access.ray_start_env(_node("gpu"))
    resources = json.loads(gpu["RAY_OVERRIDE_RESOURCES"])
    assert {k: resources[k] for k in ("CPU", "GPU", "accel")} == {"CPU": 4, "GPU": 1, "accel": 2}
    assert json.loads(gpu["RAY_OVERRIDE_LABELS"]) == {"zone-kind": "spot"}
    assert access.ray_start_env(_node("gone-from-the-config")) == {}


def test_which_providers_override_what_ray_detects() -> None:
    assert AwsAccess.overrides_ray_resources
    assert SshNodeAccess.overrides_ray_resources  # GCP's
    assert KubeExecAccess.overrides_ray_resources
    assert not OnPremAccess.overrides_ray_resources  # as Ray: each machine its own
    assert LocalhostAccess.overrides_ray_resources


def test_localhost_nodes_get_a_small_object_store_unless_the_type_gives_one() -> None:
    config = parse_config(
        "cluster_name: env\nprovider: {type: localhost}\n"
        "available_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
        "  big: {node_config: {}, resources: {CPU: 2, object_store_memory: 1000000000}}\n"
        "head_node_type: head\n",
        "env.yaml",
    )
    provider = LocalhostProvider(config)
    head = json.loads(provider.access.ray_start_env(_node("head"))["RAY_OVERRIDE_RESOURCES"])
    assert head == {"CPU": 1, "object_store_memory": DEFAULT_OBJECT_STORE_BYTES}
    big = json.loads(provider.access.ray_start_env(_node("big"))["RAY_OVERRIDE_RESOURCES"])
    assert big == {"CPU": 2, "object_store_memory": 1000000000}
