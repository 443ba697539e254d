"""The Azure provider: nodes are VMs of the cluster's resource group, tagged with the
cluster, kind, type and status. Nodes are reached over SSH (access.py: AzureAccess).

- Listing: one `virtualMachines.list` of the resource group with the instance view, read
  by vms.py (addresses from the node's tags).
- Launching: per node a public IP (unless `use_internal_ips`, or on a worker when only
  the head's is asked with `use_external_head_ip`), a NIC on the cluster's subnet and the
  VM, named from the request (names.vm_name), so a repeated request finds what the first
  made; the VMs of one launch are created side by side and waited on together. A refusal
  for capacity (SkuNotAvailable, AllocationFailed, ZonalAllocationFailed,
  OverconstrainedAllocationRequest) sends the rest to the next zone; a quota ends the
  launch at once. A VM that failed is deleted with what it owns.
- Removing: `virtualMachines.delete`; its NIC, public IP and OS disk go with it.
- `cache_stopped_nodes`: freed workers are deallocated (tagged as stopped by the
  launcher) and started again for a later launch of their type, outside the zones it
  avoids; a spot worker Azure evicted is deleted when answered, never kept.
- Bootstrap (network.py, identity.py): resource group, network, security group, the head's
  identity with Contributor on the group, the SSH key.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError, ProviderError
from launcher.providers.azure import names
from launcher.providers.azure.access import AzureAccess
from launcher.providers.azure.bodies import nic_body, node_tags, public_ip_body, vm_body
from launcher.providers.azure.clients import (
    AzureClients,
    arm_code,
    arm_message,
    get_or_none,
    make_clients,
    not_found,
    poll_interval,
)
from launcher.providers.azure.identity import HeadIdentity, ensure_identity, remove_identity
from launcher.providers.azure.model import AzureProviderConfig, node_zones, own_subnet
from launcher.providers.azure.network import (
    ClusterNetwork,
    ensure_group,
    ensure_network,
    remove_group,
    remove_network,
)
from launcher.providers.azure.vms import (
    STOPPED_TAG,
    TAG_PRIVATE_IP,
    TAG_PUBLIC_IP,
    evicted,
    identity_client_id,
    stopped_node,
    to_node,
    zone_of,
)
from launcher.providers.base import (
    TAG_CLUSTER,
    TAG_KIND,
    TAG_TYPE,
    Launch,
    Node,
    NodeKind,
    NodeProvider,
    ProviderTraits,
)
from launcher.providers.caller import public_address
from launcher.providers.keyfiles import ensure_key, public_key

CAPACITY_CODES = frozenset(
    {
        "SkuNotAvailable",
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    }
)
QUOTA_CODES = frozenset({"OperationNotAllowed", "QuotaExceeded"})
LAUNCH_THREADS = 16


class AzureProvider(NodeProvider):
    traits = ProviderTraits(installs_launcher_on_head=True, logs_in_over_ssh=True)

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        super().__init__(config, on_head)
        settings = config.provider
        assert isinstance(settings, AzureProviderConfig)
        self.settings = settings
        self.group = settings.resource_group
        self.internal = on_head or settings.use_internal_ips
        self._clients: AzureClients | None = None
        self._lock = threading.Lock()
        self._answered: set[str] = set()
        self._network: ClusterNetwork | None = None
        self._identity: HeadIdentity | None = None
        self._key = config.auth.ssh_private_key or str(names.key_file(self.cluster_name))
        # VM name -> client id of the identity it runs as, as listings fill it in (the
        # head's commands act as that identity: AzureAccess.node_env).
        self._client_ids: dict[str, str] = {}
        self.access = AzureAccess(
            config, self._key, self._identity_client_id, subscription=self._subscription
        )
        self._public_key: str | None = None  # read from the key file once
        self.traits = dataclasses.replace(
            type(self).traits,
            keeps_stopped_nodes=settings.cache_stopped_nodes,
            node_env_has_cluster_head_ip=self.internal,  # else the listing's are public
        )

    @property
    def clients(self) -> AzureClients:
        with self._lock:
            if self._clients is None:
                self._clients = make_clients(self.settings, polling_interval=poll_interval())
            return self._clients

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        return node_zones(self.settings, node_type.node_config)

    # -- bootstrap -----------------------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        if self.on_head:
            return []
        done = []
        if not self.config.auth.ssh_private_key and ensure_key(Path(self._key)):
            done.append(f"created SSH key {self._key} (mode 0600)")
        done += ensure_group(self.clients, self.settings, self.cluster_name)
        ssh_from = list(self.settings.allow_ssh_from) or [public_address()]
        self._network, made = ensure_network(
            self.clients, self.settings, self.cluster_name, ssh_from
        )
        done += made
        self._identity, made = ensure_identity(
            self.clients, self.settings, self.cluster_name, wait_s=wait_s
        )
        return done + made

    def _cluster_network(self) -> ClusterNetwork:
        """The subnet and security group nodes join (read once; on the head, where
        bootstrap does not run, looked up by name)."""
        with self._lock:
            found = self._network
        if found is not None:
            return found
        network = self.clients.network
        vnet = names.vnet(self.cluster_name, self.settings.unique_id)
        subnet = get_or_none(
            lambda: network.subnets.get(
                self.group, vnet, names.subnet(self.cluster_name, self.settings.unique_id)
            )
        )
        if subnet is None:
            raise ProviderError(
                f"the cluster's subnet in {vnet} is missing; run `launcher up` to make it"
            )
        nsg = subnet.network_security_group.id if subnet.network_security_group else ""
        found = ClusterNetwork(subnet_id=subnet.id, security_group_id=nsg)
        with self._lock:
            self._network = found
        return found

    def _key_text(self) -> str:
        """The launcher key's public half, derived once (~0.1 s for an RSA key), not per VM."""
        with self._lock:
            if self._public_key is None:
                self._public_key = public_key(Path(self._key))
            return self._public_key

    def _head_identity(self) -> HeadIdentity:
        with self._lock:
            found = self._identity
        if found is None:
            found, _ = ensure_identity(self.clients, self.settings, self.cluster_name)
            with self._lock:
                self._identity = found
        return found

    # -- listing -------------------------------------------------------------------------
    def _vms(self) -> list[Any]:
        """The cluster's VMs (every state), from one listing of the group."""
        try:
            listed = self.clients.compute.virtual_machines.list(self.group, expand="instanceView")
            found = [vm for vm in listed if (vm.tags or {}).get(TAG_CLUSTER) == self.cluster_name]
        except Exception as exc:
            if not_found(exc):  # no group yet: no nodes
                return []
            raise ProviderError(f"cannot list VMs of {self.group}: {arm_message(exc)}") from exc
        self._remember_identities(found)
        return found

    def _subscription(self) -> str:
        """The subscription the clients use (the config's, the environment's, the Azure CLI's
        default or the only one the login sees)."""
        return str(self.clients.subscription)

    def _remember_identities(self, vms: Iterable[Any]) -> None:
        with self._lock:
            for vm in vms:
                client_id = identity_client_id(vm)
                if client_id:
                    self._client_ids[str(vm.name)] = client_id

    def _identity_client_id(self, node: Node) -> str | None:
        """The client id of the identity `node`'s VM runs as: as listed, else read."""
        with self._lock:
            found = self._client_ids.get(node.id)
        if found is None:
            compute = self.clients.compute
            try:
                vm = get_or_none(lambda: compute.virtual_machines.get(self.group, node.id))
            except ProviderError:
                return None  # the VM's metadata service serves its only identity anyway
            if vm is not None:
                self._remember_identities([vm])
                found = identity_client_id(vm)
        return found

    def nodes(self) -> list[Node]:
        with self._lock:
            answered = set(self._answered)
        found = (to_node(vm, self.internal, answered) for vm in self._vms())
        return [n for n in found if n is not None]

    def stopped_nodes(self) -> list[Node]:
        found = (stopped_node(vm, self.internal) for vm in self._vms())
        return [n for n in found if n is not None]

    # -- launching -----------------------------------------------------------------------
    def _create(self, launch: Launch) -> list[Node]:
        request_id = launch.request_id or uuid.uuid4().hex
        launch = launch.with_request_id(request_id)
        node_type, count = launch.node_type, launch.count
        wanted = [
            names.vm_name(self.cluster_name, launch.kind, f"{request_id}/{i}") for i in range(count)
        ]
        listed = {vm.name: vm for vm in self._vms()}
        created = [
            n
            for n in (to_node(listed[name], self.internal) for name in wanted if name in listed)
            if n is not None
        ]
        left = [name for name in wanted if name not in listed]
        if left and self.settings.cache_stopped_nodes:
            resumed = self._resume(node_type, launch, len(left), listed.values())
            created += resumed
            left = left[: max(0, len(left) - len(resumed))]
        zones = self.zones(node_type)
        tried: list[str] = []
        why = ""
        for zone in (z for z in zones if z not in launch.avoid_zones):
            if not left:
                break
            made, refused, reason = self._launch_in(node_type, launch, zone, left)
            created += made
            if refused:
                tried.append(zone or "(any)")
                why = reason
                if reason.split(":", 1)[0] in QUOTA_CODES:
                    raise CapacityError(node_type.name, zones, reason, created, scope="quota")
            left = refused
        if left:
            detail = why or "every zone it may use is being avoided after recent failures"
            raise CapacityError(
                node_type.name, tried or sorted(launch.avoid_zones), detail, created
            )
        return created

    def _launch_in(
        self, node_type: NodeType, launch: Launch, zone: str, vm_names: Sequence[str]
    ) -> tuple[list[Node], list[str], str]:
        """Make `vm_names` in `zone`, side by side. Returns the nodes made, the names Azure
        had no capacity (or quota) for there, and why."""
        with ThreadPoolExecutor(min(LAUNCH_THREADS, len(vm_names))) as pool:
            results = list(
                pool.map(lambda name: self._launch_one(node_type, launch, zone, name), vm_names)
            )
        made = [node for node, _ in results if node is not None]
        refused = [name for name, (node, _) in zip(vm_names, results, strict=True) if node is None]
        reasons = [reason for node, reason in results if node is None]
        return made, refused, reasons[-1] if reasons else ""

    def _wants_public_ip(self, kind: NodeKind) -> bool:
        if self.settings.use_internal_ips:
            return kind is NodeKind.HEAD and self.settings.use_external_head_ip
        return True

    def _launch_one(
        self, node_type: NodeType, launch: Launch, zone: str, name: str
    ) -> tuple[Node | None, str]:
        """One node's public IP, NIC and VM. (None, why) when Azure had no capacity."""
        network = self.clients.network
        config = node_type.node_config
        tags = node_tags(config, launch.tags)
        subnet = own_subnet(config) or self._cluster_network().subnet_id
        public_ip: Any = None
        try:
            if self._wants_public_ip(launch.kind):
                public_ip = network.public_ip_addresses.begin_create_or_update(
                    self.group,
                    names.public_ip_name(name),
                    public_ip_body(self.settings.location, zone, tags),
                ).result()
            nic = network.network_interfaces.begin_create_or_update(
                self.group,
                names.nic_name(name),
                nic_body(
                    self.settings.location,
                    subnet,
                    tags,
                    public_ip_id=public_ip.id if public_ip is not None else None,
                ),
            ).result()
        except Exception as exc:
            self._delete_network_of(name, self._wants_public_ip(launch.kind))
            raise ProviderError(
                f"{name}: cannot make its network interface: {arm_message(exc)}"
            ) from exc
        private = nic.ip_configurations[0].private_ip_address
        addresses = {TAG_PRIVATE_IP: private}
        if public_ip is not None and public_ip.ip_address:
            addresses[TAG_PUBLIC_IP] = public_ip.ip_address
        identity = self._head_identity().id if launch.kind is NodeKind.HEAD else None
        body = vm_body(
            config,
            name=name,
            location=self.settings.location,
            zone=zone,
            tags={**tags, **addresses},
            admin_user=self.config.auth.ssh_user or "ubuntu",
            public_key=self._key_text(),
            nic_id=nic.id,
            identity_id=identity,
        )
        compute = self.clients.compute
        try:
            vm = compute.virtual_machines.begin_create_or_update(self.group, name, body).result()
        except Exception as exc:
            code = arm_code(exc)
            if code in CAPACITY_CODES or code in QUOTA_CODES:
                self._delete_vms([name])
                self._delete_network_of(name, public_ip is not None)
                return None, f"{code}: {arm_message(exc).split(': ', 1)[-1]}"
            raise ProviderError(f"{name}: launch refused: {arm_message(exc)}") from exc
        # As created (no instance view: listed PENDING until a listing shows it running),
        # without reading each VM once more.
        self._remember_identities([vm])
        return to_node(vm, self.internal), ""

    def _resume(
        self, node_type: NodeType, launch: Launch, count: int, vms: Iterable[Any]
    ) -> list[Node]:
        """Start VMs of the type the launcher deallocated, for this launch."""
        stopped = [
            vm
            for vm in vms
            if STOPPED_TAG in (vm.tags or {})
            and (vm.tags or {}).get(TAG_TYPE) == node_type.name
            and (vm.tags or {}).get(TAG_KIND) == launch.kind.value
            and stopped_node(vm, self.internal) is not None
            and zone_of(vm) not in launch.avoid_zones  # as a new node would avoid them
        ][:count]
        compute = self.clients.compute
        started = []
        for vm in stopped:
            tags = {k: v for k, v in {**(vm.tags or {}), **launch.tags}.items() if k != STOPPED_TAG}
            try:
                compute.virtual_machines.begin_update(self.group, vm.name, {"tags": tags}).result()
                compute.virtual_machines.begin_start(self.group, vm.name).result()
            except Exception as exc:
                raise ProviderError(f"cannot start {vm.name}: {arm_message(exc)}") from exc
            fresh = compute.virtual_machines.get(self.group, vm.name, expand="instanceView")
            node = to_node(fresh, self.internal)
            if node is not None:
                started.append(node)
        return started

    # -- changing ------------------------------------------------------------------------
    def _delete_vms(self, vm_names: Sequence[str]) -> None:
        """Delete the VMs (with what they own) side by side; wait for every one."""
        compute = self.clients.compute

        def delete(name: str) -> None:
            try:
                compute.virtual_machines.begin_delete(self.group, name).result()
            except Exception as exc:
                if not not_found(exc):
                    raise ProviderError(f"cannot delete {name}: {arm_message(exc)}") from exc

        unique = list(dict.fromkeys(vm_names))
        if unique:
            with ThreadPoolExecutor(min(LAUNCH_THREADS, len(unique))) as pool:
                list(pool.map(delete, unique))

    def _delete_network_of(self, name: str, public_ip: bool) -> None:
        """A node's NIC (and its public IP, when it was given one), when its VM never took
        them."""
        network = self.clients.network
        made: list[tuple[Any, str]] = [(network.network_interfaces, names.nic_name(name))]
        if public_ip:
            made.append((network.public_ip_addresses, names.public_ip_name(name)))
        for operations, resource in made:
            try:
                operations.begin_delete(self.group, resource).result()
            except Exception as exc:
                if not not_found(exc):
                    raise ProviderError(f"cannot delete {resource}: {arm_message(exc)}") from exc

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        self._delete_vms(node_ids)
        with self._lock:
            self._answered.update(node_ids)

    def stop_nodes(self, node_ids: Sequence[str]) -> None:
        """With cache_stopped_nodes, deallocate the VMs and keep them for a later launch of
        their type; else, and for spot workers Azure evicted (its capacity reclaimed, so a
        start would likely fail, and their disks bill while kept), delete them."""
        if not self.settings.cache_stopped_nodes:
            self.terminate_nodes(node_ids)
            return
        wanted = set(node_ids)
        gone = [str(vm.name) for vm in self._vms() if vm.name in wanted and evicted(vm)]
        if gone:
            self.terminate_nodes(gone)
        compute = self.clients.compute
        for name in dict.fromkeys(n for n in node_ids if n not in gone):
            self.set_tags(name, {STOPPED_TAG: "true"})
            try:
                compute.virtual_machines.begin_deallocate(self.group, name).result()
            except Exception as exc:
                if not not_found(exc):
                    raise ProviderError(f"cannot stop {name}: {arm_message(exc)}") from exc

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        compute = self.clients.compute
        vm = get_or_none(lambda: compute.virtual_machines.get(self.group, node_id))
        if vm is None:
            return
        merged = {**(vm.tags or {}), **tags}
        try:
            compute.virtual_machines.begin_update(self.group, node_id, {"tags": merged}).result()
        except Exception as exc:
            if not not_found(exc):
                raise ProviderError(f"cannot tag {node_id}: {arm_message(exc)}") from exc

    def cleanup(self, purge: bool = False) -> list[str]:
        removed = []
        left = [vm.name for vm in self._vms()]
        if left:
            self._delete_vms(left)
            removed.append(f"{len(left)} stopped VM(s)")
        if purge:
            removed += remove_identity(self.clients, self.settings, self.cluster_name)
            removed += remove_network(self.clients, self.settings, self.cluster_name)
            removed += remove_group(self.clients, self.settings, self.cluster_name)
        return removed
