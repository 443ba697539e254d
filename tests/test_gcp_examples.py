"""Every GCP example of Ray's (../shared/ray-example-configs/gcp/) comes up on the fake GCE
(fakes/gce/server.py) with its node types exactly as written: machine types, disks and their
images, accelerators, scheduling. Only what this machine needs changes, and the test fails
if anything else would: the project, the SSH user (the test hosts log in as root), internal
addresses, and the commands (Ray's examples download software from the internet, which no
test may contact; the head runs a marker command instead of Ray), without containers (the
test hosts have no engine: tests/test_podman.py covers containers).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.gce.hosts import GceHosts
from fakes.gce.server import PROJECT, GceServer
from fakes.hosts.ssh import isolation_unavailable
from tests.cluster_helpers import run
from tests.conftest import RAY_EXAMPLES

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

EXAMPLES = sorted((RAY_EXAMPLES / "gcp").glob("example*.yaml"))
COMMANDS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    "head_start_ray_commands",
    "worker_start_ray_commands",
)
CHANGED = {"cluster_name", "provider", "auth", "docker", *COMMANDS}


def for_this_machine(example: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(example.read_text())
    made = dict(data)
    made["cluster_name"] = f"ex-{example.stem.removeprefix('example-')}"
    made["provider"] = {
        **data["provider"],
        "project_id": PROJECT,
        "use_internal_ips": True,
        "allow_ssh_from": ["127.0.0.0/8"],
    }
    made["auth"] = {"ssh_user": "root"}
    made["docker"] = {"image": "", "container_name": ""}
    for key in COMMANDS:
        made[key] = []
    made["head_start_ray_commands"] = ["echo started > ~/started.log"]
    changed = {k for k in {*data, *made} if data.get(k) != made.get(k)}
    assert changed <= CHANGED, changed - CHANGED  # node types and the rest as written
    return made


def head_config(data: dict[str, Any]) -> dict[str, Any]:
    if "head_node" in data:  # Ray's older form
        return dict(data["head_node"])
    if "available_node_types" not in data:  # Ray's defaults for GCP, as the launcher's
        data = yaml.safe_load((RAY_EXAMPLES / "gcp" / "defaults.yaml").read_text())
    types = data["available_node_types"]
    return dict(types[data["head_node_type"]]["node_config"])


@pytest.fixture(scope="module")
def gce() -> Iterator[GceServer]:
    with GceServer() as server, GceHosts(server) as hosts:
        yield server
        hosts.check()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_comes_up_with_its_node_types_as_written(
    gce: GceServer, example: Path, tmp_path: Path
) -> None:
    data = for_this_machine(example)
    path = tmp_path / example.name
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, **gce.env(), "LAUNCHER_HOME": str(tmp_path / "home")}
    try:
        up = run("up", "-y", str(path), env=env, timeout=600)
        assert up.returncode == 0, up.stdout + up.stderr
        cluster = data["cluster_name"]
        (head,) = [i for i in gce.instances() if i.labels.get("launcher-cluster") == cluster]
        inserted = next(
            c.call.body
            for c in gce.calls("compute.instances.insert")
            if c.call.body and c.call.body.get("name") == head.name
        )
        wanted = head_config(data)
        machine = str(wanted.get("machineType", "n1-standard-2"))
        assert inserted["machineType"].endswith(f"machineTypes/{machine}")
        assert [d["initializeParams"] for d in inserted["disks"]] == [
            d["initializeParams"] for d in wanted["disks"]
        ]
        accelerators = wanted.get("guestAccelerators") or []
        if isinstance(accelerators, dict):
            accelerators = [accelerators]
        assert [
            (a["acceleratorType"].rsplit("/", 1)[-1], a["acceleratorCount"])
            for a in inserted.get("guestAccelerators") or []
        ] == [(a["acceleratorType"], a["acceleratorCount"]) for a in accelerators]
    finally:
        down = run("down", "-y", "--purge", str(path), env=env, timeout=600)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [i for i in gce.instances() if i.labels.get("launcher-cluster") == cluster]
