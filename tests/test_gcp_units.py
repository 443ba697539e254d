"""The GCE provider's pure parts: labels, names, instance bodies, instances as nodes; and
the head's service account bindings against the fake GCE."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakes.gce.server import PROJECT, GceServer
from launcher.config.loader import Overrides, parse_config
from launcher.errors import ProviderError
from launcher.providers.base import NodeKind, NodeState
from launcher.providers.factory import make_provider
from launcher.providers.gcp import accounts
from launcher.providers.gcp.instances import (
    STOPPED_LABEL,
    decode_value,
    encode_value,
    instance_body,
    labels_of,
    to_node,
)
from launcher.providers.gcp.names import account_id, instance_name, network_tag

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


def test_the_head_may_act_as_the_account_its_workers_run_as(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker type whose node_config names a service account: GCE lets the head create
    such a worker only if it may act as that account. Bootstrap grants the head's account
    roles/iam.serviceAccountUser on it (not on the project); `down --purge` takes it back."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    with GceServer() as gce:
        for variable, value in gce.env().items():
            monkeypatch.setenv(variable, value)
        worker_account = gce.iam.add_account("ray-workers")["email"]
        image = "projects/debian-cloud/global/images/family/debian-12"
        node = (
            "{machineType: n1-standard-2, disks: [{boot: true, initializeParams: "
            f"{{sourceImage: {image}}}}}]"
        )
        text = f"""
cluster_name: actas
provider: {{type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: {PROJECT},
  allow_ssh_from: [127.0.0.0/8]}}
auth: {{ssh_user: root}}
available_node_types:
  head: {{node_config: {node}}}, max_workers: 0}}
  worker: {{node_config: {node}, serviceAccounts: [{{email: {worker_account},
    scopes: [https://www.googleapis.com/auth/cloud-platform]}}]}}}}
head_node_type: head
"""
        provider = make_provider(parse_config(text, "actas.yaml", Overrides()))
        done = provider.bootstrap()
        head = accounts.email(provider.clients, "actas")  # type: ignore[attr-defined]
        assert f"granted roles/iam.serviceAccountUser on {worker_account} to {head}" in done

        def members(role: str) -> list[str]:
            policy = gce.iam.account_policies.get(worker_account, {})
            binding = next((b for b in policy.get("bindings", []) if b["role"] == role), {})
            return list(binding.get("members", []))

        assert members("roles/iam.serviceAccountUser") == [f"serviceAccount:{head}"]
        assert "granted" not in " ".join(provider.bootstrap())  # reused: nothing more to do
        provider.cleanup(purge=True)
        assert members("roles/iam.serviceAccountUser") == []
        assert not gce.iam.has_account(head) and gce.iam.has_account(worker_account)
