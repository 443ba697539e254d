"""Config-time knowledge of the Kubernetes provider. Imports no Kubernetes client."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.pricing import PriceTable
from launcher.providers.spec import NodeOffer, PlannedResource, ProviderSpec, extra_keys

_KNOWN = {
    "type",
    "namespace",
    "use_internal_ips",
    "autoscaler_service_account",
    "autoscaler_role",
    "autoscaler_role_binding",
    "services",
    "disable_node_updaters",
    "context",
    "scheduling_timeout_s",
    "head_python",
}
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@dataclass(frozen=True)
class KubernetesProviderConfig(ProviderConfig):
    namespace: str
    use_internal_ips: bool
    service_account: Mapping[str, Any] | None
    role: Mapping[str, Any] | None
    role_binding: Mapping[str, Any] | None
    services: tuple[Mapping[str, Any], ...]
    context: str | None = None  # the kubeconfig context; None: its current context
    # How long a new pod may stay unschedulable before it counts as a capacity failure.
    scheduling_timeout_s: float = 30.0


def parse_quantity(value: object) -> float | None:
    """A Kubernetes quantity (`500m`, `2Gi`, `4`) as a number, or None if unreadable."""
    match = _QUANTITY.match(str(value)) if value is not None else None
    if not match or match.group(2) not in _SUFFIX:
        return None
    try:
        return float(match.group(1)) * _SUFFIX[match.group(2)]
    except ValueError:
        return None


def _container_resources(node_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first container's resource limits over its requests; {} for any other shape."""
    spec = node_config.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list | tuple) or not containers:
        return {}
    first = containers[0]
    resources = first.get("resources") if isinstance(first, Mapping) else None
    if not isinstance(resources, Mapping):
        return {}
    merged: dict[str, Any] = {}
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, Mapping):
            merged.update(values)
    return merged


def _name(manifest: Mapping[str, Any] | None, fallback: str) -> str:
    metadata = manifest.get("metadata") if manifest else None
    return str(metadata.get("name", fallback)) if isinstance(metadata, Mapping) else fallback


class KubernetesSpec(ProviderSpec):
    type = "kubernetes"
    title = "kubernetes"
    schema_name = "kubernetes"
    defaults_name = "kubernetes"
    install_extra = "kubernetes"
    sdk_module = "kubernetes"

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        return KubernetesProviderConfig(
            type="kubernetes",
            extra=freeze(extra_keys(section, _KNOWN)),
            namespace=str(section["namespace"]),
            use_internal_ips=bool(section.get("use_internal_ips", True)),
            service_account=freeze(section.get("autoscaler_service_account")),
            role=freeze(section.get("autoscaler_role")),
            role_binding=freeze(section.get("autoscaler_role_binding")),
            services=freeze(section.get("services", [])),
            context=str(section["context"]) if section.get("context") else None,
            scheduling_timeout_s=float(section.get("scheduling_timeout_s", 30.0)),
            head_python=section.get("head_python"),
        )

    def known_resources(self, node_config: Mapping[str, Any]) -> dict[str, int] | None:
        wanted = _container_resources(node_config)
        found: dict[str, int] = {}
        cpu = parse_quantity(wanted.get("cpu"))
        if cpu is not None:
            found["CPU"] = math.ceil(cpu)  # as Ray does: part of a CPU counts as one
        memory = parse_quantity(wanted.get("memory"))
        if memory is not None:
            found["memory"] = int(memory * 0.7)
        gpus = [parse_quantity(v) for k, v in wanted.items() if "gpu" in str(k).lower()]
        if any(gpus):
            found["GPU"] = int(sum(g or 0 for g in gpus))
        return found or None

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        provider = config.provider
        assert isinstance(provider, KubernetesProviderConfig)
        plan = [PlannedResource("namespace", provider.namespace, "use")]
        for kind, manifest in (
            ("service account", provider.service_account),
            ("role", provider.role),
            ("role binding", provider.role_binding),
        ):
            if manifest is not None:
                plan.append(PlannedResource(kind, _name(manifest, "?"), "create if missing"))
        for service in provider.services:
            plan.append(PlannedResource("service", _name(service, "?"), "create if missing"))
        return plan

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        wanted = _container_resources(node_type.node_config)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "no requests"
        # Pods cost what the Kubernetes cluster's machines cost: billed, at a price unknown here.
        return NodeOffer(f"pod ({shown})", spot=False, price=None)
