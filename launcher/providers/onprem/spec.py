"""Config-time knowledge of the on-prem provider (`type: local`, as in Ray)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.checks import as_count
from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem, Severity
from launcher.pricing import PriceTable
from launcher.providers.spec import (
    ControllerCredentials,
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
# ... and end their lists of machines with `...`.
_ELLIPSIS = "..."
# What the schema lets through as an address rather than a host name: checked here.
_IPV4_LIKE = re.compile(r"[0-9.]+")
_IPV6_LIKE = re.compile(r"[0-9A-Fa-f]*:[0-9A-Fa-f:.]*(?:%[-A-Za-z0-9_.]+)?")
# Where the head machine keeps the records of the machines a cluster uses (records.py). The
# exact cluster name: the config's pattern allows only letters, digits, `-`, `_` and `.`,
# starting with a letter or digit, so it is one path component, and two names never share
# one (on a file system that tells case apart; see records.py).
RECORDS_DIR = "~/.launcher/onprem"


def records_dir(cluster_name: str) -> str:
    return f"{RECORDS_DIR}/{cluster_name}"


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
    implementation = "launcher.providers.onprem.provider:OnPremProvider"
    title = "local (on-prem)"
    controller_credentials = ControllerCredentials()  # SSH keys only, which go anyway

    def region_label(self, config: ClusterConfig) -> str:
        provider = config.provider
        if isinstance(provider, OnPremProviderConfig):
            return provider.head_ip or ""
        return ""

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
        problems = _ssh_user_problems(merged.get("auth"))
        for path, value in _addresses(provider):
            problem = _address_problem(path, value)
            if problem is not None:
                problems.append(problem)
        if isinstance(provider.get("coordinator_address"), str):
            problems.append(
                Problem(
                    ("provider", "coordinator_address"),
                    "Ray's coordinator server is not supported; `up` refuses this config",
                    "list the machines in provider.head_ip and provider.worker_ips instead",
                    severity=Severity.WARNING,
                )
            )
        return problems + _machine_problems(provider, merged)

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
            PlannedResource(
                "records of machines in use",
                records_dir(config.cluster_name),
                "create if missing",
                "on the head machine",
            ),
        ]

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        return {"records of machines in use": records_dir(config.cluster_name)}

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        return NodeOffer("one of your machines", spot=False, price=None, billed=False)


def _ssh_user_problems(auth: object) -> list[Problem]:
    """The machines are reached over SSH as `auth.ssh_user`, which has no default."""
    if auth is None:
        auth = {}
    if not isinstance(auth, Mapping):
        return []  # the schema says what `auth` should be
    fix = "set auth.ssh_user to the user to log in as on your machines, such as `ssh_user: ubuntu`"
    if "ssh_user" not in auth:
        return [Problem(("auth",), "`ssh_user` is missing", fix)]
    if auth["ssh_user"] == "":
        return [Problem(("auth", "ssh_user"), "must not be empty", fix)]
    return []


def _addresses(provider: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    for key in ("head_ip", "external_head_ip"):
        if isinstance(provider.get(key), str):
            yield ("provider", key), provider[key]
    workers = provider.get("worker_ips")
    for index, value in enumerate(workers if isinstance(workers, list) else []):
        if isinstance(value, str):
            yield ("provider", "worker_ips", index), value


def _address_problem(path: tuple[str | int, ...], value: str) -> Problem | None:
    """What the schema's pattern cannot tell: whether an address-shaped value is an address
    (`999.1.1.1` is not), and the `...` of Ray's examples."""
    if value == _ELLIPSIS:
        return Problem(
            path,
            "'...' is a placeholder from Ray's examples, not a machine",
            "list your machines' host names or IP addresses",
            severity=Severity.WARNING,
        )
    if _IPV4_LIKE.fullmatch(value):
        kind, fix = "IPv4", "write four numbers of 0 to 255, such as 192.168.1.10"
    elif _IPV6_LIKE.fullmatch(value):
        kind, fix = "IPv6", "write an IPv6 address such as fe80::1 (no brackets, no port)"
    else:
        return None  # a host name, or refused by the schema's pattern
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return Problem(path, f"{value!r} is not an {kind} address", fix)
    return None


def _machine_problems(provider: Mapping[str, Any], merged: Mapping[str, Any]) -> list[Problem]:
    """The machines are listed, once each."""
    problems: list[Problem] = []
    has_coordinator = isinstance(provider.get("coordinator_address"), str)
    if not has_coordinator and "head_ip" not in provider:
        problems.append(
            Problem(
                ("provider",),
                "no machines given",
                "set provider.head_ip and provider.worker_ips",
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


def _capped(path: tuple[str, ...], value: int, count: int) -> Problem:
    return Problem(
        path,
        f"{value} is more than the {count} machines in provider.worker_ips; using {count}",
        "list more machines or lower the number",
        severity=Severity.WARNING,
    )
