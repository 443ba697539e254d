"""The Azure provider: nodes are VMs of the cluster's resource group, tagged with the
cluster, kind, type and status. Nodes are reached over SSH (access.py: AzureAccess).

- Listing: one `virtualMachines.list` of the resource group with the instance view, read
  by vms.py; addresses are remembered from the deployments (a VM keeps its IPs), else
  learnt with one listing of the group's NICs (and public IPs) for all unknown VMs.
- Launching: per node a public IP (unless `use_internal_ips`, or on a worker when only
  the head's is asked with `use_external_head_ip`), a NIC on the cluster's subnet and the
  VM, named from the request (names.vm_name), so a repeated request finds what the first
  made; a launch's nodes in one zone are one ARM template deployment (batch.py), whose
  output gives their addresses. A refusal for capacity (SkuNotAvailable,
  AllocationFailed, ZonalAllocationFailed, OverconstrainedAllocationRequest) sends the
  rest to the next zone under names of their own while what was refused is deleted
  beside it; a quota ends the launch at once.
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError, ProviderError
from launcher.providers.azure import names
from launcher.providers.azure.access import AzureAccess
from launcher.providers.azure.batch import (
    MAX_NODES_PER_DEPLOYMENT,
    NIC_TYPE,
    PUBLIC_IP_TYPE,
    NodeBodies,
    Refusal,
    addresses_of,
    deployment_name,
    refusals,
    resource_id,
    template,
)
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
    Addresses,
    evicted,
    identity_client_id,
    made_node,
    provisioning_state,
    stopped_node,
    tagged_addresses,
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
        # VM name -> its (private, public) IP, from the deployment that made it or a
        # listing of the group's NICs (a VM keeps both for its life: Standard static IPs).
        self._addresses: dict[str, Addresses] = {}
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
        _ = self.clients.deployments  # built now (its models load in ~0.1 s), not in a launch
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
        vms = self._vms()
        addresses = self._addresses_for(vms)
        found = (to_node(vm, self.internal, answered, addresses.get(str(vm.name))) for vm in vms)
        return [n for n in found if n is not None]

    def stopped_nodes(self) -> list[Node]:
        vms = [vm for vm in self._vms() if stopped_node(vm, self.internal) is not None]
        addresses = self._addresses_for(vms)
        found = (stopped_node(vm, self.internal, addresses.get(str(vm.name))) for vm in vms)
        return [n for n in found if n is not None]

    # -- launching -----------------------------------------------------------------------
    def _create(self, launch: Launch) -> list[Node]:
        request_id = launch.request_id or uuid.uuid4().hex
        launch = launch.with_request_id(request_id)
        node_type, count = launch.node_type, launch.count
        zones = self.zones(node_type)

        def name(index: int, zone: str) -> str:
            # A node tried in a later zone gets a name of its own, so the VM refused in the
            # earlier one can be deleted while it is made.
            seed = f"{request_id}/{index}" if zone == zones[0] else f"{request_id}/{index}@{zone}"
            return names.vm_name(self.cluster_name, launch.kind, seed)

        listed = {str(vm.name): vm for vm in self._vms()}
        found = {
            i: [listed[n] for n in (name(i, z) for z in zones) if n in listed] for i in range(count)
        }
        addresses = self._addresses_for([vm for vms in found.values() for vm in vms])
        created: list[Node] = []
        left: list[int] = []
        for index, vms in found.items():
            live = [
                node
                for node in (
                    to_node(vm, self.internal, (), addresses.get(str(vm.name))) for vm in vms
                )
                if node is not None
            ]
            if live:
                created.append(live[0])
            else:
                left.append(index)
        if left and self.settings.cache_stopped_nodes:
            resumed = self._resume(node_type, launch, len(left), listed.values())
            created += resumed
            left = left[: max(0, len(left) - len(resumed))]
        with ThreadPoolExecutor(4, thread_name_prefix="azure-discard") as cleaner:
            discards: list[Future[None]] = []
            try:
                created += self._launch_zones(launch, zones, left, name, cleaner, discards)
            finally:
                problems = [f.exception() for f in discards]
        if any(problems):
            raise ProviderError(
                f"a VM Azure refused was not deleted: {next(p for p in problems if p)}"
            )
        return created

    def _launch_zones(
        self,
        launch: Launch,
        zones: Sequence[str],
        left: Sequence[int],
        name: Callable[[int, str], str],
        cleaner: ThreadPoolExecutor,
        discards: list[Future[None]],
    ) -> list[Node]:
        """Launch nodes `left` (their indexes in the launch) zone by zone until every one
        runs; a capacity refusal sends the rest on, a quota ends the launch."""
        node_type = launch.node_type
        created: list[Node] = []
        tried: list[str] = []
        why = ""
        for zone in (z for z in zones if z not in launch.avoid_zones):
            if not left:
                break
            by_name = {name(i, zone): i for i in left}
            made, refused, reason = self._launch_in(
                node_type, launch, zone, list(by_name), cleaner, discards
            )
            created += made
            if refused:
                tried.append(zone or "(any)")
                why = reason
                if reason.split(":", 1)[0] in QUOTA_CODES:
                    raise CapacityError(node_type.name, zones, reason, created, scope="quota")
            left = [by_name[n] for n in refused]
        if left:
            detail = why or "every zone it may use is being avoided after recent failures"
            raise CapacityError(
                node_type.name, tried or sorted(launch.avoid_zones), detail, created
            )
        return created

    def _launch_in(
        self,
        node_type: NodeType,
        launch: Launch,
        zone: str,
        vm_names: Sequence[str],
        cleaner: ThreadPoolExecutor,
        discards: list[Future[None]],
    ) -> tuple[list[Node], list[str], str]:
        """Make `vm_names` in `zone`: one template deployment per up to 250 of them, side by
        side. Returns the nodes made, the names Azure had no capacity (or quota) for there,
        and why; what it refused is deleted by `cleaner` (its futures in `discards`)."""
        parts = [
            vm_names[i : i + MAX_NODES_PER_DEPLOYMENT]
            for i in range(0, len(vm_names), MAX_NODES_PER_DEPLOYMENT)
        ]

        def deploy(part: int) -> tuple[list[Node], list[str], str]:
            return self._deploy(node_type, launch, zone, parts[part], part, cleaner, discards)

        if len(parts) == 1:  # no thread to start: the usual launch
            results = [deploy(0)]
        else:
            with ThreadPoolExecutor(len(parts)) as pool:
                results = list(pool.map(deploy, range(len(parts))))
        made = [node for nodes, _, _ in results for node in nodes]
        refused = [name for _, names_, _ in results for name in names_]
        reasons = [why for _, names_, why in results if names_]
        return made, refused, reasons[-1] if reasons else ""

    def _wants_public_ip(self, kind: NodeKind) -> bool:
        if self.settings.use_internal_ips:
            return kind is NodeKind.HEAD and self.settings.use_external_head_ip
        return True

    def _bodies(
        self, node_type: NodeType, launch: Launch, zone: str, name: str, tags: Mapping[str, str]
    ) -> NodeBodies:
        """One node's public IP (where wanted), NIC and VM, pointing at each other by id."""
        config = node_type.node_config
        subnet = own_subnet(config) or self._cluster_network().subnet_id
        subscription = self._subscription()
        public_ip: dict[str, Any] | None = None
        public_ip_id = None
        if self._wants_public_ip(launch.kind):
            public_ip = public_ip_body(self.settings.location, zone, tags)
            public_ip_id = resource_id(
                subscription, self.group, PUBLIC_IP_TYPE, names.public_ip_name(name)
            )
        nic = nic_body(self.settings.location, subnet, tags, public_ip_id=public_ip_id)
        identity = self._head_identity().id if launch.kind is NodeKind.HEAD else None
        vm = vm_body(
            config,
            name=name,
            location=self.settings.location,
            zone=zone,
            tags=tags,
            admin_user=self.config.auth.ssh_user or "ubuntu",
            public_key=self._key_text(),
            nic_id=resource_id(subscription, self.group, NIC_TYPE, names.nic_name(name)),
            identity_id=identity,
        )
        return NodeBodies(name, vm, nic, public_ip)

    def _deploy(
        self,
        node_type: NodeType,
        launch: Launch,
        zone: str,
        vm_names: Sequence[str],
        part: int,
        cleaner: ThreadPoolExecutor,
        discards: list[Future[None]],
    ) -> tuple[list[Node], list[str], str]:
        """One deployment of `vm_names` in `zone` (see _launch_in)."""
        tags = node_tags(node_type.node_config, launch.tags)
        bodies = [self._bodies(node_type, launch, zone, name, tags) for name in vm_names]
        request_id = launch.request_id or uuid.uuid4().hex
        deployment = deployment_name(self.cluster_name, request_id, zone, part)
        body = {
            "properties": {
                "mode": "Incremental",
                "template": template(self._subscription(), self.group, bodies),
            }
        }
        try:
            done = self.clients.deployments.begin_create_or_update(
                self.group, deployment, body
            ).result()
        except Exception as exc:
            return self._after_refusal(launch, zone, vm_names, exc, cleaner, discards)
        addresses = addresses_of(done)
        missing = [name for name in vm_names if name not in addresses]
        if missing:
            addresses.update(self._learn_addresses(missing))
        self._remember(launch.kind, addresses)
        return (
            [
                made_node(name, launch.kind, tags, zone, addresses.get(name), self.internal)
                for name in vm_names
            ],
            [],
            "",
        )

    def _after_refusal(
        self,
        launch: Launch,
        zone: str,
        vm_names: Sequence[str],
        exc: BaseException,
        cleaner: ThreadPoolExecutor,
        discards: list[Future[None]],
    ) -> tuple[list[Node], list[str], str]:
        """A deployment that failed: the VMs it made stand (as nodes); the rest are refused
        for capacity or quota (deleted in the background), or, for any other reason, the
        launch fails once they are deleted."""
        refused = refusals(exc) or [Refusal(arm_code(exc), arm_message(exc), "")]
        capacity = [r for r in refused if r.code in CAPACITY_CODES or r.code in QUOTA_CODES]
        other = [r for r in refused if r not in capacity]
        wanted = set(vm_names)
        vms = {str(vm.name): vm for vm in self._vms() if vm.name in wanted}
        made = [
            name
            for name in vm_names
            if name in vms and provisioning_state(vms[name]) == "succeeded"
        ]
        unmade = [name for name in vm_names if name not in made]
        public = self._wants_public_ip(launch.kind)
        present = [name for name in unmade if name in vms]
        absent = [name for name in unmade if name not in vms]
        if other:
            self._discard(present, absent, public)
            first = other[0]
            where = f"{first.resource_name}: " if first.resource_name else ""
            raise ProviderError(
                f"{where}launch refused: {first.code}: {first.message}"
                if first.code
                else f"{where}launch refused: {first.message or arm_message(exc)}"
            )
        with self._lock:
            discards.append(cleaner.submit(self._discard, present, absent, public))
        addresses = self._learn_addresses(made) if made else {}
        self._remember(launch.kind, addresses)
        nodes = [
            made_node(
                name, launch.kind, vms[name].tags or {}, zone, addresses.get(name), self.internal
            )
            for name in made
        ]
        why = capacity[0] if capacity else None
        reason = f"{why.code}: {why.message}" if why else f"{zone or '(any)'}: not made"
        return nodes, unmade, reason

    def _remember(self, kind: NodeKind, addresses: Mapping[str, Addresses]) -> None:
        """The addresses of VMs just made (and, for a head, the identity it runs as)."""
        client_id = self._head_identity().client_id if kind is NodeKind.HEAD else None
        with self._lock:
            self._addresses.update(addresses)
            if client_id:
                self._client_ids.update(dict.fromkeys(addresses, client_id))

    def _learn_addresses(self, vm_names: Iterable[str]) -> dict[str, Addresses]:
        """The IPs of `vm_names` from one listing of the group's NICs (and one of its public
        IPs, where nodes are reached by them), by the names the provider gives them."""
        wanted = set(vm_names)
        network = self.clients.network
        try:
            nics = {
                str(nic.name): nic
                for nic in network.network_interfaces.list(self.group)
                if str(nic.name).removesuffix("-nic") in wanted
            }
            ips = {}
            if not self.internal:
                ips = {
                    str(ip.name): ip
                    for ip in network.public_ip_addresses.list(self.group)
                    if str(ip.name).removesuffix("-ip") in wanted
                }
        except Exception as exc:
            if not_found(exc):
                return {}
            raise ProviderError(
                f"cannot list the NICs of {self.group}: {arm_message(exc)}"
            ) from exc
        found: dict[str, Addresses] = {}
        for name in wanted:
            nic = nics.get(names.nic_name(name))
            configs = getattr(nic, "ip_configurations", None) or []
            private = configs[0].private_ip_address if configs else None
            ip = ips.get(names.public_ip_name(name))
            public = getattr(ip, "ip_address", None)
            if private or public:
                found[name] = (private, public)
        with self._lock:
            self._addresses.update(found)
        return found

    def _addresses_for(self, vms: Sequence[Any]) -> dict[str, Addresses]:
        """The IPs of listed `vms`: remembered, in their tags (earlier versions), or learnt
        with one listing of the group's NICs for all that are neither."""
        with self._lock:
            known = {str(vm.name): self._addresses.get(str(vm.name)) for vm in vms}
        unknown = [
            name
            for name, vm in zip(known, vms, strict=True)
            if known[name] is None and tagged_addresses(vm) is None
        ]
        learnt = self._learn_addresses(unknown) if unknown else {}
        return {
            name: found
            for name, found in ((n, known[n] or learnt.get(n)) for n in known)
            if found is not None
        }

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
        addresses = self._addresses_for(stopped) if stopped else {}
        started = []
        for vm in stopped:
            tags = {k: v for k, v in {**(vm.tags or {}), **launch.tags}.items() if k != STOPPED_TAG}
            try:
                compute.virtual_machines.begin_update(self.group, vm.name, {"tags": tags}).result()
                compute.virtual_machines.begin_start(self.group, vm.name).result()
            except Exception as exc:
                raise ProviderError(f"cannot start {vm.name}: {arm_message(exc)}") from exc
            fresh = compute.virtual_machines.get(self.group, vm.name, expand="instanceView")
            node = to_node(fresh, self.internal, (), addresses.get(str(vm.name)))
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

    def _discard(self, present: Sequence[str], absent: Sequence[str], public_ip: bool) -> None:
        """What a refused deployment made: the (failed) VMs `present`, whose NIC and public
        IP go with them (`deleteOption: Delete`), and the NICs and public IPs made for the
        VMs `absent`, which were never made."""
        self._delete_vms(present)
        if absent:
            with ThreadPoolExecutor(min(LAUNCH_THREADS, len(absent))) as pool:
                list(pool.map(lambda name: self._delete_network_of(name, public_ip), absent))

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
