"""Kubernetes clusters survive a launcher killed at any moment: seeded random runs kill `up`
(and sometimes the `down` after it) with SIGKILL after a random delay, then require a second
`up` to converge on one head pod with its worker and `down --purge` to leave no pod, service,
ServiceAccount, Role or RoleBinding. Against the fake API server whose kubelet runs pods as
real processes (fakes/kube/), with the autoscaler in the head pod launching the worker
(so `down` races with it).

LAUNCHER_RELIABILITY_SEED and LAUNCHER_RELIABILITY_RUNS reproduce or widen the search.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.hosts.ssh import isolation_unavailable
from fakes.kube.kubelet import FakeKubelet
from fakes.kube.server import KubeServer
from launcher.providers.kubernetes.names import autoscaler_name
from tests.cluster_helpers import (
    kill_plan,
    killed_then_up,
    purged_leaves_nothing,
    run,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

SEED = int(os.environ.get("LAUNCHER_RELIABILITY_SEED", "16"))
RUNS = int(os.environ.get("LAUNCHER_RELIABILITY_RUNS", "6"))
NAME = "kube-chaos"
POD = (
    "{apiVersion: v1, kind: Pod, spec: {containers: [{name: ray-node, image: rayproject/ray, "
    "command: [/bin/bash, -c, --], args: ['trap : TERM INT; sleep infinity & wait;'], "
    "resources: {requests: {cpu: 100m}}}]}}"
)
CONFIG = f"""
cluster_name: {NAME}
max_workers: 1
provider:
  type: kubernetes
  namespace: ray
  services:
    - {{apiVersion: v1, kind: Service, metadata: {{name: {NAME}-head}},
       spec: {{selector: {{component: {NAME}-head}}, ports: [{{port: 8265}}]}}}}
available_node_types:
  head: {{node_config: {POD}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {POD}, resources: {{CPU: 1}}, min_workers: 1, max_workers: 1}}
head_node_type: head
setup_commands:
  - echo set up >> ~/setup.log
head_start_ray_commands:
  - echo "no Ray in this test" > ~/started.log
worker_start_ray_commands:
  - echo "no Ray in this test" > ~/started.log
"""
OBJECTS = (
    ("services", ""),
    ("serviceaccounts", ""),
    ("roles", "rbac.authorization.k8s.io"),
    ("rolebindings", "rbac.authorization.k8s.io"),
)


@dataclass
class Chaos:
    server: KubeServer
    path: Path
    env: dict[str, str]

    def pods(self, kind: str) -> list[str]:
        selector = f"launcher-cluster={NAME},launcher-node-kind={kind}"
        return [
            p["metadata"]["name"]
            for p in self.server.pods("ray", selector)
            if not p["metadata"].get("deletionTimestamp")
        ]

    def left(self) -> list[str]:
        found = [
            f"pod {p['metadata']['name']}"
            for p in self.server.pods("ray", f"launcher-cluster={NAME}")
        ]
        for plural, group in OBJECTS:
            for name in (f"{NAME}-head", autoscaler_name(NAME)):
                if self.server.get(plural, name, "ray", group) is not None:
                    found.append(f"{plural} {name}")
        return found


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    tmp = tmp_path_factory.mktemp("kube-chaos")
    with KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options())) as server:
        server.create("namespaces", {"metadata": {"name": "ray"}})
        path = tmp / "cluster.yaml"
        path.write_text(CONFIG)
        env = {
            **os.environ,
            "KUBECONFIG": str(server.write_kubeconfig(tmp / "kubeconfig")),
            "LAUNCHER_HOME": str(tmp / "home"),
        }
        made = Chaos(server, path, env)
        yield made
        run("down", "-y", "--purge", str(path), env=env, timeout=300)


@pytest.mark.parametrize("index", range(RUNS))
def test_killed_commands_leave_nothing_that_the_next_up_and_down_miss(
    chaos: Chaos, index: int
) -> None:
    plan = kill_plan(SEED, index, up_max_s=6.0, down_max_s=3.0)
    killed_then_up(plan, chaos.path, chaos.env)
    assert len(chaos.pods("head")) == 1, f"{plan.what}: heads {chaos.pods('head')}"
    wait_for(lambda: len(chaos.pods("worker")) == 1, 60, f"{plan.what}: one worker pod")
    purged_leaves_nothing(plan, chaos.path, chaos.env, chaos.left)
