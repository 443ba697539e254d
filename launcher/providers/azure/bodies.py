"""The request bodies the Azure provider sends for a node: its public IP, network interface
and virtual machine, in ARM's wire form (the SDK sends a mapping as written). Pure.

A node's VM owns its NIC, OS disk and public IP (`deleteOption: Delete` on each), so
deleting the VM deletes them with it: `down` removes each node with one call and then
checks that nothing of it is left.

Tags: the launcher's (cluster, kind, type, status, launch id) over the user's `vmTags` /
`tags`, on every resource of the node, so a listing by tag finds leftovers of any kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.azure.model import (
    LAUNCHER_SET_PARAMETERS,
    arm_parameters,
    custom_image,
    image_reference,
    is_spot,
    max_price,
    vm_size,
)

TAG_VALUE_MAX = 256  # ARM's limit on a tag's value
# azure_arm_parameters read here or by the network code; every other key is passed over.
_READ = {
    "vmSize",
    "imagePublisher",
    "imageOffer",
    "imageSku",
    "imageVersion",
    "imageId",
    "osDiskSizeGB",
    "osDiskTier",
    "priority",
    "evictionPolicy",
    "billingProfile",
    "availability_zone",
    "subnet",
    "networkSecurityGroup",
    "provisionPublicIp",
    "vmTags",
    "tags",
    "customData",
    "userData",
    "securityType",
    "enableAcceleratedNetworking",
    *LAUNCHER_SET_PARAMETERS,
}


def node_tags(node_config: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, str]:
    """The user's tags of the type, under the launcher's; each value within ARM's limit."""
    params = arm_parameters(node_config)
    merged: dict[str, str] = {}
    for key in ("vmTags", "tags"):
        own = params.get(key)
        if isinstance(own, Mapping):
            merged.update({str(k): str(v) for k, v in own.items()})
    merged.update(tags)
    for key, value in merged.items():
        if len(value) > TAG_VALUE_MAX:
            raise ProviderError(
                f"tag {key}: {len(value)} characters, Azure allows {TAG_VALUE_MAX}; "
                "use a shorter cluster or node type name"
            )
    return merged


def public_ip_body(location: str, zone: str, tags: Mapping[str, str]) -> dict[str, Any]:
    """A Standard, static public IP (its address is known once it is made)."""
    body: dict[str, Any] = {
        "location": location,
        "tags": dict(tags),
        "sku": {"name": "Standard"},
        "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"},
    }
    if zone:
        body["zones"] = [zone]
    return body


def nic_body(
    location: str,
    subnet_id: str,
    tags: Mapping[str, str],
    *,
    public_ip_id: str | None = None,
    security_group_id: str | None = None,
    accelerated: bool = False,
) -> dict[str, Any]:
    ip_config: dict[str, Any] = {
        "subnet": {"id": subnet_id},
        "privateIPAllocationMethod": "Dynamic",
        "primary": True,
    }
    if public_ip_id:
        ip_config["publicIPAddress"] = {
            "id": public_ip_id,
            "properties": {"deleteOption": "Delete"},
        }
    properties: dict[str, Any] = {
        "ipConfigurations": [{"name": "ipconfig1", "properties": ip_config}],
        "enableAcceleratedNetworking": accelerated,
    }
    if security_group_id:
        properties["networkSecurityGroup"] = {"id": security_group_id}
    return {"location": location, "tags": dict(tags), "properties": properties}


def vm_body(
    node_config: Mapping[str, Any],
    *,
    name: str,
    location: str,
    zone: str,
    tags: Mapping[str, str],
    admin_user: str,
    public_key: str,
    nic_id: str,
    identity_id: str | None = None,
) -> dict[str, Any]:
    """The VM of one node: its size and image, the launcher's key for `admin_user`, its
    NIC, spot settings, zone and (for the head) its user-assigned identity."""
    params = arm_parameters(node_config)
    size = vm_size(node_config)
    if size is None:
        raise ProviderError(f"{name}: node_config.azure_arm_parameters.vmSize is missing")
    image = custom_image(node_config)
    reference = {"id": image} if image else image_reference(node_config)
    if reference is None:
        raise ProviderError(
            f"{name}: node_config.azure_arm_parameters names no image "
            "(imagePublisher, imageOffer, imageSku, or imageId)"
        )
    os_disk: dict[str, Any] = {
        "name": f"{name}-osdisk",
        "createOption": "FromImage",
        "deleteOption": "Delete",
        "managedDisk": {"storageAccountType": "Premium_LRS"},
    }
    if isinstance(params.get("osDiskSizeGB"), int):
        os_disk["diskSizeGB"] = params["osDiskSizeGB"]
    if isinstance(params.get("osDiskTier"), str):
        os_disk["managedDisk"]["storageAccountType"] = params["osDiskTier"]
    linux = {
        "disablePasswordAuthentication": True,
        "ssh": {
            "publicKeys": [
                {"path": f"/home/{admin_user}/.ssh/authorized_keys", "keyData": public_key}
            ]
        },
    }
    os_profile: dict[str, Any] = {
        "computerName": name,
        "adminUsername": admin_user,
        "linuxConfiguration": linux,
    }
    if isinstance(params.get("customData"), str):
        os_profile["customData"] = params["customData"]
    properties: dict[str, Any] = {
        "hardwareProfile": {"vmSize": size},
        "storageProfile": {"imageReference": reference, "osDisk": os_disk},
        "osProfile": os_profile,
        "networkProfile": {
            "networkInterfaces": [
                {"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
            ]
        },
    }
    if isinstance(params.get("userData"), str):
        properties["userData"] = params["userData"]
    if isinstance(params.get("securityType"), str):
        properties["securityProfile"] = {"securityType": params["securityType"]}
    if is_spot(node_config):
        properties["priority"] = "Spot"
        # Azure's own default: an evicted VM stays, deallocated, so the listing shows it as
        # preempted until the autoscaler has answered (and deleted) it.
        properties["evictionPolicy"] = str(params.get("evictionPolicy") or "Deallocate")
        cap = max_price(node_config)
        properties["billingProfile"] = {"maxPrice": -1 if cap is None else cap}
    elif str(params.get("priority", "")).lower() == "low":
        properties["priority"] = "Low"
    body: dict[str, Any] = {
        "location": location,
        "tags": dict(tags),
        "properties": properties,
    }
    if zone:
        body["zones"] = [zone]
    if identity_id:
        body["identity"] = {"type": "UserAssigned", "userAssignedIdentities": {identity_id: {}}}
    return body


def passed_over(node_config: Mapping[str, Any]) -> list[str]:
    """azure_arm_parameters keys the bodies do not use (the spec warns of them at validate)."""
    return sorted(k for k in arm_parameters(node_config) if k not in _READ)
