"""Config-time knowledge of the localhost provider (and Ray's `fake_multinode` alias)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem, Severity
from launcher.paths import cluster_dir
from launcher.pricing import PriceTable
from launcher.providers.spec import NodeOffer, PlannedResource, ProviderSpec, extra_keys

_KNOWN = {"type", "use_node_id_as_ip", "disable_node_updaters", "disable_launch_config_check"}


@dataclass(frozen=True)
class LocalhostProviderConfig(ProviderConfig):
    pass


def state_dir(cluster_name: str) -> str:
    """Where the localhost provider keeps a cluster's nodes (under the launcher's home)."""
    return str(cluster_dir(cluster_name) / "localhost")


def process_key(cluster_name: str) -> str:
    """What every process of a cluster carries (LAUNCHER_CLUSTER_KEY): a hash of the user and
    the cluster's state directory, so the cluster's own in this home, where its name alone
    is shared by every home and user; and known again after the state directory is lost."""
    return hashlib.sha256(f"{os.getuid()}:{state_dir(cluster_name)}".encode()).hexdigest()[:32]


def ray_temp_dir(cluster_name: str) -> str:
    """Ray's temp dir for a cluster: short, since Ray puts Unix sockets under it, and the
    cluster's own (named after its state directory, so after its home, and the user)."""
    digest = hashlib.sha256(state_dir(cluster_name).encode()).hexdigest()[:10]
    return f"/tmp/launcher-{os.getuid()}-{digest}"


def node_temp_dir(cluster_name: str, node_id: str) -> str:
    """A worker's own Ray temp dir (LAUNCHER_NODE_TEMP_DIR), inside the cluster's: Ray names
    a node's sockets and logs by counting those already in its session directory, so
    workers that share one cannot start side by side."""
    return f"{ray_temp_dir(cluster_name)}/{node_id}"


_START_KEYS = ("head_start_ray_commands", "worker_start_ray_commands")
_COMMAND_KEYS = (
    "initialization_commands",
    "setup_commands",
    "head_setup_commands",
    "worker_setup_commands",
    *_START_KEYS,
)


class LocalhostSpec(ProviderSpec):
    type = "localhost"
    implementation = "launcher.providers.localhost.provider:LocalhostProvider"
    title = "localhost"
    install_extra = "ray"
    sdk_module = "ray"

    def region_label(self, config: ClusterConfig) -> str:
        return "this machine"

    def complete(self, merged: dict[str, Any]) -> list[Problem]:
        """Ray's fake_multinode configs leave the start commands empty (Ray starts its fake
        nodes itself); here real nodes need them, so the provider's own are used."""
        defaults = self.defaults()
        problems = []
        for key in _START_KEYS:
            if merged.get(key) == []:
                merged[key] = defaults[key]
                problems.append(
                    Problem(
                        (key,),
                        "empty; the localhost provider's own start commands are used",
                        "remove the key to silence this",
                        severity=Severity.WARNING,
                    )
                )
        return problems

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        problems = []
        for key in _COMMAND_KEYS:
            commands = merged.get(key)
            for index, command in enumerate(commands if isinstance(commands, list) else ()):
                if isinstance(command, str) and re.search(r"\bray\s+stop\b", command):
                    problems.append(
                        Problem(
                            (key, index),
                            "`ray stop` stops every Ray node on this machine, "
                            "including this cluster's other nodes",
                            "remove it: the launcher stops a node's own Ray before restarting it",
                            severity=Severity.WARNING,
                        )
                    )
        return problems

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        return LocalhostProviderConfig(
            type=str(section["type"]), extra=freeze(extra_keys(section, _KNOWN))
        )

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        names = self.derived_names(config)
        return [
            PlannedResource(
                "state directory",
                names["state directory"],
                "create if missing",
                "node ids, tags, IPs, ports and per-node logs",
            ),
            PlannedResource("Ray temp directory", names["Ray temp directory"], "create if missing"),
            PlannedResource(
                "loopback addresses",
                "127.0.0.2 and up",
                "use",
                "one per node, with Ray ports, claimed for every user and home of this machine",
            ),
        ]

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        name = config.cluster_name
        return {"state directory": state_dir(name), "Ray temp directory": ray_temp_dir(name)}

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(node_type.resources.items()))
        spot = node_type.node_config.get("simulated_spot") is True
        return NodeOffer(
            f"Ray node on this machine ({shown or 'detected resources'})"
            + (", simulated spot" if spot else ""),
            spot=spot,
            price=None,
            billed=False,
        )


class FakeMultinodeSpec(LocalhostSpec):
    """Ray's name for the same provider; identical behaviour."""

    type = "fake_multinode"
