"""The provider contract (launcher.testing.contract) for GCP: the fake GCE
(fakes/gce/server.py), two zones of us-west1, stopped workers kept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.gce.server import PROJECT, GceServer
from launcher.config.model import ClusterConfig
from launcher.providers.base import NodeProvider
from launcher.providers.registry import SPECS
from launcher.testing.contract import (
    RUNS_COMMANDS,
    ConfigHarness,
    Harness,
    Lack,
    ProviderContract,
    Types,
)
from tests.conftest import REPO
from tests.contract.types_text import typed_config


class GcpHarness(ConfigHarness):
    types = Types("head", "worker")

    def __init__(self, server: GceServer) -> None:
        self.server = server

    def config(self, cluster: str) -> ClusterConfig:
        image = "projects/debian-cloud/global/images/family/debian-12"
        node = (
            "{machineType: n1-standard-2, disks: [{boot: true, autoDelete: true, "
            f"initializeParams: {{sourceImage: {image}}}}}]}}"
        )
        provider = (
            "provider: {type: gcp, region: us-west1, availability_zone: 'us-west1-a,us-west1-b',"
            f" project_id: {PROJECT}, use_internal_ips: true, cache_stopped_nodes: true,"
            " allow_ssh_from: [127.0.0.0/8]}\n"
            "auth: {ssh_user: root}\n"
        )
        return typed_config(cluster, provider, node, node)

    def exhaust(self, provider: NodeProvider) -> str:
        self.server.faults.no_capacity()
        return "scarce"

    def restore(self) -> None:
        self.server.faults.clear()

    def leftovers(self, cluster: str) -> list[str]:
        found = [
            f"instance {i.name}"
            for i in self.server.instances()
            if i.labels.get("launcher-cluster") == cluster
        ]
        names = SPECS["gcp"].derived_names(self.config(cluster))
        rules = {names["SSH firewall rule"], names["internal firewall rule"]}
        firewalls = self.server.client("compute").firewalls()
        listed = firewalls.list(project=PROJECT).execute().get("items") or []
        found += [f"firewall {f['name']}" for f in listed if f["name"] in rules]
        accounts = self.server.client("iam").projects().serviceAccounts()
        listed = accounts.list(name=f"projects/{PROJECT}").execute().get("accounts") or []
        account = names["head service account"] + "@"
        return found + [f"account {a['email']}" for a in listed if a["email"].startswith(account)]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("contract-gcp")
    with pytest.MonkeyPatch.context() as monkeypatch, GceServer() as gce:
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp / "launcher-home"))
        for variable, value in gce.env().items():
            monkeypatch.setenv(variable, value)
        yield GcpHarness(gce)


class TestGcp(ProviderContract):
    provider_type = "gcp"
    example = REPO / "example-configs" / "gcp-minimal.yaml"
    lacks = (
        Lack(
            RUNS_COMMANDS,
            "the fake's instances are API records here "
            "(tests/test_gcp_cluster.py runs commands on instances as SSH hosts)",
        ),
    )
