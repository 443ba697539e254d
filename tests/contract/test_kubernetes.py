"""The provider contract (launcher.testing.contract) for Kubernetes: the fake API server
(fakes/kube/server.py) with its stand-in kubelet (pods are marked Running; nothing runs in
them: the contract is about the API), three 4-cpu nodes, and the namespace `ray`. A `scarce`
pod asks for more CPU than any node has."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.kube import resources as kube_resources
from fakes.kube.server import KubeServer
from launcher.config.model import ClusterConfig
from launcher.providers.base import NodeProvider
from launcher.testing.contract import (
    RUNS_COMMANDS,
    SEVERAL_ZONES,
    ConfigHarness,
    Harness,
    Lack,
    ProviderContract,
    Types,
)
from tests.conftest import REPO
from tests.contract.types_text import typed_config


class KubernetesHarness(ConfigHarness):
    types = Types("head", "worker")

    def __init__(self, server: KubeServer) -> None:
        self.server = server
        server.create("namespaces", {"metadata": {"name": "ray"}})

    def config(self, cluster: str) -> ClusterConfig:
        def pod(cpu: str) -> str:
            return (
                "{apiVersion: v1, kind: Pod, spec: {containers: [{name: ray-node, image: "
                f"rayproject/ray, resources: {{requests: {{cpu: '{cpu}'}}}}}}]}}}}"
            )

        provider = "provider: {type: kubernetes, namespace: ray, scheduling_timeout_s: 3}\n"
        return typed_config(cluster, provider, pod("100m"), pod("64"))

    def exhaust(self, provider: NodeProvider) -> str:
        return "scarce"  # no node has 64 CPUs: its pods stay unschedulable

    def leftovers(self, cluster: str) -> list[str]:
        found = [
            f"pod {p['metadata']['name']}"
            for p in self.server.pods("ray", f"launcher-cluster={cluster}")
        ]
        for plural, group in (
            ("services", ""),
            ("serviceaccounts", ""),
            ("roles", "rbac.authorization.k8s.io"),
            ("rolebindings", "rbac.authorization.k8s.io"),
        ):
            resource = kube_resources.find(group, plural)
            assert resource is not None
            for obj in self.server.store.list(resource, "ray")[0]:
                metadata = obj["metadata"]
                users = (metadata.get("annotations") or {}).get("launcher.clusters", "")
                labels = metadata.get("labels") or {}
                if cluster in users.split(",") or labels.get("launcher-cluster") == cluster:
                    found.append(f"{plural} {metadata['name']}")
        return found


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("contract-kubernetes")
    with pytest.MonkeyPatch.context() as monkeypatch, KubeServer() as kube:
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
        monkeypatch.setenv("KUBECONFIG", str(kube.write_kubeconfig(tmp / "kubeconfig")))
        yield KubernetesHarness(kube)


class TestKubernetes(ProviderContract):
    provider_type = "kubernetes"
    example = REPO / "example-configs" / "kubernetes-minimal.yaml"
    lacks = (
        Lack(
            RUNS_COMMANDS,
            "the stand-in kubelet here runs nothing in its pods "
            "(tests/test_kube_cluster.py runs commands in pods over exec)",
        ),
        Lack(SEVERAL_ZONES, "the scheduler places pods; the provider has no zones to choose"),
    )
