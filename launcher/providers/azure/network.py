"""The cluster's resource group, virtual network, subnet and network security group: each
reused when present, created (and tagged as the cluster's) when not; removed by
`down --purge` only where that tag says the cluster created it. The resource group goes
last, and only when nothing but the cluster's own resources is left in it: a group the
cluster made may hold another cluster's nodes or the user's resources since.

The security group lets SSH in only from `ssh_from` (the caller's public address by
default, or `provider.allow_ssh_from`); traffic inside the virtual network is allowed by
Azure's default rules. It is attached to the cluster's subnet, so it covers every node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.azure import names
from launcher.providers.azure.clients import AzureClients, arm_message, get_or_none, not_found
from launcher.providers.azure.model import AzureProviderConfig
from launcher.providers.nodes import TAG_CLUSTER

OWNER_TAG = "launcher-created-for"  # the cluster a resource was created for
SSH_RULE = "launcher-ssh"
SSH_PRIORITY = 1000


@dataclass(frozen=True)
class ClusterNetwork:
    subnet_id: str
    security_group_id: str


def ensure_group(clients: AzureClients, settings: AzureProviderConfig, cluster: str) -> list[str]:
    group = settings.resource_group
    try:
        if clients.resources.resource_groups.check_existence(group):
            return []
        clients.resources.resource_groups.create_or_update(
            group, {"location": settings.location, "tags": {OWNER_TAG: cluster}}
        )
    except Exception as exc:
        raise ProviderError(f"cannot create resource group {group}: {arm_message(exc)}") from exc
    return [f"created resource group {group} in {settings.location}"]


def _ssh_rule(ssh_from: Sequence[str]) -> dict[str, Any]:
    return {
        "name": SSH_RULE,
        "properties": {
            "protocol": "Tcp",
            "direction": "Inbound",
            "access": "Allow",
            "priority": SSH_PRIORITY,
            "sourceAddressPrefixes": sorted(ssh_from),
            "sourcePortRange": "*",
            "destinationAddressPrefix": "*",
            "destinationPortRange": "22",
        },
    }


def _rule_matches(group: Any, ssh_from: Sequence[str]) -> bool:
    for rule in getattr(group, "security_rules", None) or ():
        if rule.name == SSH_RULE:
            sources = sorted(rule.source_address_prefixes or [])
            return sources == sorted(ssh_from) and rule.destination_port_range == "22"
    return False


def ensure_network(
    clients: AzureClients,
    settings: AzureProviderConfig,
    cluster: str,
    ssh_from: Sequence[str],
) -> tuple[ClusterNetwork, list[str]]:
    """The cluster's subnet and security group, made or brought to what the config asks.
    Returns them and what was done (one line each)."""
    network = clients.network
    group, done = settings.resource_group, []
    nsg_name = names.security_group(cluster, settings.unique_id)
    vnet_name = names.vnet(cluster, settings.unique_id)
    subnet_name = names.subnet(cluster, settings.unique_id)
    nsg = get_or_none(lambda: network.network_security_groups.get(group, nsg_name))
    if nsg is None or not _rule_matches(nsg, ssh_from):
        existed = nsg is not None
        tags = dict(nsg.tags or {}) if nsg is not None else {OWNER_TAG: cluster}
        body = {
            "location": settings.location,
            "tags": tags,
            "properties": {"securityRules": [_ssh_rule(ssh_from)]},
        }
        try:
            nsg = network.network_security_groups.begin_create_or_update(
                group, nsg_name, body
            ).result()
        except Exception as exc:
            raise ProviderError(
                f"cannot create network security group {nsg_name}: {arm_message(exc)}"
            ) from exc
        what = "updated" if existed else "created"
        done.append(f"{what} network security group {nsg_name} (SSH from {', '.join(ssh_from)})")
    subnet_body = {
        "name": subnet_name,
        "properties": {
            "addressPrefix": settings.subnet_mask,
            "networkSecurityGroup": {"id": nsg.id},
        },
    }
    vnet = get_or_none(lambda: network.virtual_networks.get(group, vnet_name))
    if vnet is None:
        body = {
            "location": settings.location,
            "tags": {OWNER_TAG: cluster},
            "properties": {
                "addressSpace": {"addressPrefixes": [settings.subnet_mask]},
                "subnets": [subnet_body],
            },
        }
        try:
            vnet = network.virtual_networks.begin_create_or_update(group, vnet_name, body).result()
        except Exception as exc:
            raise ProviderError(
                f"cannot create virtual network {vnet_name}: {arm_message(exc)}"
            ) from exc
        done.append(f"created virtual network {vnet_name} ({settings.subnet_mask})")
    subnet = next((s for s in vnet.subnets or () if s.name == subnet_name), None)
    if subnet is None:
        try:
            subnet = network.subnets.begin_create_or_update(
                group, vnet_name, subnet_name, subnet_body
            ).result()
        except Exception as exc:
            raise ProviderError(f"cannot create subnet {subnet_name}: {arm_message(exc)}") from exc
        done.append(f"created subnet {subnet_name} in {vnet_name}")
    return ClusterNetwork(subnet_id=subnet.id, security_group_id=nsg.id), done


def remove_network(clients: AzureClients, settings: AzureProviderConfig, cluster: str) -> list[str]:
    """Delete the virtual network and security group the cluster created (never one its tag
    does not name it in); after its nodes are gone. Returns what it removed."""
    network = clients.network
    group, removed = settings.resource_group, []
    vnet_name = names.vnet(cluster, settings.unique_id)
    nsg_name = names.security_group(cluster, settings.unique_id)
    for kind, name, operations in (
        ("virtual network", vnet_name, network.virtual_networks),
        ("network security group", nsg_name, network.network_security_groups),
    ):
        found = get_or_none(partial(operations.get, group, name))
        if found is None or (found.tags or {}).get(OWNER_TAG) != cluster:
            continue
        try:
            operations.begin_delete(group, name).result()
        except Exception as exc:
            if not_found(exc):
                continue
            raise ProviderError(f"cannot delete {kind} {name}: {arm_message(exc)}") from exc
        removed.append(f"{kind} {name}")
    return removed


def _of_cluster(resource: Any, cluster: str) -> bool:
    tags = getattr(resource, "tags", None) or {}
    return cluster in (tags.get(OWNER_TAG), tags.get(TAG_CLUSTER))


def remove_group(clients: AzureClients, settings: AzureProviderConfig, cluster: str) -> list[str]:
    """Delete the resource group when the cluster created it (its tag names the cluster)
    and it holds nothing but the cluster's own resources (a listing may still show some
    being deleted); after everything else of the cluster is removed. Never a group the
    cluster did not create, nor one holding anything else. Returns what it removed."""
    groups, group = clients.resources.resource_groups, settings.resource_group
    found = get_or_none(lambda: groups.get(group))
    if found is None or (found.tags or {}).get(OWNER_TAG) != cluster:
        return []
    try:
        held = list(clients.resources.resources.list_by_resource_group(group))
    except Exception as exc:
        if not_found(exc):
            return []
        raise ProviderError(f"cannot list resource group {group}: {arm_message(exc)}") from exc
    if any(not _of_cluster(r, cluster) for r in held):
        return []
    try:
        groups.begin_delete(group).result()
    except Exception as exc:
        if not_found(exc):
            return []
        raise ProviderError(f"cannot delete resource group {group}: {arm_message(exc)}") from exc
    return [f"resource group {group}"]
