"""The provider contract (launcher.testing.contract) for the localhost provider, and for Ray's
name for it, fake_multinode: nodes are this machine's processes; a `simulated_capacity: 0`
type has no room."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.config.model import ClusterConfig
from launcher.paths import cluster_dir
from launcher.providers.base import NodeProvider
from launcher.testing.contract import (
    SEVERAL_ZONES,
    ConfigHarness,
    Harness,
    Lack,
    ProviderContract,
    Types,
)
from tests.conftest import RAY_EXAMPLES, REPO
from tests.contract.types_text import typed_config


class LocalhostHarness(ConfigHarness):
    types = Types("head", "worker")

    def __init__(self, provider_type: str) -> None:
        self.provider_type = provider_type

    def config(self, cluster: str) -> ClusterConfig:
        provider = f"provider: {{type: {self.provider_type}}}\n"
        return typed_config(cluster, provider, "{}", "{simulated_capacity: 0}")

    def exhaust(self, provider: NodeProvider) -> str:
        return "scarce"  # simulated_capacity: 0

    def leftovers(self, cluster: str) -> list[str]:
        state = cluster_dir(cluster) / "localhost"
        return [str(p) for p in state.rglob("node.json")] if state.exists() else []


@pytest.fixture(scope="class")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        path = tmp_path_factory.mktemp("contract-localhost") / "launcher-home"
        monkeypatch.setenv("LAUNCHER_HOME", str(path))
        yield path


@pytest.fixture(scope="class")
def harness(request: pytest.FixtureRequest, home: Path) -> Harness:
    return LocalhostHarness(request.cls.provider_type)


class TestLocalhost(ProviderContract):
    provider_type = "localhost"
    example = REPO / "example-configs" / "local.yaml"
    lacks = (Lack(SEVERAL_ZONES, "every node is on this machine"),)


class TestFakeMultinode(TestLocalhost):
    provider_type = "fake_multinode"
    example = RAY_EXAMPLES / "fake_multi_node" / "example.yaml"
