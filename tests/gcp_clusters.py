"""A whole GCP cluster under test: the fake GCE, its instances as real SSH hosts, a cluster
file and the environment the `launcher` CLI runs with against them (tests/test_gcp_*.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fakes.gce.hosts import GceHosts
from fakes.gce.server import GceServer, InstanceView
from tests.cluster_helpers import run


@dataclass
class GcpCluster:
    server: GceServer
    hosts: GceHosts
    path: Path
    env: dict[str, str]
    name: str = "gcp-e2e"

    def run(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return run(*args, env=self.env, timeout=timeout)

    def instances(self) -> list[InstanceView]:
        return [i for i in self.server.instances() if i.labels.get("launcher-cluster") == self.name]

    def of_type(self, node_type: str) -> list[InstanceView]:
        return [i for i in self.instances() if i.labels.get("launcher-node-type") == node_type]


@contextlib.contextmanager
def running_gcp_cluster(tmp: Path, config: str, name: str = "gcp-e2e") -> Iterator[GcpCluster]:
    """`config` written to tmp/cluster.yaml; `launcher down --purge` and the hosts' check at
    exit."""
    with GceServer() as server, GceHosts(server) as hosts:
        path = tmp / "cluster.yaml"
        path.write_text(config)
        env = {**os.environ, **server.env(), "LAUNCHER_HOME": str(tmp / "home")}
        cluster = GcpCluster(server, hosts, path, env, name)
        yield cluster
        cluster.run("down", "-y", "--purge", str(path))
        hosts.check()
