"""Config-time knowledge of the Kubernetes provider. Imports no Kubernetes client."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem
from launcher.pricing import PriceTable
from launcher.providers.kubernetes.names import autoscaler_name, label_problem, pod_name_prefix
from launcher.providers.spec import (
    ControllerCredentials,
    CredentialFile,
    NodeOffer,
    PlannedResource,
    ProviderSpec,
    extra_keys,
)

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


def _autoscaler_objects(config: ClusterConfig) -> list[tuple[str, str, bool]]:
    """(kind, name, the launcher's own) of the head pod's service account, role and role
    binding: the config's, or the cluster's own where it names none (as objects.py makes)."""
    provider = config.provider
    assert isinstance(provider, KubernetesProviderConfig)
    own = autoscaler_name(config.cluster_name)
    return [
        (kind, _name(manifest, "?") if manifest else own, not manifest)
        for kind, manifest in (
            ("service account", provider.service_account),
            ("role", provider.role),
            ("role binding", provider.role_binding),
        )
    ]


def _pod_name_prefixes(config: ClusterConfig) -> dict[str, str]:
    """{"head": prefix, "worker": prefix} for the kinds of pods whose manifest names no
    `generateName` (pods.py gives those the cluster's prefix)."""
    head = config.head_node_type
    kinds = {
        "head": [config.node_types[head]] if head in config.node_types else [],
        "worker": [t for t in config.node_types.values() if t.name != head or t.max_workers],
    }
    return {
        kind: pod_name_prefix(config.cluster_name, kind)
        for kind, types in kinds.items()
        if any(not _generate_name(t.node_config) for t in types)
    }


def _generate_name(node_config: Mapping[str, Any]) -> str | None:
    metadata = node_config.get("metadata")
    found = metadata.get("generateName") if isinstance(metadata, Mapping) else None
    return str(found) if found else None


class KubernetesSpec(ProviderSpec):
    type = "kubernetes"
    implementation = "launcher.providers.kubernetes.provider:KubernetesProvider"
    title = "kubernetes"
    controller_credentials = ControllerCredentials(
        files=(CredentialFile("KUBECONFIG", (".kube/config",)),)
    )
    install_extra = "kubernetes"
    sdk_module = "kubernetes"

    def region_label(self, config: ClusterConfig) -> str:
        provider = config.provider
        return provider.namespace if isinstance(provider, KubernetesProviderConfig) else ""

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        # The cluster's pods are found by a label holding its exact name.
        name = merged.get("cluster_name")
        problem = label_problem(name) if isinstance(name, str) else None
        return [Problem(("cluster_name",), problem, "rename the cluster")] if problem else []

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
        for kind, name, own in _autoscaler_objects(config):
            detail = "the cluster's own" if own else ""
            plan.append(PlannedResource(kind, name, "create if missing", detail))
        for service in provider.services:
            plan.append(PlannedResource("service", _name(service, "?"), "create if missing"))
        for kind, prefix in _pod_name_prefixes(config).items():
            plan.append(
                PlannedResource(f"{kind} pods", f"{prefix}*", "create", "named by Kubernetes")
            )
        return plan

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        names = {kind: name for kind, name, own in _autoscaler_objects(config) if own}
        for kind, prefix in _pod_name_prefixes(config).items():
            names[f"{kind} pod name prefix"] = prefix
        return names

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        wanted = _container_resources(node_type.node_config)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "no requests"
        # Pods cost what the Kubernetes cluster's machines cost: billed, at a price unknown here.
        return NodeOffer(f"pod ({shown})", spot=False, price=None)
