"""The provider contract (launcher.testing.contract) for the in-memory provider that unit
tests and the simulator use (launcher.testing.memory): it keeps the same promises as the
real providers, so what passes against it is not an artefact of a double that drifted.
Its world is one process's memory, so one provider serves each cluster name."""

from __future__ import annotations

import pytest

from launcher.config.model import ClusterConfig
from launcher.providers.base import NodeProvider
from launcher.testing.contract import (
    REGISTERED,
    RUNS_COMMANDS,
    Harness,
    Lack,
    ProviderContract,
    Types,
)
from launcher.testing.memory import MemoryProvider
from tests.contract.types_text import typed_config

ZONES = ("zone-a", "zone-b", "zone-c")


class MemoryHarness:
    types = Types("head", "worker")

    def __init__(self) -> None:
        self.made: dict[str, MemoryProvider] = {}

    def config(self, cluster: str) -> ClusterConfig:
        return typed_config(cluster, "provider: {type: localhost}\n", "{}", "{}")

    def provider(self, cluster: str) -> NodeProvider:
        if cluster not in self.made:
            room = {("head", ""): 8, **{(t, z): 8 for t in ("worker", "scarce") for z in ZONES}}
            self.made[cluster] = MemoryProvider(
                self.config(cluster),
                room,
                zones={"worker": ZONES, "scarce": ZONES},
                keeps_stopped=cluster.endswith("-b"),
            )
        provider = self.made[cluster]
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        assert isinstance(provider, MemoryProvider) and provider.capacity is not None
        for zone in ZONES:
            provider.capacity[("scarce", zone)] = 0
        return "scarce"

    def restore(self) -> None:
        for provider in self.made.values():
            assert provider.capacity is not None
            for zone in ZONES:
                provider.capacity[("scarce", zone)] = 8

    def leftovers(self, cluster: str) -> list[str]:
        provider = self.made.get(cluster)
        if provider is None:
            return []
        return [n.id for n in provider.held() + provider.stopped_nodes()]


@pytest.fixture(scope="module")
def harness() -> Harness:
    return MemoryHarness()


class TestMemory(ProviderContract):
    provider_type = "memory"
    lacks = (
        Lack(REGISTERED, "a test double: no config names it"),
        Lack(RUNS_COMMANDS, "its nodes run nothing (its access is NoAccess)"),
    )
