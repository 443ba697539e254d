"""The cluster's two firewall rules on its network: SSH in from where the launcher runs (or
`allow_ssh_from`, or with `use_internal_ips` the network's own address ranges), and all
traffic between the cluster's nodes, both targeting the cluster's network tag.

A rule that exists is compared with what the config asks now and patched where it differs
(a new caller address, a narrowed `allow_ssh_from`), never left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.gcp import names
from launcher.providers.gcp.clients import api_errors, error_message, http_status

# The fields of a rule the launcher sets and keeps as the config says.
COMPARED = ("allowed", "sourceRanges", "sourceTags", "targetTags")


def rules(cluster: str, network: str, ssh_from: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Rule name -> the rule's body (less its name)."""
    tag = names.network_tag(cluster)
    description = f"launcher: cluster {cluster}"
    return {
        names.ssh_rule(cluster): {
            "network": network,
            "direction": "INGRESS",
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
            "sourceRanges": sorted(set(ssh_from)),
            "targetTags": [tag],
            "description": f"{description}: SSH from the launcher's address",
        },
        names.internal_rule(cluster): {
            "network": network,
            "direction": "INGRESS",
            "allowed": [{"IPProtocol": "all"}],
            "sourceTags": [tag],
            "targetTags": [tag],
            "description": f"{description}: all traffic between its nodes",
        },
    }


def _normal(field: str, value: Any) -> Any:
    if field == "allowed":
        return sorted(
            (str(a.get("IPProtocol", "")), tuple(sorted(a.get("ports") or ()))) for a in value or ()
        )
    return sorted(str(v) for v in value or ())


def differences(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `wanted` that `existing` does not have as asked: a patch body."""
    return {
        field: wanted[field]
        for field in COMPARED
        if field in wanted and _normal(field, existing.get(field)) != _normal(field, wanted[field])
    }


def network_ranges(
    subnetworks: Iterable[Mapping[str, Any]], network: str, legacy_range: str | None = None
) -> list[str]:
    """The address ranges of `network`'s subnetworks (every region), or a legacy network's
    own range."""
    tail = "networks/" + network.rstrip("/").rsplit("networks/", 1)[-1]
    found = {
        str(s["ipCidrRange"])
        for s in subnetworks
        if str(s.get("network", "")).rstrip("/").endswith(tail) and s.get("ipCidrRange")
    }
    if legacy_range:
        found.add(legacy_range)
    return sorted(found)


Execute = Callable[..., Any]
Wait = Callable[[Any, str], Any]


def ensure(
    firewalls: Any,
    project: str,
    wanted: Mapping[str, Mapping[str, Any]],
    execute: Execute,
    wait: Wait,
) -> list[str]:
    """Create each rule of `wanted` that is missing, patch each that differs. What it did."""
    done = []
    for name, rule in wanted.items():
        try:
            existing = execute(firewalls.get, project=project, firewall=name)
        except api_errors() as exc:
            if http_status(exc) != 404:
                raise ProviderError(
                    f"cannot read firewall rule {name}: {error_message(exc)}"
                ) from exc
            existing = None
        if existing is None:
            if _insert(firewalls, project, name, rule, execute, wait):
                done.append(f"created firewall rule {name} ({rule['description']})")
            continue
        patch = differences(existing, rule)
        if patch:
            try:
                operation = execute(firewalls.patch, project=project, firewall=name, body=patch)
            except api_errors() as exc:
                raise ProviderError(
                    f"cannot update firewall rule {name}: {error_message(exc)}"
                ) from exc
            wait(operation, f"update firewall rule {name}")
            changed = ", ".join(f"{k} {existing.get(k)} -> {v}" for k, v in patch.items())
            done.append(f"updated firewall rule {name}: {changed}")
    return done


def _insert(
    firewalls: Any, project: str, name: str, rule: Mapping[str, Any], execute: Execute, wait: Wait
) -> bool:
    try:
        operation = execute(firewalls.insert, project=project, body={"name": name, **rule})
    except api_errors() as exc:
        if http_status(exc) == 409:  # made meanwhile
            return False
        raise ProviderError(f"cannot create firewall rule {name}: {error_message(exc)}") from exc
    wait(operation, f"create firewall rule {name}")
    return True
