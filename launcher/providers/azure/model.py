"""The typed `provider` section of an Azure cluster, and what a node_config says. Pure; no
Azure SDK (the spec, `plan` and the provider all read these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.model import ProviderConfig

DEFAULT_SUBNET = "10.0.0.0/16"


@dataclass(frozen=True)
class AzureProviderConfig(ProviderConfig):
    location: str
    resource_group: str
    # None: the subscription of the caller's credentials (the only one it can see, or
    # AZURE_SUBSCRIPTION_ID).
    subscription_id: str | None
    # Ray's forms: "" or "auto" (Azure picks), "none" (no zone), "1", "1,2,3".
    availability_zone: str
    cache_stopped_nodes: bool
    use_internal_ips: bool
    use_external_head_ip: bool
    # The head's identity: the user's own (msi_name, in msi_resource_group or the cluster's
    # group), else one `up` creates.
    msi_name: str | None
    msi_resource_group: str | None
    unique_id: str | None
    subnet_mask: str = DEFAULT_SUBNET
    allow_ssh_from: tuple[str, ...] = ()


def arm_parameters(node_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """node_config.azure_arm_parameters (Ray's form), or {} when absent."""
    params = node_config.get("azure_arm_parameters")
    return params if isinstance(params, Mapping) else {}


def vm_size(node_config: Mapping[str, Any]) -> str | None:
    size = arm_parameters(node_config).get("vmSize")
    return size if isinstance(size, str) and size else None


def is_spot(node_config: Mapping[str, Any]) -> bool:
    return str(arm_parameters(node_config).get("priority", "")).lower() == "spot"


def node_zones(provider: AzureProviderConfig, node_config: Mapping[str, Any]) -> tuple[str, ...]:
    """The zones a node of this type may be placed in, in order; ("",) for "no zone" (Azure
    picks the placement, or the region has no zones). The node type's own
    `availability_zone` wins over the provider's, as in Ray."""
    own = arm_parameters(node_config).get("availability_zone")
    value = str(own if own is not None else provider.availability_zone).strip()
    if value.lower() in {"", "auto", "none"}:
        return ("",)
    zones = tuple(z.strip() for z in value.split(",") if z.strip())
    return zones or ("",)


# Ray's VM template parameters the launcher fills in itself (from the cluster name, `auth`,
# `provider.msi_name` and the cluster's network), with where to say it instead.
LAUNCHER_SET_PARAMETERS: Mapping[str, str] = {
    "vmName": "VM names are derived from the cluster name; remove it",
    "vmCount": "the autoscaler decides how many; remove it",
    "adminUsername": "set auth.ssh_user instead",
    "publicKey": "set auth.ssh_public_key (or let the launcher make a key) instead",
    "msi": "set provider.msi_name (and msi_resource_group) instead",
    "nsg": "name an existing group in networkSecurityGroup instead",
}


def custom_image(node_config: Mapping[str, Any]) -> str | None:
    """azure_arm_parameters.imageId: a custom or gallery image's resource id."""
    image = arm_parameters(node_config).get("imageId")
    return image if isinstance(image, str) and image else None


def image_reference(node_config: Mapping[str, Any]) -> dict[str, str] | None:
    """The marketplace image (publisher, offer, sku, version; version `latest` when not
    given), or None when node_config names no complete one."""
    params = arm_parameters(node_config)
    found = {k: params.get(f"image{k.title()}") for k in ("publisher", "offer", "sku")}
    if not all(isinstance(v, str) and v for v in found.values()):
        return None
    version = params.get("imageVersion")
    return {**{k: str(v) for k, v in found.items()}, "version": str(version or "latest")}


def max_price(node_config: Mapping[str, Any]) -> float | None:
    """billingProfile.maxPrice: a spot VM's price cap in $/h; -1 for "up to on-demand";
    None when not set."""
    profile = arm_parameters(node_config).get("billingProfile")
    value = profile.get("maxPrice") if isinstance(profile, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def own_subnet(node_config: Mapping[str, Any]) -> str | None:
    """azure_arm_parameters.subnet: an existing subnet's resource id, used instead of the
    cluster's own."""
    value = arm_parameters(node_config).get("subnet")
    return value if isinstance(value, str) and value else None


def own_security_group(node_config: Mapping[str, Any]) -> str | None:
    """azure_arm_parameters.networkSecurityGroup: an existing NSG's resource id."""
    value = arm_parameters(node_config).get("networkSecurityGroup")
    return value if isinstance(value, str) and value else None
