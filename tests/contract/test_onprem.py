"""The provider contract (launcher.testing.contract) for on-prem machines (`type: local`):
three isolated sshd machines, a head and two workers, shared by every cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.ssh import IsolatedHost, isolated_hosts, make_key
from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.providers.base import NodeKind, NodeProvider
from launcher.testing.contract import (
    SEVERAL_ZONES,
    ConfigHarness,
    Harness,
    Lack,
    ProviderContract,
    Types,
)
from tests.conftest import REPO


class OnPremHarness(ConfigHarness):
    types = Types("ray.head.default", "ray.worker.default")

    def __init__(self, key: Path, hosts: list[IsolatedHost]) -> None:
        self.key = key
        self.head, *self.workers = hosts

    def config(self, cluster: str) -> ClusterConfig:
        ips = ", ".join(h.ip for h in self.workers)
        text = (
            f"cluster_name: {cluster}\n"
            f"provider: {{type: local, head_ip: {self.head.ip}, worker_ips: [{ips}]}}\n"
            f"auth: {{ssh_user: root, ssh_private_key: {self.key}}}\n"
        )
        return parse_config(text, f"{cluster}.yaml", Overrides())

    def exhaust(self, provider: NodeProvider) -> str:
        # The listed machines are the whole pool: claim every one of them.
        worker = provider.config.node_types[self.types.worker]
        free = len(self.workers) - len(provider.workers())
        if free:
            provider.create_nodes(worker, NodeKind.WORKER, free, {})
        return self.types.worker

    def leftovers(self, cluster: str) -> list[str]:
        records = self.head.path(f"~/.launcher/onprem/{cluster}")
        return [str(p) for p in records.glob("*.json")] if records.exists() else []


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("contract-onprem")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
        key = make_key(tmp / "id_ed25519")
        with isolated_hosts(key, "127.0.8.40", 3) as hosts:
            yield OnPremHarness(key, hosts)


class TestOnPrem(ProviderContract):
    provider_type = "local"
    example = REPO / "example-configs" / "onprem.yaml"
    lacks = (Lack(SEVERAL_ZONES, "the listed machines are one pool"),)
