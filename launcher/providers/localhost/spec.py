"""Config-time knowledge of the localhost provider (and Ray's `fake_multinode` alias)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.pricing import PriceTable
from launcher.providers.spec import NodeOffer, PlannedResource, ProviderSpec, extra_keys

_KNOWN = {"type", "use_node_id_as_ip", "disable_node_updaters", "disable_launch_config_check"}


@dataclass(frozen=True)
class LocalhostProviderConfig(ProviderConfig):
    pass


class LocalhostSpec(ProviderSpec):
    type = "localhost"
    title = "localhost"
    schema_name = "localhost"
    defaults_name = "localhost"
    install_extra = "ray"
    sdk_module = "ray"

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        return LocalhostProviderConfig(
            type=str(section["type"]), extra=freeze(extra_keys(section, _KNOWN))
        )

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        return [
            PlannedResource(
                "state directory",
                f"~/.launcher/clusters/{config.cluster_name}",
                "create if missing",
                "node ids, tags, IPs, pids and per-node logs",
            ),
            PlannedResource(
                "loopback addresses",
                "127.0.0.2 and up",
                "use",
                "one per node; Ray ports chosen free for this cluster",
            ),
        ]

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(node_type.resources.items()))
        return NodeOffer(
            f"Ray node on this machine ({shown or 'detected resources'})",
            spot=False,
            price=None,
            billed=False,
        )


class FakeMultinodeSpec(LocalhostSpec):
    """Ray's name for the same provider; identical behaviour."""

    type = "fake_multinode"
