"""Microsoft.Network for fakes/azure/server.py: virtual networks with their subnets,
network security groups, public IP addresses and network interfaces.

References are answered live: a subnet's ipConfigurations, an NSG's networkInterfaces and
subnets, a public IP's ipConfiguration and a NIC's virtualMachine are computed from what
uses them. Private IPs come from the subnet's prefix, lowest free first, skipping the
first four and the last address (Azure reserves them); public IPs from the server's
`public_pool` (127.20.0.0/16), at once for Static and Dynamic alike.
"""

from __future__ import annotations

import copy
import ipaddress
import uuid
from typing import TYPE_CHECKING, Any

from fakes.azure.common import (
    begin_delete,
    begin_put,
    etag,
    invalid_reference,
    location_of,
    new_resource,
    ref,
    tags_of,
)
from fakes.azure.faults import ArmError, not_found
from fakes.azure.routes import Ctx, Reply, Target, handles
from fakes.azure.store import Resource, id_key, parse_id

if TYPE_CHECKING:
    from fakes.azure.server import AzureServer

VNET = "Microsoft.Network/virtualNetworks"
SUBNET = "Microsoft.Network/virtualNetworks/subnets"
NSG = "Microsoft.Network/networkSecurityGroups"
RULE = "Microsoft.Network/networkSecurityGroups/securityRules"
PIP = "Microsoft.Network/publicIPAddresses"
NIC = "Microsoft.Network/networkInterfaces"
IPCONFIG = "Microsoft.Network/networkInterfaces/ipConfigurations"

_DEFAULT_RULES = (
    ("AllowVnetInBound", 65000, "Inbound", "Allow", "VirtualNetwork", "VirtualNetwork"),
    ("AllowAzureLoadBalancerInBound", 65001, "Inbound", "Allow", "AzureLoadBalancer", "*"),
    ("DenyAllInBound", 65500, "Inbound", "Deny", "*", "*"),
    ("AllowVnetOutBound", 65000, "Outbound", "Allow", "VirtualNetwork", "VirtualNetwork"),
    ("AllowInternetOutBound", 65001, "Outbound", "Allow", "*", "Internet"),
    ("DenyAllOutBound", 65500, "Outbound", "Deny", "*", "*"),
)


class Network:
    def __init__(self, server: AzureServer) -> None:
        self.server = server

    @property
    def store(self) -> Any:
        return self.server.store

    # -- lookups --

    def child(self, parent: Resource, target: Target) -> dict[str, Any] | None:
        key = {
            "subnets": "subnets",
            "securityRules": "securityRules",
            "ipConfigurations": "ipConfigurations",
        }.get(target.short)
        if key is None or target.child is None:
            return None
        return next(
            (c for c in parent.props.get(key, []) if c["name"].lower() == target.child.lower()),
            None,
        )

    def subnet(self, subnet_id: str) -> tuple[Resource, dict[str, Any]] | None:
        vnet_id, sep, name = subnet_id.rstrip("/").rpartition("/subnets/")
        vnet = self.store.find(vnet_id) if sep else None
        if vnet is None or vnet.kind != VNET:
            return None
        found = next(
            (s for s in vnet.props.get("subnets", []) if s["name"].lower() == name.lower()), None
        )
        return None if found is None else (vnet, found)

    def nics(self) -> list[Resource]:
        return list(self.store.of_kind(NIC))

    def ip_configs_in(self, subnet_id: str) -> list[str]:
        out = []
        for nic in self.nics():
            for config in nic.props.get("ipConfigurations", []):
                if id_key(ref(config["properties"].get("subnet")) or "") == id_key(subnet_id):
                    out.append(config["id"])
        return out

    def nic_private_ip(self, nic: Resource) -> str | None:
        configs = nic.props.get("ipConfigurations", [])
        primary = next(
            (c for c in configs if c["properties"].get("primary")), configs[0] if configs else None
        )
        return None if primary is None else primary["properties"].get("privateIPAddress")

    def nic_public_ips(self, nic: Resource) -> list[str]:
        out = []
        for config in nic.props.get("ipConfigurations", []):
            pip_id = ref(config["properties"].get("publicIPAddress"))
            pip = self.store.find(pip_id) if pip_id else None
            if pip is not None and pip.props.get("ipAddress"):
                out.append(pip.props["ipAddress"])
        return out

    def pip_user(self, pip: Resource) -> str | None:
        """The ipConfiguration id using public IP `pip`."""
        for nic in self.nics():
            for config in nic.props.get("ipConfigurations", []):
                if id_key(ref(config["properties"].get("publicIPAddress")) or "") == pip.key:
                    return str(config["id"])
        return None

    # -- answers --

    def answer(self, res: Resource, expand: str = "") -> dict[str, Any]:
        out = res.answer()
        props = out.setdefault("properties", {})
        if res.kind == VNET:
            for subnet in props.get("subnets", []):
                self._fill_subnet(subnet)
        elif res.kind == NSG:
            users = [
                n.id
                for n in self.nics()
                if id_key(ref(n.props.get("networkSecurityGroup")) or "") == res.key
            ]
            if users:
                props["networkInterfaces"] = [{"id": i} for i in users]
            subnets = self._nsg_subnets(res)
            if subnets:
                props["subnets"] = [{"id": i} for i in subnets]
        elif res.kind == PIP:
            user = self.pip_user(res)
            if user:
                props["ipConfiguration"] = {"id": user}
        elif res.kind == NIC:
            vm_id = res.extra.get("vm")
            if vm_id:
                props["virtualMachine"] = {"id": vm_id}
            if "publicipaddress" in expand.lower() or expand == "*":
                for config in props.get("ipConfigurations", []):
                    pip_id = ref(config["properties"].get("publicIPAddress"))
                    pip = self.store.find(pip_id) if pip_id else None
                    if pip is not None:
                        config["properties"]["publicIPAddress"] = self.answer(pip)
        return out

    def _fill_subnet(self, subnet: dict[str, Any]) -> None:
        users = self.ip_configs_in(subnet["id"])
        if users:
            subnet["properties"]["ipConfigurations"] = [{"id": i} for i in users]
        else:
            subnet["properties"].pop("ipConfigurations", None)

    def _nsg_subnets(self, nsg: Resource) -> list[str]:
        out = []
        for vnet in self.store.of_kind(VNET):
            for subnet in vnet.props.get("subnets", []):
                if id_key(ref(subnet["properties"].get("networkSecurityGroup")) or "") == nsg.key:
                    out.append(subnet["id"])
        return out

    # -- removal (also by resource group deletion and VM deleteOption) --

    def drop_nic(self, nic: Resource) -> None:
        self.store.remove(nic)

    def drop_public_ip(self, pip: Resource) -> None:
        self.store.remove(pip)

    # -- addresses --

    def allocate_private(
        self, subnet: dict[str, Any], wanted: str | None, exclude: set[str]
    ) -> str:
        prefix = (
            subnet["properties"].get("addressPrefix")
            or (subnet["properties"].get("addressPrefixes") or [None])[0]
        )
        net = ipaddress.ip_network(prefix, strict=False)
        used = set(exclude)
        for nic in self.nics():
            for config in nic.props.get("ipConfigurations", []):
                if id_key(ref(config["properties"].get("subnet")) or "") == id_key(subnet["id"]):
                    used.add(config["properties"].get("privateIPAddress"))
        first, last = int(net.network_address) + 4, int(net.broadcast_address) - 1
        if wanted is not None:
            address = ipaddress.ip_address(wanted)
            if not first <= int(address) <= last:
                raise ArmError(
                    400,
                    "PrivateIPAddressNotInSubnet",
                    f"IP address {wanted} does not belong to the subnet {subnet['id']} (or is reserved).",
                )
            if wanted in used:
                raise ArmError(
                    400,
                    "PrivateIPAddressInUse",
                    f"IP configuration is using the private IP address {wanted} which is already allocated to another resource.",
                )
            return wanted
        for value in range(first, last + 1):
            text = str(ipaddress.ip_address(value))
            if text not in used:
                return text
        raise ArmError(
            400,
            "SubnetIsFull",
            f"Subnet {subnet['name']} with address prefix {prefix} does not have enough capacity for 1 IP addresses.",
        )

    def allocate_public(self) -> str:
        net = ipaddress.ip_network(self.server.public_pool)
        used = {p.props.get("ipAddress") for p in self.store.of_kind(PIP)}
        for value in range(int(net.network_address) + 2, int(net.broadcast_address)):
            text = str(ipaddress.ip_address(value))
            if text not in used:
                return text
        raise ArmError(409, "PublicIPCountLimitReached", "The fake's public IP pool is exhausted.")


def _net(ctx: Ctx) -> Network:
    return ctx.server.network


def _get(ctx: Ctx, kind: str) -> Resource:
    t = ctx.target
    assert t.sub and t.rg and t.name
    return ctx.server.store.get(t.sub, t.rg, kind, t.name)


def _list(ctx: Ctx, kind: str) -> Reply:
    t = ctx.target
    store = ctx.server.store
    if t.rg is not None:
        store.group(t.sub, t.rg)
    items = store.of_kind(kind, t.sub, t.rg)
    return Reply(200, {"value": [_net(ctx).answer(r) for r in items]})


def _delete(ctx: Ctx, kind: str, refuse: Any) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    store = ctx.server.store
    store.group(t.sub, t.rg)
    res = store.maybe(t.sub, t.rg, kind, t.name)
    if res is None:
        return Reply(204)
    refuse(ctx, res)
    return begin_delete(ctx, res, lambda: store.remove(res))


# -- virtual networks -----------------------------------------------------------------------


def _subnet_body(vnet_id: str, given: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    name = given.get("name")
    if not name:
        raise ArmError(400, "InvalidRequestFormat", "A subnet must have a name.")
    props = dict(given.get("properties") or {})
    prefix = props.get("addressPrefix") or (props.get("addressPrefixes") or [None])[0]
    if not prefix:
        raise ArmError(
            400, "NetcfgInvalidSubnet", f"Subnet '{name}' is not valid: it has no address prefix."
        )
    try:
        ipaddress.ip_network(prefix, strict=True)
    except ValueError as error:
        raise ArmError(
            400,
            "InvalidCIDRNotation",
            f"The address prefix {prefix} in resource {vnet_id}/subnets/{name} has an invalid CIDR notation. For the given prefix length, the address prefix should be {ipaddress.ip_network(prefix, strict=False)}.",
        ) from error
    out_props: dict[str, Any] = {
        "provisioningState": "Succeeded",
        "addressPrefix": prefix,
        "delegations": [],
        "privateEndpointNetworkPolicies": props.get("privateEndpointNetworkPolicies", "Disabled"),
        "privateLinkServiceNetworkPolicies": props.get(
            "privateLinkServiceNetworkPolicies", "Enabled"
        ),
    }
    if props.get("addressPrefixes"):
        out_props["addressPrefixes"] = list(props["addressPrefixes"])
    nsg = ref(props.get("networkSecurityGroup"))
    if nsg:
        out_props["networkSecurityGroup"] = {"id": nsg}
    return {
        "id": f"{vnet_id}/subnets/{name}",
        "name": name,
        "type": SUBNET,
        "etag": (old or {}).get("etag") or etag(),
        "properties": out_props,
    }


def _check_subnets(
    ctx: Ctx, vnet_id: str, spaces: list[str], subnets: list[dict[str, Any]]
) -> None:
    networks = [ipaddress.ip_network(p, strict=False) for p in spaces]
    seen: list[tuple[str, Any]] = []
    for subnet in subnets:
        net = ipaddress.ip_network(subnet["properties"]["addressPrefix"], strict=False)
        if not any(net.version == n.version and net.subnet_of(n) for n in networks):  # type: ignore[arg-type]
            raise ArmError(
                400,
                "NetcfgSubnetRangeOutsideVnet",
                f"Subnet '{subnet['name']}' is not valid because its IP address range is outside the IP address range of virtual network '{vnet_id.rpartition('/')[2]}'.",
            )
        for other_name, other in seen:
            if net.overlaps(other):
                raise ArmError(
                    400,
                    "NetcfgSubnetRangesOverlap",
                    f"Subnet '{subnet['name']}' is not valid because its IP address range overlaps with that of an existing subnet '{other_name}' in virtual network.",
                )
        seen.append((subnet["name"], net))
        nsg = ref(subnet["properties"].get("networkSecurityGroup"))
        if nsg and ctx.server.store.find(nsg) is None:
            raise invalid_reference(nsg, subnet["id"])


def _refuse_in_use_subnet(net: Network, subnet: dict[str, Any]) -> None:
    users = net.ip_configs_in(subnet["id"])
    if users:
        raise ArmError(
            400,
            "InUseSubnetCannotBeDeleted",
            f"Subnet {subnet['name']} is in use by {users[0]} and cannot be deleted. In order to delete the subnet, delete all the resources within the subnet. See aka.ms/deletesubnet.",
        )


@handles(VNET, "put")
def put_vnet(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    server.store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    location = location_of(ctx, body)
    props = body.get("properties") or {}
    spaces = list((props.get("addressSpace") or {}).get("addressPrefixes") or [])
    if not spaces:
        raise ArmError(
            400,
            "InvalidAddressSpace",
            "The virtual network must have at least one address prefix in its address space.",
        )
    for prefix in spaces:
        try:
            ipaddress.ip_network(prefix, strict=True)
        except ValueError as error:
            raise ArmError(
                400,
                "InvalidCIDRNotation",
                f"The address prefix {prefix} has an invalid CIDR notation.",
            ) from error
    existing = server.store.maybe(t.sub, t.rg, VNET, t.name)
    res = existing or new_resource(ctx, {})
    old = {s["name"].lower(): s for s in (existing.props.get("subnets", []) if existing else [])}
    subnets = [
        _subnet_body(res.id, s, old.get(str(s.get("name", "")).lower()))
        for s in props.get("subnets") or []
    ]
    _check_subnets(ctx, res.id, spaces, subnets)
    kept = {s["name"].lower() for s in subnets}
    for name, subnet in old.items():
        if name not in kept:
            _refuse_in_use_subnet(server.network, subnet)
    res.body.update({"location": location, "tags": tags_of(body), "etag": etag()})
    res.body["properties"] = {
        "provisioningState": res.state,
        "resourceGuid": res.props.get("resourceGuid") if existing else str(uuid.uuid4()),
        "addressSpace": {"addressPrefixes": spaces},
        "subnets": subnets,
        "virtualNetworkPeerings": [],
        "enableDdosProtection": bool(props.get("enableDdosProtection", False)),
    }
    server.store.add(res)
    reply = begin_put(ctx, res, existing is None)
    reply.body = server.network.answer(res)
    return reply


@handles(VNET, "get")
def get_vnet(ctx: Ctx) -> Reply:
    return Reply(200, _net(ctx).answer(_get(ctx, VNET)))


@handles(VNET, "list:get")
def list_vnets(ctx: Ctx) -> Reply:
    return _list(ctx, VNET)


@handles(VNET, "delete")
def delete_vnet(ctx: Ctx) -> Reply:
    def refuse(ctx: Ctx, res: Resource) -> None:
        for subnet in res.props.get("subnets", []):
            _refuse_in_use_subnet(_net(ctx), subnet)

    return _delete(ctx, VNET, refuse)


def _vnet_and_subnet(ctx: Ctx) -> tuple[Resource, dict[str, Any] | None]:
    vnet = _get(ctx, VNET)
    return vnet, _net(ctx).child(vnet, ctx.target)


@handles(SUBNET, "get")
def get_subnet(ctx: Ctx) -> Reply:
    vnet, subnet = _vnet_and_subnet(ctx)
    if subnet is None:
        raise not_found(f"{VNET}/subnets", f"{vnet.name}/{ctx.target.child}", ctx.target.rg)
    out = copy.deepcopy(subnet)
    _net(ctx)._fill_subnet(out)
    return Reply(200, out)


@handles(SUBNET, "list:get")
def list_subnets(ctx: Ctx) -> Reply:
    vnet = _get(ctx, VNET)
    return Reply(200, {"value": _net(ctx).answer(vnet)["properties"].get("subnets", [])})


@handles(SUBNET, "put")
def put_subnet(ctx: Ctx) -> Reply:
    vnet, old = _vnet_and_subnet(ctx)
    given = dict(ctx.body or {})
    given["name"] = ctx.target.child
    subnet = _subnet_body(vnet.id, given, old)
    others = [s for s in vnet.props.get("subnets", []) if s is not old]
    spaces = vnet.props["addressSpace"]["addressPrefixes"]
    _check_subnets(ctx, vnet.id, spaces, [*others, subnet])
    if (
        old is not None
        and old["properties"]["addressPrefix"] != subnet["properties"]["addressPrefix"]
    ):
        _refuse_in_use_subnet(_net(ctx), old)
    vnet.props["subnets"] = [*others, subnet]
    subnet["properties"]["provisioningState"] = "Updating"
    server = ctx.server
    op = server.begin(ctx, subnet["id"], vnet.body.get("location"))

    def work(op_: Any) -> None:
        subnet["properties"]["provisioningState"] = "Succeeded"
        server.ops.succeed(op_)

    server.run_op(ctx, op, work, lambda _: subnet["properties"].update(provisioningState="Failed"))
    return Reply(
        201 if old is None else 200, copy.deepcopy(subnet), server.lro_headers(ctx, op, False)
    )


@handles(SUBNET, "delete")
def delete_subnet(ctx: Ctx) -> Reply:
    vnet, subnet = _vnet_and_subnet(ctx)
    if subnet is None:
        return Reply(204)
    _refuse_in_use_subnet(_net(ctx), subnet)
    server = ctx.server
    op = server.begin(ctx, subnet["id"], vnet.body.get("location"))

    def work(op_: Any) -> None:
        vnet.props["subnets"] = [s for s in vnet.props.get("subnets", []) if s is not subnet]
        server.ops.succeed(op_)

    server.run_op(ctx, op, work)
    return Reply(202, None, server.lro_headers(ctx, op, True))


# -- network security groups ----------------------------------------------------------------


def _rule(nsg_id: str, given: dict[str, Any]) -> dict[str, Any]:
    name = given.get("name")
    props = dict(given.get("properties") or {})
    for key in ("protocol", "access", "direction", "priority"):
        if key not in props:
            raise ArmError(
                400, "SecurityRuleParameterMissing", f"Security rule {name} is missing '{key}'."
            )
    priority = int(props["priority"])
    if not 100 <= priority <= 4096:
        raise ArmError(
            400,
            "SecurityRuleInvalidPriority",
            f"Security rule {name} has invalid priority {priority}. Value provided: {priority} Allowed range 100-4096.",
        )
    props.setdefault("sourcePortRange", "*")
    props["provisioningState"] = "Succeeded"
    return {
        "id": f"{nsg_id}/securityRules/{name}",
        "name": name,
        "type": RULE,
        "etag": etag(),
        "properties": props,
    }


def _default_rules(nsg_id: str) -> list[dict[str, Any]]:
    out = []
    for name, priority, direction, access, source, dest in _DEFAULT_RULES:
        out.append(
            {
                "id": f"{nsg_id}/defaultSecurityRules/{name}",
                "name": name,
                "type": "Microsoft.Network/networkSecurityGroups/defaultSecurityRules",
                "properties": {
                    "provisioningState": "Succeeded",
                    "protocol": "*",
                    "sourcePortRange": "*",
                    "destinationPortRange": "*",
                    "sourceAddressPrefix": source,
                    "destinationAddressPrefix": dest,
                    "access": access,
                    "priority": priority,
                    "direction": direction,
                },
            }
        )
    return out


@handles(NSG, "put")
def put_nsg(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    server.store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    location = location_of(ctx, body)
    existing = server.store.maybe(t.sub, t.rg, NSG, t.name)
    res = existing or new_resource(ctx, {})
    rules = [_rule(res.id, r) for r in (body.get("properties") or {}).get("securityRules") or []]
    names = [r["name"].lower() for r in rules]
    if len(set(names)) != len(names):
        raise ArmError(400, "SecurityRuleNameDuplicate", "Security rule names must be unique.")
    res.body.update({"location": location, "tags": tags_of(body), "etag": etag()})
    res.body["properties"] = {
        "provisioningState": res.state,
        "resourceGuid": res.props.get("resourceGuid") if existing else str(uuid.uuid4()),
        "securityRules": rules,
        "defaultSecurityRules": _default_rules(res.id),
    }
    server.store.add(res)
    reply = begin_put(ctx, res, existing is None)
    reply.body = server.network.answer(res)
    return reply


@handles(NSG, "get")
def get_nsg(ctx: Ctx) -> Reply:
    return Reply(200, _net(ctx).answer(_get(ctx, NSG)))


@handles(NSG, "list:get")
def list_nsgs(ctx: Ctx) -> Reply:
    return _list(ctx, NSG)


@handles(NSG, "delete")
def delete_nsg(ctx: Ctx) -> Reply:
    def refuse(ctx: Ctx, res: Resource) -> None:
        props = _net(ctx).answer(res)["properties"]
        users = [u["id"] for u in props.get("networkInterfaces", []) + props.get("subnets", [])]
        if users:
            raise ArmError(
                400,
                "InUseNetworkSecurityGroupCannotBeDeleted",
                f"Network security group {res.id} cannot be deleted because it is in use by the following resources: {', '.join(users)}. In order to delete the Network security group, remove the association with the resource(s). To learn how to do this, see aka.ms/deletensg.",
            )

    return _delete(ctx, NSG, refuse)


# -- public IP addresses ----------------------------------------------------------------------


@handles(PIP, "put")
def put_public_ip(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    server.store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    location = location_of(ctx, body)
    props = body.get("properties") or {}
    sku = dict(body.get("sku") or {"name": "Standard"})
    sku.setdefault("tier", "Regional")
    method = props.get("publicIPAllocationMethod") or (
        "Static" if sku["name"] == "Standard" else "Dynamic"
    )
    if sku["name"] == "Standard" and method != "Static":
        raise ArmError(
            400,
            "StandardSkuPublicIPAddressesCannotUseDynamicAllocation",
            "Standard sku publicIp must have AllocationMethod set to Static.",
        )
    existing = server.store.maybe(t.sub, t.rg, PIP, t.name)
    res = existing or new_resource(ctx, {})
    address = res.props.get("ipAddress") if existing else server.network.allocate_public()
    res.body.update({"location": location, "tags": tags_of(body), "sku": sku, "etag": etag()})
    if body.get("zones"):
        res.body["zones"] = list(body["zones"])
    new_props: dict[str, Any] = {
        "provisioningState": res.state,
        "resourceGuid": res.props.get("resourceGuid") if existing else str(uuid.uuid4()),
        "publicIPAddressVersion": props.get("publicIPAddressVersion", "IPv4"),
        "publicIPAllocationMethod": method,
        "idleTimeoutInMinutes": props.get("idleTimeoutInMinutes", 4),
        "ipTags": props.get("ipTags", []),
        "ipAddress": address,
    }
    if props.get("deleteOption"):
        new_props["deleteOption"] = props["deleteOption"]
    if props.get("dnsSettings"):
        new_props["dnsSettings"] = props["dnsSettings"]
    res.body["properties"] = new_props
    server.store.add(res)
    reply = begin_put(ctx, res, existing is None)
    reply.body = server.network.answer(res)
    return reply


@handles(PIP, "get")
def get_public_ip(ctx: Ctx) -> Reply:
    return Reply(200, _net(ctx).answer(_get(ctx, PIP)))


@handles(PIP, "list:get")
def list_public_ips(ctx: Ctx) -> Reply:
    return _list(ctx, PIP)


@handles(PIP, "delete")
def delete_public_ip(ctx: Ctx) -> Reply:
    def refuse(ctx: Ctx, res: Resource) -> None:
        user = _net(ctx).pip_user(res)
        if user:
            raise ArmError(
                400,
                "PublicIPAddressCannotBeDeleted",
                f"Public IP address {res.id} can not be deleted since it is still allocated to resource {user}. In order to delete the public IP, disassociate/detach the Public IP address from the resource.  To learn how to do this, see aka.ms/deletepublicip.",
            )

    return _delete(ctx, PIP, refuse)


# -- network interfaces ---------------------------------------------------------------------


@handles(NIC, "put")
def put_nic(ctx: Ctx) -> Reply:  # noqa: PLR0915 (builds the whole NIC document)
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    net = server.network
    server.store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    location = location_of(ctx, body)
    props = body.get("properties") or {}
    existing = server.store.maybe(t.sub, t.rg, NIC, t.name)
    res = existing or new_resource(ctx, {})
    given = props.get("ipConfigurations") or []
    if not given:
        raise ArmError(
            400,
            "NetworkInterfaceMustHaveAtLeastOneIpConfiguration",
            f"Network interface {res.id} must have one or more IP configurations.",
        )
    old = {
        c["name"].lower(): c
        for c in (existing.props.get("ipConfigurations", []) if existing else [])
    }
    configs: list[dict[str, Any]] = []
    taken: set[str] = set()
    for index, config in enumerate(given):
        name = config.get("name") or f"ipconfig{index + 1}"
        cprops = dict(config.get("properties") or {})
        config_id = f"{res.id}/ipConfigurations/{name}"
        subnet_id = ref(cprops.get("subnet"))
        if not subnet_id:
            raise ArmError(
                400,
                "IpConfigurationSubnetMissing",
                f"IP configuration {config_id} must reference a subnet.",
            )
        found = net.subnet(subnet_id)
        if found is None:
            raise invalid_reference(subnet_id, res.id)
        vnet, subnet = found
        if str(vnet.body.get("location")).lower() != location:
            raise ArmError(
                400,
                "InvalidResourceReference",
                f"Resource {subnet_id} referenced by resource {res.id} was not found. Please make sure that the referenced resource exists, and that both resources are in the same region.",
            )
        method = cprops.get("privateIPAllocationMethod") or "Dynamic"
        previous = old.get(name.lower())
        keep = None
        if previous is not None and id_key(
            ref(previous["properties"].get("subnet")) or ""
        ) == id_key(subnet_id):
            keep = previous["properties"].get("privateIPAddress")
        if method == "Static" and cprops.get("privateIPAddress"):
            wanted = cprops["privateIPAddress"]
            address = wanted if wanted == keep else net.allocate_private(subnet, wanted, taken)
        else:
            address = keep or net.allocate_private(subnet, None, taken)
        taken.add(address)
        out: dict[str, Any] = {
            "provisioningState": "Succeeded",
            "privateIPAddress": address,
            "privateIPAllocationMethod": method,
            "privateIPAddressVersion": cprops.get("privateIPAddressVersion", "IPv4"),
            "subnet": {"id": subnet["id"]},
            "primary": bool(cprops.get("primary", index == 0)),
        }
        pip_ref = cprops.get("publicIPAddress")
        pip_id = ref(pip_ref)
        if pip_id:
            pip = server.store.find(pip_id)
            if pip is None or pip.kind != PIP:
                raise invalid_reference(pip_id, res.id)
            user = net.pip_user(pip)
            if user and not user.lower().startswith(res.id.lower() + "/"):
                raise ArmError(
                    400,
                    "PublicIPAddressInUse",
                    f"Resource {pip.id} is referenced by resource {user}, so it cannot be used by {config_id}.",
                )
            option = ((pip_ref.get("properties") or {}) if isinstance(pip_ref, dict) else {}).get(
                "deleteOption"
            )
            if option:
                pip.props["deleteOption"] = option
            out["publicIPAddress"] = {"id": pip.id}
        configs.append(
            {
                "id": config_id,
                "name": name,
                "type": IPCONFIG,
                "etag": etag(),
                "properties": out,
            }
        )
    nsg_id = ref(props.get("networkSecurityGroup"))
    nsg = server.store.find(nsg_id) if nsg_id else None
    if nsg_id and (nsg is None or nsg.kind != NSG):
        raise invalid_reference(nsg_id, res.id)
    res.body.update({"location": location, "tags": tags_of(body), "etag": etag()})
    new_props: dict[str, Any] = {
        "provisioningState": res.state,
        "resourceGuid": res.props.get("resourceGuid") if existing else str(uuid.uuid4()),
        "ipConfigurations": configs,
        "dnsSettings": {"dnsServers": [], "appliedDnsServers": []},
        "enableAcceleratedNetworking": bool(props.get("enableAcceleratedNetworking", False)),
        "enableIPForwarding": bool(props.get("enableIPForwarding", False)),
        "hostedWorkloads": [],
        "tapConfigurations": [],
        "nicType": "Standard",
        "auxiliaryMode": "None",
        "vnetEncryptionSupported": False,
    }
    if nsg is not None:
        new_props["networkSecurityGroup"] = {"id": nsg.id}
    if existing is not None:
        for key in ("macAddress", "primary"):
            if key in existing.props:
                new_props[key] = existing.props[key]
    res.body["properties"] = new_props
    server.store.add(res)
    reply = begin_put(ctx, res, existing is None)
    reply.body = net.answer(res)
    return reply


@handles(NIC, "get")
def get_nic(ctx: Ctx) -> Reply:
    return Reply(200, _net(ctx).answer(_get(ctx, NIC), ctx.query.get("$expand") or ""))


@handles(NIC, "list:get")
def list_nics(ctx: Ctx) -> Reply:
    return _list(ctx, NIC)


@handles(NIC, "delete")
def delete_nic(ctx: Ctx) -> Reply:
    def refuse(ctx: Ctx, res: Resource) -> None:
        vm_id = res.extra.get("vm")
        if vm_id:
            raise ArmError(
                400,
                "NicInUse",
                f"Network Interface {res.id} is used by existing resource {vm_id}. In order to delete the network interface, it must be dissociated from the resource. To learn more, see aka.ms/deletenic.",
            )

    return _delete(ctx, NIC, refuse)


@handles(IPCONFIG, "list:get")
def list_ip_configs(ctx: Ctx) -> Reply:
    return Reply(200, {"value": _net(ctx).answer(_get(ctx, NIC))["properties"]["ipConfigurations"]})


@handles(IPCONFIG, "get")
def get_ip_config(ctx: Ctx) -> Reply:
    nic = _get(ctx, NIC)
    config = _net(ctx).child(nic, ctx.target)
    if config is None:
        raise not_found(IPCONFIG, f"{nic.name}/{ctx.target.child}", ctx.target.rg)
    return Reply(200, copy.deepcopy(config))


def parse_nic_id(nic_id: str) -> tuple[str, str, str] | None:
    parsed = parse_id(nic_id)
    if parsed is None or parsed[2].lower() != NIC.lower():
        return None
    return parsed[0], parsed[1], parsed[3]
