"""Every Azure example of Ray's (../shared/ray-example-configs/azure/, its older form too)
comes up on the Azure wire fake (fakes/azure/server.py, each VM a real SSH host) with its
node types exactly as written: VM sizes, images, spot priority, zones. Only what this
machine needs changes, and the test fails if anything else would: the cluster's name, the
subnet (loopback addresses, internal ones used), who may reach SSH, the SSH key (the
examples name key files in ~/.ssh that this machine has not: the launcher makes the
cluster's own), and the commands (Ray's examples download software from the internet,
which no test may contact; the head runs a marker command instead of Ray), without
containers (the test hosts have no engine: tests/test_podman.py covers containers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.azure.server import AzureServer
from fakes.hosts.ssh import isolation_unavailable
from tests.azure_clusters import azure_vms, cli_env
from tests.cluster_helpers import run
from tests.conftest import RAY_EXAMPLES

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

EXAMPLES = sorted((RAY_EXAMPLES / "azure").glob("example*.yaml")) + sorted(
    (RAY_EXAMPLES / "azure" / "legacy").glob("example*.yaml")
)
COMMANDS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
)
CHANGED = {"cluster_name", "provider", "auth", "docker", "file_mounts", *COMMANDS}
PROVIDER_CHANGED = {"subnet_mask", "use_internal_ips", "allow_ssh_from"}


def for_this_machine(example: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(example.read_text())
    made = dict(data)
    name = example.stem.removeprefix("example-")
    made["cluster_name"] = f"az-{'legacy-' if 'legacy' in example.parts else ''}{name}"
    made["provider"] = {
        **data["provider"],
        "subnet_mask": "127.19.0.0/16",
        "use_internal_ips": True,
        "allow_ssh_from": ["127.0.0.0/8"],
    }
    changed_keys = {
        k for k in {*data["provider"], *made["provider"]}
        if data["provider"].get(k) != made["provider"].get(k)
    }  # fmt: skip
    assert changed_keys <= PROVIDER_CHANGED, changed_keys - PROVIDER_CHANGED
    made["auth"] = {"ssh_user": data["auth"]["ssh_user"]}  # the user as written
    made["docker"] = {"image": "", "container_name": ""}
    made["file_mounts"] = {}  # the examples mount the key files this machine has not
    for key in COMMANDS:
        made[key] = []
    made["head_start_ray_commands"] = ["echo started > ~/started.log"]
    changed = {k for k in {*data, *made} if data.get(k) != made.get(k)}
    assert changed <= CHANGED, changed - CHANGED  # node types and the rest as written
    return made


def head_parameters(data: dict[str, Any]) -> dict[str, Any]:
    if "head_node" in data:  # Ray's older form
        return dict(data["head_node"]["azure_arm_parameters"])
    defaults = yaml.safe_load((RAY_EXAMPLES / "azure" / "defaults.yaml").read_text())
    # What the example leaves out is Ray's default for Azure, as the launcher's.
    types = data.get("available_node_types") or defaults["available_node_types"]
    head = data.get("head_node_type") or defaults["head_node_type"]
    return dict(types[head]["node_config"]["azure_arm_parameters"])


@pytest.fixture(scope="module")
def azure() -> Iterator[AzureServer]:
    with azure_vms() as (server, _hosts):
        yield server


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: "/".join(p.parts[-2:]))
def test_each_example_comes_up_with_its_node_types_as_written(
    azure: AzureServer, example: Path, tmp_path: Path
) -> None:
    data = for_this_machine(example)
    path = tmp_path / example.name
    path.write_text(yaml.safe_dump(data))
    env = cli_env(azure, tmp_path / "home")
    cluster = data["cluster_name"]
    group = data["provider"]["resource_group"]
    try:
        up = run("up", "-y", str(path), env=env, timeout=600)
        assert up.returncode == 0, up.stdout + up.stderr
        (head,) = [v for v in azure.vms() if v.tags.get("launcher-cluster") == cluster]
        assert head.tags.get("launcher-node-kind") == "head"
        made = next(
            c.call.body
            for c in azure.calls("virtualMachines.create*")
            if c.call.name == head.name and c.call.body
        )
        wanted = head_parameters(data)
        properties = made["properties"]
        assert properties["hardwareProfile"]["vmSize"] == wanted["vmSize"]
        image = properties["storageProfile"]["imageReference"]
        assert (image["publisher"], image["offer"], image["sku"]) == (
            wanted["imagePublisher"],
            wanted["imageOffer"],
            wanted["imageSku"],
        )
        assert properties["osProfile"]["adminUsername"] == data["auth"]["ssh_user"]
        assert properties.get("priority", "Regular") == wanted.get("priority", "Regular")
        started = run("exec", str(path), "cat ~/started.log", env=env)
        assert started.returncode == 0 and "started" in started.stdout, started.stderr
    finally:
        down = run("down", "-y", "--purge", str(path), env=env, timeout=600)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [v for v in azure.vms() if v.tags.get("launcher-cluster") == cluster]
    clients = azure.clients()
    if clients.resource.resource_groups.check_existence(group):
        left = [r.name for r in clients.resource.resources.list_by_resource_group(group)]
        assert left == [], left
