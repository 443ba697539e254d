"""How the launcher reaches Azure VMs: SSH (`SshNodeAccess`) with the cluster's key, and
what runs on a node beyond Ray's defaults:

- the head's commands (its autoscaler among them) get what azure-identity and the launcher
  need there to act as the head's user-assigned managed identity: `AZURE_CLIENT_ID` of
  that identity (ManagedIdentityCredential asks the VM's metadata service for its token),
  the subscription (`AZURE_SUBSCRIPTION_ID`, when the config names none the head would
  otherwise not know it), and the Resource Manager and token authority endpoints this
  machine uses, when set (another cloud's, as for Azure's sovereign clouds), and its
  polling interval (`LAUNCHER_AZURE_POLL_S`, clients.py). Never this
  machine's own secrets: the head acts as its identity, not as the user;
- a spot worker runs the watcher of Azure's Scheduled Events `Preempt` notice beside its
  Ray (launcher/providers/notice_watch.py `--cloud azure`), as AWS's spot workers run
  theirs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from launcher.config.model import ClusterConfig
from launcher.providers.azure.clients import (
    AUTHORITY_VARIABLE,
    ENDPOINT_VARIABLE,
    POLL_VARIABLE,
    SUBSCRIPTION_VARIABLE,
)
from launcher.providers.azure.model import AzureProviderConfig, is_spot
from launcher.providers.nodes import Node, NodeKind
from launcher.providers.notices import spot_worker_watcher
from launcher.providers.ssh_access import SshNodeAccess

# The variable ManagedIdentityCredential reads to pick a user-assigned identity.
CLIENT_ID_VARIABLE = "AZURE_CLIENT_ID"
# This machine's variables the head gets as they are, when set.
PASSED_VARIABLES = (ENDPOINT_VARIABLE, AUTHORITY_VARIABLE, POLL_VARIABLE)


class AzureAccess(SshNodeAccess):
    """`identity_of(head)`: the client id of the managed identity the head VM runs as
    (None when it has none, or it cannot be read now); `environ`: this machine's
    environment (os.environ unless told)."""

    def __init__(
        self,
        config: ClusterConfig,
        key: str | None,
        identity_of: Callable[[Node], str | None],
        environ: Mapping[str, str] | None = None,
        subscription: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(config, key)
        settings = config.provider
        assert isinstance(settings, AzureProviderConfig)
        self.settings = settings
        self._identity_of = identity_of
        self._environ = environ
        self._subscription = subscription

    def _env(self) -> Mapping[str, str]:
        return os.environ if self._environ is None else self._environ

    def node_env(self, node: Node, head: Node | None) -> dict[str, str]:
        env = super().node_env(node, head)
        if node.kind is not NodeKind.HEAD:
            return env
        environ = self._env()
        subscription = self.settings.subscription_id or environ.get(SUBSCRIPTION_VARIABLE)
        if not subscription and self._subscription is not None:
            subscription = self._subscription()  # found as the clients find it
        if subscription:
            env[SUBSCRIPTION_VARIABLE] = subscription
        for variable in PASSED_VARIABLES:
            if environ.get(variable):
                env[variable] = environ[variable]
        client_id = self._identity_of(node)
        if client_id:
            env[CLIENT_ID_VARIABLE] = client_id
        return env

    def after_ray_start(self, node: Node) -> tuple[str, ...]:
        return spot_worker_watcher(self.config, node, self.gcs_port(), is_spot, "azure")
