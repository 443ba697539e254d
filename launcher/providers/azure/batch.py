"""One ARM template deployment per launch batch: the public IPs, NICs and VMs of the nodes
of one launch in one zone, made by Azure Resource Manager's deployment engine server-side
(one PUT and its long-running operation's polls, as Ray's provider does, instead of a NIC
and then a VM per node). Pure: builds the template and reads the answers, makes no calls.

The template names every resource literally (no parameters, no copy loops); every string
of the bodies is escaped, so nothing the user wrote (tags, customData) is read as a
template expression. The deployment's one output, `addresses`, maps each VM name to its
private and public IP (ARM's `reference()` of its NIC and public IP), so the nodes made are
known with their addresses from the deployment's last poll, with no read of each.

A deployment is named after the launch's request id and zone, so a repeated launch sends
the same deployment again (ARM's incremental mode leaves what exists as it is).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.providers.azure import names

NETWORK_API = "2024-05-01"
COMPUTE_API = "2024-07-01"
PUBLIC_IP_TYPE = "Microsoft.Network/publicIPAddresses"
NIC_TYPE = "Microsoft.Network/networkInterfaces"
VM_TYPE = "Microsoft.Compute/virtualMachines"
# ARM allows 800 resources per template; a node is up to three.
MAX_NODES_PER_DEPLOYMENT = 250
ADDRESSES = "addresses"


@dataclass(frozen=True)
class NodeBodies:
    """One node's resources in ARM's wire form (bodies.py); `public_ip` None: it has none."""

    vm_name: str
    vm: Mapping[str, Any]
    nic: Mapping[str, Any]
    public_ip: Mapping[str, Any] | None


def resource_id(subscription: str, group: str, kind: str, name: str) -> str:
    return f"/subscriptions/{subscription}/resourceGroups/{group}/providers/{kind}/{name}"


def deployment_name(cluster: str, request_id: str, zone: str, part: int = 0) -> str:
    """`launcher-HASH-DIGEST`: at most 64 characters, the same for the same launch, zone and
    part (ARM compares deployment names without case)."""
    seed = f"{cluster}|{request_id}|{zone}|{part}"
    return f"{names.vm_prefix(cluster)[:40]}-d-{hashlib.sha256(seed.encode()).hexdigest()[:16]}"


def escape(value: Any) -> Any:
    """`value` with every string that ARM would read as an expression (`[...]`) made a
    literal (`[[...]`), object keys included."""
    if isinstance(value, str):
        return f"[{value}" if value.startswith("[") else value
    if isinstance(value, Mapping):
        return {escape(str(k)): escape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape(v) for v in value]
    return value


def template(subscription: str, group: str, nodes: Sequence[NodeBodies]) -> dict[str, Any]:
    """The deployment template making `nodes` (their bodies must point each VM at its NIC
    and each NIC at its public IP by the ids `resource_id` gives)."""
    resources: list[dict[str, Any]] = []
    addresses: dict[str, dict[str, str]] = {}
    for node in nodes:
        nic_name = names.nic_name(node.vm_name)
        nic_id = resource_id(subscription, group, NIC_TYPE, nic_name)
        nic_needs: list[str] = []
        public = ""
        if node.public_ip is not None:
            ip_name = names.public_ip_name(node.vm_name)
            ip_id = resource_id(subscription, group, PUBLIC_IP_TYPE, ip_name)
            resources.append(_resource(PUBLIC_IP_TYPE, NETWORK_API, ip_name, node.public_ip, []))
            nic_needs.append(ip_id)
            public = f"[reference('{ip_id}', '{NETWORK_API}').ipAddress]"
        resources.append(_resource(NIC_TYPE, NETWORK_API, nic_name, node.nic, nic_needs))
        resources.append(_resource(VM_TYPE, COMPUTE_API, node.vm_name, node.vm, [nic_id]))
        addresses[node.vm_name] = {
            "private": (
                f"[reference('{nic_id}', '{NETWORK_API}')"
                ".ipConfigurations[0].properties.privateIPAddress]"
            ),
            "public": public,
        }
    return {
        "$schema": (
            "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"
        ),
        "contentVersion": "1.0.0.0",
        "resources": resources,
        "outputs": {ADDRESSES: {"type": "object", "value": addresses}},
    }


def _resource(
    kind: str, api: str, name: str, body: Mapping[str, Any], needs: list[str]
) -> dict[str, Any]:
    declared: dict[str, Any] = {"type": kind, "apiVersion": api, "name": name}
    if needs:
        declared["dependsOn"] = needs
    declared.update(escape(dict(body)))
    return declared


def addresses_of(deployment: Any) -> dict[str, tuple[str | None, str | None]]:
    """VM name -> (private IP, public IP) from a succeeded deployment (the SDK's model or
    its wire form)."""
    props = getattr(deployment, "properties", None)
    outputs = getattr(props, "outputs", None) if props is not None else None
    if outputs is None and isinstance(deployment, Mapping):
        outputs = (deployment.get("properties") or {}).get("outputs")
    value = ((outputs or {}).get(ADDRESSES) or {}).get("value") or {}
    found: dict[str, tuple[str | None, str | None]] = {}
    for vm, pair in value.items():
        if isinstance(pair, Mapping):
            found[str(vm)] = (pair.get("private") or None, pair.get("public") or None)
    return found


@dataclass(frozen=True)
class Refusal:
    """A resource of the deployment ARM refused, from its error's details."""

    code: str
    message: str
    target: str  # the resource's id ("" when ARM did not name it)

    @property
    def resource_name(self) -> str:
        return self.target.rstrip("/").rsplit("/", 1)[-1] if self.target else ""


def refusals(exc: BaseException) -> list[Refusal]:
    """The innermost errors of a failed deployment (`DeploymentFailed`'s details, nested
    ones flattened, each with the resource its nearest enclosing error names); the error
    itself when it has none."""
    error = getattr(exc, "error", None)
    if error is None:
        return []
    found: list[Refusal] = []

    def walk(err: Any, target: str) -> None:
        # ARM names the resource on an outer error (ResourceDeploymentFailure) and gives the
        # resource provider's own error (ZonalAllocationFailed ...) inside it.
        target = str(getattr(err, "target", "") or "") or target
        details = getattr(err, "details", None) or []
        if not details:
            code = str(getattr(err, "code", "") or "")
            message = " ".join(str(getattr(err, "message", "") or "").split())
            found.append(Refusal(code, message, target))
        for inner in details:
            walk(inner, target)

    walk(error, "")
    return found
