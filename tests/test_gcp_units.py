"""The GCE provider's pure parts: labels, names, instance bodies, instances as nodes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.errors import ProviderError
from launcher.providers.base import NodeKind, NodeState
from launcher.providers.gcp.accounts import account_id
from launcher.providers.gcp.instances import (
    STOPPED_LABEL,
    decode_value,
    encode_value,
    instance_body,
    instance_name,
    labels_of,
    network_tag,
    to_node,
)

LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")


@given(st.text(max_size=15))
def test_any_tag_value_is_written_as_a_valid_label_and_read_back(value: str) -> None:
    try:
        encoded = encode_value(value)
    except ProviderError:
        return  # too long once escaped: refused with a message, never cut
    assert LABEL.match(encoded)
    assert decode_value(encoded) == value


def test_plain_values_stay_as_they_are_and_long_ones_are_refused() -> None:
    assert encode_value("up-to-date") == "up-to-date"
    assert encode_value("ray.head.default") == "ray_2ehead_2edefault"
    assert decode_value("my-team") == "my-team"
    with pytest.raises(ProviderError, match="too long for a GCE label"):
        encode_value("X" * 30)
    with pytest.raises(ProviderError, match="cannot be a GCE label key"):
        labels_of({"Bad Key": "x"})


def test_names_tags_and_accounts_are_valid_for_gce() -> None:
    name = instance_name("My_Cluster.v2", NodeKind.WORKER, "req/0")
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name)
    assert name == instance_name("My_Cluster.v2", NodeKind.WORKER, "req/0")  # same seed
    assert name != instance_name("My_Cluster.v2", NodeKind.WORKER, "req/1")
    assert network_tag("demo") == "launcher-demo-node"
    for cluster in ("demo", "a-very-long-cluster-name-for-a-team", "X"):
        assert re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", account_id(cluster)), cluster


def test_the_body_is_the_node_config_plus_what_the_launcher_needs() -> None:
    node_config = {
        "machineType": "n1-standard-4",
        "guestAccelerators": [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}],
        "scheduling": [{"preemptible": True}],  # as Ray's older examples write it
        "metadata": {"items": [{"key": "ssh-keys", "value": "me:ssh-ed25519 AAAA me"}]},
        "labels": {"team": "ml", "launcher-cluster": "user-set"},
    }
    body = instance_body(
        node_config,
        name="launcher-c-w-1",
        zone="us-west1-b",
        project="p",
        labels={"launcher-cluster": "c"},
        ssh_key="root:ssh-rsa BBBB launcher-c",
        network_tag="launcher-c-node",
        internal=False,
    )
    assert body["machineType"] == "zones/us-west1-b/machineTypes/n1-standard-4"
    accelerator = body["guestAccelerators"][0]["acceleratorType"]
    assert accelerator == "projects/p/zones/us-west1-b/acceleratorTypes/nvidia-tesla-t4"
    assert body["scheduling"] == {"preemptible": True, "onHostMaintenance": "TERMINATE"}
    assert body["labels"] == {"team": "ml", "launcher-cluster": "c"}  # ours win
    (keys,) = body["metadata"]["items"]
    assert keys["value"].splitlines() == ["me:ssh-ed25519 AAAA me", "root:ssh-rsa BBBB launcher-c"]
    assert body["tags"]["items"] == ["launcher-c-node"]
    assert body["networkInterfaces"][0]["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"
    assert node_config["machineType"] == "n1-standard-4"  # the config is not changed


def _instance(status: str, **labels: str) -> dict[str, object]:
    return {
        "name": "launcher-c-w-1",
        "zone": "https://compute.googleapis.com/compute/v1/projects/p/zones/us-west1-a",
        "status": status,
        "labels": {"launcher-node-kind": "worker", "launcher-node-type": "spot", **labels},
        "scheduling": {"provisioningModel": "SPOT"},
        "networkInterfaces": [{"networkIP": "10.0.0.5", "accessConfigs": [{"natIP": "1.2.3.4"}]}],
        "creationTimestamp": "2026-11-25T10:00:00.000-08:00",
    }


def test_a_spot_worker_gce_stopped_is_preempted_one_the_launcher_stopped_is_not_a_node() -> None:
    running = to_node(_instance("RUNNING"), internal=True, answered=())
    assert running is not None and running.state is NodeState.RUNNING
    assert (running.ip, running.zone) == ("10.0.0.5", "us-west1-a")
    reclaimed = to_node(_instance("TERMINATED"), internal=False, answered=())
    assert reclaimed is not None and reclaimed.state is NodeState.PREEMPTED
    assert reclaimed.ip == "1.2.3.4"
    assert to_node(_instance("TERMINATED"), internal=True, answered={"launcher-c-w-1"}) is None
    stopped = _instance("TERMINATED", **{STOPPED_LABEL: "true"})
    assert to_node(stopped, internal=True, answered=()) is None
    assert to_node({**_instance("RUNNING"), "labels": {}}, internal=True, answered=()) is None
