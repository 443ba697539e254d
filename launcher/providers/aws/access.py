"""How the launcher reaches EC2 instances: SSH (`SshNodeAccess`), with the cluster's key,
the instances' private addresses inside the VPC for Ray, and the watcher of a spot
worker's interruption notice started beside its Ray."""

from __future__ import annotations

from collections.abc import Mapping

from launcher.config.model import ClusterConfig
from launcher.providers.aws.launch import is_spot
from launcher.providers.nodes import Node
from launcher.providers.notices import spot_worker_watcher
from launcher.providers.ssh_access import SshNodeAccess


class AwsAccess(SshNodeAccess):
    def __init__(
        self, config: ClusterConfig, key: str | None, private_ips: Mapping[str, str]
    ) -> None:
        super().__init__(config, key)
        # Node id -> private IP, as the provider's listings fill it in (shared, not copied).
        self._private_ips = private_ips

    def node_env(self, node: Node, head: Node | None) -> dict[str, str]:
        env = super().node_env(node, head)
        if node.id in self._private_ips:
            env["LAUNCHER_NODE_IP"] = self._private_ips[node.id]
        if head is not None and head.id in self._private_ips:
            env["RAY_HEAD_IP"] = self._private_ips[head.id]
        return env

    def ray_address(self, head: Node) -> str:
        return f"{self._private_ips.get(head.id, head.ip)}:{self.gcs_port()}"

    def after_ray_start(self, node: Node) -> tuple[str, ...]:
        return spot_worker_watcher(self.config, node, self.gcs_port(), is_spot, "aws")
