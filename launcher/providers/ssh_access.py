"""How providers whose nodes are machines reach them: SSH with the config's `auth` section.

One `SSHRunner` (one connection) per node address and log file, kept for the provider's
lifetime, so the updater, `exec` and the autoscaler's bookkeeping share a connection. Host
keys are pinned in the cluster's known_hosts file (`$LAUNCHER_HOME/clusters/NAME/known_hosts`;
on the head, the copy `up` placed there), as the keys of the machines the provider names: a
node that takes over a gone node's address (cloud providers reuse them) gets runners of its
own, and its key is pinned afresh instead of refused as changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from launcher.config.model import AuthConfig, ClusterConfig
from launcher.errors import ProviderError, UsageError
from launcher.paths import cluster_dir
from launcher.providers.access import NodeAccess
from launcher.providers.nodes import Node
from launcher.runners.base import CommandRunner
from launcher.runners.forward import PortOpener
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget


def known_hosts_path(cluster_name: str) -> Path:
    return cluster_dir(cluster_name) / "known_hosts"


class SSHAccess:
    def __init__(self, cluster_name: str, auth: AuthConfig) -> None:
        if not auth.ssh_user:
            raise UsageError("auth.ssh_user is not set; name the user to log in as over SSH")
        self.auth = auth
        self.user = auth.ssh_user
        self.known_hosts = KnownHosts(known_hosts_path(cluster_name))
        self._runners: dict[tuple[str, Path], SSHRunner] = {}
        self._lock = threading.Lock()

    def target(self, host: str) -> SSHTarget:
        return SSHTarget(
            host,
            self.user,
            key_path=self.auth.ssh_private_key,
            proxy_command=self.auth.ssh_proxy_command,
        )

    def runner(self, host: str, log_path: Path, node: str | None = None) -> SSHRunner:
        """The runner for the machine `node` (a provider's node id; None for a machine
        known only by its address) at `host`, logging to `log_path`."""
        with self._lock:
            for (address, path), old in list(self._runners.items()):
                if address == host and old.node != node:  # another machine had the address
                    old.close()
                    del self._runners[(address, path)]
            runner = self._runners.get((host, log_path))
            if runner is None:
                runner = SSHRunner(self.target(host), self.known_hosts, log_path, node=node)
                self._runners[(host, log_path)] = runner
            return runner

    def close(self) -> None:
        with self._lock:
            for runner in self._runners.values():
                runner.close()
            self._runners.clear()


class SshNodeAccess(NodeAccess):
    """Nodes reached over SSH as the config's `auth` says, with `key` (the config's, or one
    the launcher manages for the cluster) as the private key, at the address `address`
    gives (a node's listed IP unless told otherwise). Connections are made on first use and
    shared by the commands of one process (and with the provider's own, where it passes its
    `ssh`); ports are forwarded through them. `by_node`: a runner belongs to the node id, so
    a new machine at a reused address is pinned afresh (clouds); False where the machine
    is known by its address (on-prem)."""

    def __init__(
        self,
        config: ClusterConfig,
        key: str | None,
        *,
        address: Callable[[Node], str | None] = lambda node: node.ip,
        ssh: SSHAccess | None = None,
        by_node: bool = True,
    ) -> None:
        super().__init__(config)
        auth = config.auth
        self.auth = auth if key == auth.ssh_private_key else replace(auth, ssh_private_key=key)
        self._key = key
        self._address = address
        self._by_node = by_node
        self._ssh = ssh
        self._lock = threading.Lock()

    def ssh_private_key(self) -> str | None:
        return self._key

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        host = self._address(node)
        if not host:
            raise ProviderError(f"node {node.id} has no address yet")
        with self._lock:
            if self._ssh is None:
                self._ssh = SSHAccess(self.cluster_name, self.auth)
            ssh = self._ssh
        return ssh.runner(host, log_path, node=node.id if self._by_node else None)

    def port_opener(self, node: Node, runner: CommandRunner) -> PortOpener:
        return ssh_tunnel(runner)


def ssh_tunnel(runner: CommandRunner) -> PortOpener:
    """Ports forwarded through the node's SSH connection, to the port as the node itself
    sees it (a firewall lets only SSH in; Ray's dashboard listens on localhost)."""
    assert isinstance(runner, SSHRunner)
    return runner.open_tunnel
