"""What the end-to-end Azure tests share: the Azure wire fake with its running VMs as real
SSH hosts (whose sessions have only what a real VM has), and the environment the launcher's
CLI runs in against it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from fakes.azure.hosts import AzureHosts
from fakes.azure.server import AzureServer


@contextlib.contextmanager
def azure_vms() -> Iterator[tuple[AzureServer, AzureHosts]]:
    """The fake and its hosts; the hosts are checked (none left running) at the end."""
    with (
        AzureServer(retry_after=0, lro_s=0.05) as server,
        AzureHosts(server, sessions="machine") as hosts,
    ):
        yield server, hosts
        hosts.check()


def cli_env(server: AzureServer, home: Path) -> dict[str, str]:
    """The launcher CLI's environment: the fake's endpoints and credentials, a home of the
    test's own, and operations polled every 0.1 s (they take 0.05 s here)."""
    return {
        **os.environ,
        **server.env(),
        "LAUNCHER_HOME": str(home),
        "LAUNCHER_AZURE_POLL_S": "0.1",
    }
