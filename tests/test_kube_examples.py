"""Every Kubernetes example of Ray's comes up on the fake API server with its pods exactly
as its manifests say, and goes away with `down --purge`.

Each example's head and one worker run as pods of the fake kubelet (real processes on
127.18.x.y), set up over the exec API, with the autoscaler in the head pod bringing up the
worker. Only what this machine needs changes: the cluster runs one worker (`min_workers`),
and the commands (setup and start) are an echo, since the images' Ray is this machine's
and the test is about the pods: tests/test_kube_cluster.py runs Ray. The fake's nodes are
big enough for the examples' requests (one asks for 20Gi of memory).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.hosts.ssh import isolation_unavailable
from fakes.kube.kubelet import FakeKubelet
from fakes.kube.scheduler import NodeSpec
from fakes.kube.server import KubeServer
from tests.cluster_helpers import run, wait_for

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

EXAMPLES = Path(__file__).parent.parent.parent / "shared/ray-example-configs/kubernetes"
NAMES = ("example-minimal.yaml", "example-full.yaml", "legacy/example-minimal.yaml",
         "legacy/example-full.yaml")  # fmt: skip
DEFAULTS = Path(__file__).parent.parent / "launcher/providers/kubernetes/defaults.yaml"
COMMANDS = ("setup_commands", "head_setup_commands", "worker_setup_commands")
START = ("head_start_ray_commands", "worker_start_ray_commands")


def for_this_machine(example: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(example.read_text())
    data["min_workers"] = 1
    for key in ("initial_workers", "autoscaling_mode", "target_utilization_fraction"):
        data.pop(key, None)
    for key in COMMANDS:
        data[key] = []
    for key in START:
        data[key] = ["echo started on $LAUNCHER_NODE_IP >> ~/started.log"]
    return data


def manifests(example: Path) -> dict[str, dict[str, Any]]:
    """The pod manifest of each kind (head, worker) as the example gives it, or as the
    launcher's defaults do where it gives none (Ray's labels and names; a pinned image)."""
    data: dict[str, Any] = yaml.safe_load(example.read_text())
    if "head_node" not in data and "available_node_types" not in data:
        data = {**yaml.safe_load(DEFAULTS.read_text()), **data}
    if "head_node" in data:
        return {"head": data["head_node"], "worker": data["worker_nodes"]}
    types = data["available_node_types"]
    head = data["head_node_type"]
    worker = next(name for name in types if name != head)
    return {"head": types[head]["node_config"], "worker": types[worker]["node_config"]}


def contains(made: Any, wanted: Any, where: str = "") -> list[str]:
    """Where `made` differs from `wanted`, looking only at what `wanted` says (the server
    adds defaults; the launcher adds labels and the generated name)."""
    if isinstance(wanted, dict):
        if not isinstance(made, dict):
            return [f"{where}: {made!r}, not a mapping"]
        return [p for k, v in wanted.items() for p in contains(made.get(k), v, f"{where}.{k}")]
    if isinstance(wanted, list):
        if not isinstance(made, list) or len(made) != len(wanted):
            return [f"{where}: {made!r} != {wanted!r}"]
        return [
            p
            for i, (m, w) in enumerate(zip(made, wanted, strict=True))
            for p in contains(m, w, f"{where}[{i}]")
        ]
    return [] if str(made) == str(wanted) else [f"{where}: {made!r} != {wanted!r}"]


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    nodes = [NodeSpec(f"node-{i}", cpu="8", memory="64Gi") for i in (1, 2)]
    with KubeServer(nodes=nodes, kubelet=lambda s: FakeKubelet(**s.kubelet_options())) as made:
        made.create("namespaces", {"metadata": {"name": "ray"}})
        yield made


@pytest.mark.parametrize("name", NAMES)
def test_each_example_comes_up_with_its_pods_as_written(
    server: KubeServer, name: str, tmp_path: Path
) -> None:
    example = EXAMPLES / name
    data = for_this_machine(example)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {
        **os.environ,
        "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig")),
        "LAUNCHER_HOME": str(tmp_path / "home"),
    }
    cluster = data["cluster_name"]
    selector = f"launcher-cluster={cluster}"

    def launcher(*args: str) -> subprocess.CompletedProcess[str]:
        return run(*args, env=env, timeout=300)

    try:
        up = launcher("up", "-y", str(path))
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(
            lambda: len(server.pods("ray", selector + ",launcher-node-status=up-to-date")) == 2,
            120,
            "the head and one worker up to date",
        )
        wanted = manifests(example)
        for pod in server.pods("ray", selector):
            kind = pod["metadata"]["labels"]["launcher-node-kind"]
            manifest = wanted[kind]
            problems = contains(pod["spec"], manifest.get("spec", {}), "spec")
            labels = (manifest.get("metadata") or {}).get("labels") or {}
            problems += contains(pod["metadata"]["labels"], labels, "labels")
            prefix = (manifest.get("metadata") or {}).get("generateName")
            if prefix:
                assert pod["metadata"]["name"].startswith(prefix)
            assert not problems, f"{kind} pod of {name}: {problems}"
        shown = launcher("exec", str(path), "cat ~/started.log")
        assert shown.returncode == 0 and "started on 127.18." in shown.stdout
    finally:
        down = launcher("down", "-y", "--purge", str(path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert server.pods("ray", selector) == []
    assert server.get("serviceaccounts", "autoscaler", "ray") is None
