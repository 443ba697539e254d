"""Config-time knowledge of the on-prem provider (`type: local`, as in Ray)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.checks import as_count
from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem, Severity
from launcher.pricing import PriceTable
from launcher.providers.spec import (
    NodeOffer,
    PlannedResource,
    ProviderSpec,
    extra_keys,
    string_list,
)

_KNOWN = {
    "type",
    "head_ip",
    "worker_ips",
    "external_head_ip",
    "coordinator_address",
    "head_python",
}
# Ray's published examples write counts as placeholders such as TYPICALLY_THE_NUMBER_OF_WORKER_IPS.
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
_WORKER_TYPE = "ray.worker.default"


@dataclass(frozen=True)
class OnPremProviderConfig(ProviderConfig):
    head_ip: str | None
    worker_ips: tuple[str, ...]
    external_head_ip: str | None
    coordinator_address: str | None


def _worker_ips(raw: Mapping[str, Any]) -> list[str] | None:
    provider = raw.get("provider")
    if isinstance(provider, Mapping) and isinstance(provider.get("worker_ips"), list):
        return [ip for ip in provider["worker_ips"] if isinstance(ip, str)]
    return None


class OnPremSpec(ProviderSpec):
    type = "local"
    title = "local (on-prem)"
    schema_name = "local"
    defaults_name = "local"

    def prepare(self, raw: dict[str, Any]) -> list[Problem]:
        problems = []
        ips = _worker_ips(raw)
        for key in ("min_workers", "max_workers"):
            value = raw.get(key)
            if isinstance(value, str) and _PLACEHOLDER.match(value) and ips is not None:
                del raw[key]
                problems.append(
                    Problem(
                        (key,),
                        f"placeholder {value!r} read as the number of worker_ips ({len(ips)})",
                        f"write a number to choose another count, e.g. `{key}: {len(ips)}`",
                        severity=Severity.WARNING,
                    )
                )
        if ips is not None and "max_workers" not in raw:
            raw["max_workers"] = len(ips)
        return problems

    def complete(self, merged: dict[str, Any]) -> list[Problem]:
        ips = _worker_ips(merged)
        if ips is None:
            return []
        problems = []
        count = len(ips)
        if as_count(merged.get("max_workers")) is not None and merged["max_workers"] > count:
            # As Ray does: there cannot be more workers than machines.
            problems.append(_capped(("max_workers",), merged["max_workers"], count))
            merged["max_workers"] = count
        types = merged.get("available_node_types")
        for name, node_type in types.items() if isinstance(types, dict) else ():
            if not isinstance(node_type, dict):
                continue
            if name == _WORKER_TYPE:
                # By default every listed machine is kept in the cluster.
                node_type.setdefault("min_workers", count)
                node_type.setdefault("max_workers", count)
            for key in ("min_workers", "max_workers"):
                value = as_count(node_type.get(key))
                if value is not None and value > count:
                    problems.append(_capped(("available_node_types", name, key), value, count))
                    node_type[key] = count
        return problems

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        provider = merged.get("provider")
        if not isinstance(provider, Mapping):
            return []
        problems: list[Problem] = []
        has_coordinator = isinstance(provider.get("coordinator_address"), str)
        if not has_coordinator and "head_ip" not in provider:
            problems.append(
                Problem(
                    ("provider",),
                    "no machines given",
                    "set provider.head_ip and provider.worker_ips "
                    "(or provider.coordinator_address)",
                )
            )
        ips = _worker_ips(merged)
        if ips is None:
            if not has_coordinator and "worker_ips" not in provider:
                problems.append(
                    Problem(
                        ("provider",),
                        "provider.worker_ips is missing",
                        "list the worker machines, or `worker_ips: []` for a head-only cluster",
                    )
                )
            return problems
        seen: set[str] = set()
        for index, ip in enumerate(ips):
            if ip in seen:
                problems.append(
                    Problem(
                        ("provider", "worker_ips", index),
                        f"{ip} is listed twice",
                        "list each machine once",
                    )
                )
            seen.add(ip)
        if isinstance(provider.get("head_ip"), str) and provider["head_ip"] in seen:
            problems.append(
                Problem(
                    ("provider", "head_ip"),
                    f"{provider['head_ip']} is also listed in worker_ips",
                    "a machine is either the head or a worker; remove it from one",
                )
            )
        return problems

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        return OnPremProviderConfig(
            type="local",
            extra=freeze(extra_keys(section, _KNOWN)),
            head_ip=section.get("head_ip"),
            worker_ips=string_list(section.get("worker_ips", [])),
            external_head_ip=section.get("external_head_ip"),
            coordinator_address=section.get("coordinator_address"),
            head_python=section.get("head_python"),
        )

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        provider = config.provider
        assert isinstance(provider, OnPremProviderConfig)
        if provider.coordinator_address:
            return [
                PlannedResource(
                    "machines",
                    provider.coordinator_address,
                    "use",
                    "handed out by the coordinator server",
                )
            ]
        return [
            PlannedResource("head machine", provider.head_ip or "?", "use", "over SSH"),
            PlannedResource(
                "worker machines",
                ", ".join(provider.worker_ips) or "(none)",
                "use",
                f"{len(provider.worker_ips)} listed; in-use ones tracked on the head",
            ),
        ]

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        return NodeOffer("one of your machines", spot=False, price=None, billed=False)


def _capped(path: tuple[str, ...], value: int, count: int) -> Problem:
    return Problem(
        path,
        f"{value} is more than the {count} machines in provider.worker_ips; using {count}",
        "list more machines or lower the number",
        severity=Severity.WARNING,
    )
