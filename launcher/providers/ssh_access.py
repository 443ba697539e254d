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
from pathlib import Path

from launcher.config.model import AuthConfig
from launcher.errors import UsageError
from launcher.paths import cluster_dir
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
