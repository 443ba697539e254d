"""The GCE provider: nodes are instances labelled with the cluster, kind, type and status.

- Listing: one `instances.aggregatedList` filtered on the cluster's label (every zone).
- Launching: instances named from the request (`launcher-CLUSTER-CHASH-w-HASH`), inserted
  with a `requestId` derived from the request, zone and name, so a repeated request makes nothing
  twice (GCE answers a repeated requestId with the first operation, and a taken name with
  409); every operation is waited on and its error surfaced. A zone out of capacity
  (ZONE_RESOURCE_POOL_EXHAUSTED..., HTTP 503) sends the rest to the next zone of
  `provider.availability_zone` (comma-separated); a quota ends the launch at once.
- Labels change by `setLabels` with the instance's current labelFingerprint, again on 412.
- `cache_stopped_nodes`: workers the autoscaler frees are stopped (labelled as stopped by the
  launcher, so a stopped spot worker is told apart from one GCE reclaimed) and started again
  for a later launch of their type. `down` deletes every instance, stopped ones too, and
  returns once GCE says each is gone.
- Bootstrap (from the user's machine only; the head looks up): the SSH key (the config's,
  else one made once under `$LAUNCHER_HOME/keys/`), put in each instance's `ssh-keys`
  metadata; two firewall rules on the nodes' network (firewall.py: SSH from the caller, or
  `allow_ssh_from`, or with `use_internal_ips` the network's own subnet ranges; and all
  traffic between the cluster's nodes, both scoped by the cluster's network tag), patched
  when they differ from what the config asks; and the head's service account (accounts.py,
  grants.py: its instance admin role limited by an IAM condition to the cluster's
  instances). Every name derived from the cluster name comes from names.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError, ProviderError
from launcher.providers.base import (
    TAG_AUTOSTOPPED,
    TAG_CLUSTER,
    TAG_KIND,
    TAG_LAUNCH_ID,
    TAG_TYPE,
    Launch,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    ProviderTraits,
)
from launcher.providers.caller import public_address
from launcher.providers.gcp import accounts, firewall, names
from launcher.providers.gcp.clients import (
    GcpClients,
    api_errors,
    error_message,
    error_reason,
    http_status,
    make_clients,
)
from launcher.providers.gcp.instances import (
    CAPACITY_CODES,
    QUOTA_CODES,
    STOPPED_LABEL,
    encode_value,
    instance_body,
    labels_of,
    operation_error,
    tags_of,
    to_node,
    zone_of,
)
from launcher.providers.gcp.spec import GcpProviderConfig
from launcher.providers.keyfiles import ensure_key, public_key
from launcher.providers.ssh_access import SshNodeAccess

RATE_LIMIT_RETRIES = 6
LABEL_RETRIES = 5
OPERATION_WAIT_S = 600.0


def kind_of(tags: Mapping[str, str]) -> NodeKind:
    return NodeKind(tags.get(TAG_KIND, NodeKind.WORKER.value))


class GcpProvider(NodeProvider):
    traits = ProviderTraits(installs_launcher_on_head=True, logs_in_over_ssh=True)

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        super().__init__(config, on_head)
        settings = config.provider
        assert isinstance(settings, GcpProviderConfig)
        self.settings = settings
        self.internal = on_head or settings.use_internal_ips
        self._clients: GcpClients | None = None
        self._lock = threading.Lock()
        self._zone: dict[str, str] = {}  # instance name -> zone
        self._answered: set[str] = set()  # reclaimed workers already removed
        key = config.auth.ssh_private_key
        self._key = key or str(names.key_file(self.cluster_name))
        self.access = SshNodeAccess(config, self._key)
        self.traits = dataclasses.replace(
            type(self).traits,
            keeps_stopped_nodes=settings.cache_stopped_nodes,
            node_env_has_cluster_head_ip=self.internal,  # else the listing's are external
        )
        self._cluster_label = encode_value(self.cluster_name)
        self._key_line: str | None = None  # ssh-keys entry, read from the key file once
        self._apis = threading.local()  # this thread's compute.instances() and friends

    # -- clients -------------------------------------------------------------------------
    @property
    def clients(self) -> GcpClients:
        with self._lock:
            if self._clients is None:
                self._clients = make_clients(self.settings)
            return self._clients

    @property
    def project(self) -> str:
        return self.clients.project

    def _api(self, name: str) -> Any:
        """`compute.NAME()` of this thread's Compute client, built once per thread (building
        one makes a method object for every method its discovery document lists: ~5 ms)."""
        api = getattr(self._apis, name, None)
        if api is None:
            api = getattr(self.clients.compute, name)()
            setattr(self._apis, name, api)
        return api

    def _execute(self, method: Callable[..., Any], **arguments: Any) -> Any:
        """Call an API method, again after a pause while GCE rate-limits (429, or 403
        rateLimitExceeded)."""
        delay = 1.0
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                return method(**arguments).execute()
            except api_errors() as exc:
                limited = http_status(exc) == 429 or error_reason(exc) in (
                    "rateLimitExceeded",
                    "userRateLimitExceeded",
                )
                if not limited or attempt == RATE_LIMIT_RETRIES:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        return tuple(z.strip() for z in self.settings.availability_zone.split(",") if z.strip())

    # -- bootstrap -----------------------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        if self.on_head:
            return []
        done = []
        if not self.config.auth.ssh_private_key and ensure_key(Path(self._key)):
            done.append(f"created SSH key {self._key} (mode 0600)")
        self._ssh_key_line()  # read now, not in the first launch
        done += self._ensure_firewall()
        if self._head_account_wanted():
            done += accounts.ensure(self.clients, self.cluster_name, self._workers_run_as())
        return done

    def _workers_run_as(self) -> list[str]:
        """The service accounts the worker types' node_configs name (the head must be
        allowed to act as each to create those workers)."""
        head = self.config.head_type.name
        return accounts.worker_accounts(
            t.node_config for name, t in self.config.node_types.items() if name != head
        )

    def _head_account_wanted(self) -> bool:
        """Whether the head runs as the launcher's service account (its node_config names
        none of its own)."""
        return not self.config.head_type.node_config.get("serviceAccounts")

    def _ssh_from(self) -> list[str]:
        """Where SSH may come from: `allow_ssh_from`, else the network's own ranges with
        `use_internal_ips`, else this machine's public address."""
        if self.settings.allow_ssh_from:
            return list(self.settings.allow_ssh_from)
        if not self.settings.use_internal_ips:
            return [public_address()]
        network = self._network()
        ranges = firewall.network_ranges(self._subnetworks(), network, self._legacy_range())
        if not ranges:
            raise ProviderError(
                f"network {network} has no address ranges to open SSH from; "
                "set provider.allow_ssh_from to the ranges the launcher connects from"
            )
        return ranges

    def _subnetworks(self) -> list[dict[str, Any]]:
        subnetworks = self.clients.compute.subnetworks()
        found: list[dict[str, Any]] = []
        token = None
        while True:
            try:
                page = self._execute(
                    subnetworks.aggregatedList, project=self.project, pageToken=token
                )
            except api_errors() as exc:
                raise ProviderError(f"cannot list subnetworks: {error_message(exc)}") from exc
            for scoped in (page.get("items") or {}).values():
                found += scoped.get("subnetworks") or ()
            token = page.get("nextPageToken")
            if not token:
                return found

    def _legacy_range(self) -> str | None:
        """A legacy (subnet-less) network's own range."""
        name = self._network().rstrip("/").rsplit("/", 1)[-1]
        try:
            network = self._execute(
                self.clients.compute.networks().get, project=self.project, network=name
            )
        except api_errors() as exc:
            raise ProviderError(f"cannot read network {name}: {error_message(exc)}") from exc
        found = network.get("IPv4Range")
        return str(found) if found else None

    def _network(self) -> str:
        for node_type in self.config.node_types.values():
            for interface in node_type.node_config.get("networkInterfaces") or ():
                if isinstance(interface, Mapping) and interface.get("network"):
                    return str(interface["network"])
        return "global/networks/default"

    def _ensure_firewall(self) -> list[str]:
        wanted = firewall.rules(self.cluster_name, self._network(), self._ssh_from())
        firewalls = self.clients.compute.firewalls()
        return firewall.ensure(firewalls, self.project, wanted, self._execute, self._wait)

    def _ssh_key_line(self) -> str:
        """The `ssh-keys` entry of the launcher's key, read from the key file once (deriving
        the public key from an RSA private key takes ~0.1 s)."""
        with self._lock:
            if self._key_line is None:
                user = self.config.auth.ssh_user or "ubuntu"
                self._key_line = (
                    f"{user}:{public_key(Path(self._key))} launcher-{self.cluster_name}"
                )
            return self._key_line

    # -- operations ----------------------------------------------------------------------
    def _wait(self, operation: Mapping[str, Any] | None, what: str) -> Mapping[str, Any] | None:
        """Wait for `operation` to be DONE; returns it (check `operation_error`)."""
        if operation is None:
            return None
        deadline = time.monotonic() + OPERATION_WAIT_S
        while operation.get("status") != "DONE":
            if time.monotonic() > deadline:
                raise ProviderError(
                    f"cannot {what}: GCE did not finish within {OPERATION_WAIT_S:g} s"
                )
            name = operation["name"]
            zone = zone_of(operation)
            try:
                if zone:
                    operation = self._execute(
                        self._api("zoneOperations").wait,
                        project=self.project,
                        zone=zone,
                        operation=name,
                    )
                else:
                    operation = self._execute(
                        self._api("globalOperations").wait,
                        project=self.project,
                        operation=name,
                    )
            except api_errors() as exc:
                raise ProviderError(f"cannot {what}: {error_message(exc)}") from exc
        failed = operation_error(operation)
        if failed and failed[0] not in CAPACITY_CODES:
            raise ProviderError(f"cannot {what}: {failed[0]}: {failed[1]}")
        return operation

    # -- listing -------------------------------------------------------------------------
    def _instances(self, *conditions: str) -> Iterator[dict[str, Any]]:
        """The cluster's instances (every zone, every status) meeting `conditions`."""
        query = self._query(*conditions)
        instances = self._api("instances")
        token = None
        while True:
            page = self._list_page(instances, query, token)
            for scoped in (page.get("items") or {}).values():
                for instance in scoped.get("instances") or ():
                    with self._lock:
                        self._zone[str(instance["name"])] = zone_of(instance)
                    yield instance
            token = page.get("nextPageToken")
            if not token:
                return

    def _query(self, *conditions: str) -> str:
        """A list filter: the cluster's label and `conditions`."""
        return " AND ".join(
            f"({c})" for c in (f'labels.{TAG_CLUSTER} = "{self._cluster_label}"', *conditions)
        )

    def _list_page(self, instances: Any, query: str, token: str | None) -> Any:
        try:
            return self._execute(
                instances.aggregatedList,
                project=self.project,
                filter=query,
                pageToken=token,
                maxResults=500,
            )
        except api_errors() as exc:
            raise ProviderError(f"cannot list instances: {error_message(exc)}") from exc

    def nodes(self) -> list[Node]:
        with self._lock:
            answered = set(self._answered)
        found = (to_node(i, self.internal, answered) for i in self._instances())
        return [n for n in found if n is not None]

    # -- launching -----------------------------------------------------------------------
    def _create(self, launch: Launch) -> list[Node]:
        request_id = launch.request_id or uuid.uuid4().hex
        launch = launch.with_request_id(request_id)
        node_type, kind, count, avoid_zones = (
            launch.node_type,
            launch.kind,
            launch.count,
            launch.avoid_zones,
        )
        all_tags = launch.tags
        created = [n for n in self._made_by(request_id) if n.node_type == node_type.name][:count]
        # Stopped nodes of the type are started again: workers the autoscaler stopped, and a
        # head (with its workers) stopped by the cluster's autostop.
        if len(created) < count and self.settings.cache_stopped_nodes:
            created += self._resume(node_type, count - len(created), all_tags, avoid_zones)
        wanted_names = [
            names.instance_name(self.cluster_name, kind, f"{request_id}/{i}") for i in range(count)
        ]
        taken = {n.id for n in created}
        wanted = [name for name in wanted_names if name not in taken][: count - len(created)]
        tried: list[str] = []
        last = ""
        for zone in (z for z in self.zones(node_type) if z not in avoid_zones):
            if not wanted:
                break
            made, refused, why = self._insert(node_type, zone, wanted, all_tags, request_id)
            created += made
            if refused:
                tried.append(zone)
                last = why
                if why.split(":", 1)[0] in QUOTA_CODES:  # no other zone lifts a quota
                    raise CapacityError(
                        node_type.name, self.zones(node_type), why, created, scope="quota"
                    )
            wanted = refused
        if wanted:
            zones = tried or sorted(set(avoid_zones))
            detail = last or "every zone it may use is being avoided after recent failures"
            raise CapacityError(node_type.name, zones, detail, created)
        return created

    def _insert(
        self,
        node_type: NodeType,
        zone: str,
        instance_names: Sequence[str],
        tags: Mapping[str, str],
        request_id: str,
    ) -> tuple[list[Node], list[str], str]:
        """Insert `instance_names` in `zone` and wait for them. Returns the nodes made, the
        names GCE had no capacity for there, and why."""
        instances = self._api("instances")
        labels = labels_of(tags)
        operations: list[tuple[str, Any]] = []
        refused: list[str] = []
        why = ""
        for name in instance_names:
            config = node_type.node_config
            if kind_of(tags) is NodeKind.HEAD and self._head_account_wanted():
                account = accounts.email(self.clients, self.cluster_name)
                config = {
                    **config,
                    "serviceAccounts": [{"email": account, "scopes": list(accounts.SCOPES)}],
                }
            body = instance_body(
                config,
                name=name,
                zone=zone,
                project=self.project,
                labels=labels,
                ssh_key=self._ssh_key_line(),
                network_tag=names.network_tag(self.cluster_name),
                internal=self.settings.use_internal_ips,
            )
            key = str(uuid.uuid5(uuid.NAMESPACE_URL, f"launcher/{request_id}/{zone}/{name}"))
            try:
                operation = self._execute(
                    instances.insert, project=self.project, zone=zone, body=body, requestId=key
                )
            except api_errors() as exc:
                if http_status(exc) == 409:  # made by an earlier try of this request
                    operations.append((name, None))
                    continue
                if http_status(exc) == 503 or error_reason(exc) in CAPACITY_CODES:
                    refused.append(name)
                    why = f"{error_reason(exc) or 'unavailable'}: {error_message(exc)}"
                    continue
                raise ProviderError(
                    f"{node_type.name}: launch in {zone} refused: {error_message(exc)}"
                ) from exc
            operations.append((name, operation))
        made_names = []
        for name, operation in operations:
            done = self._wait(operation, f"launch {name} in {zone}")
            failed = operation_error(done) if done else None
            if failed:
                refused.append(name)
                why = f"{failed[0]}: {failed[1]}"
            else:
                made_names.append(name)
        made = self._listed(zone, made_names, request_id)
        return made, refused, why

    def _listed(self, zone: str, names: Sequence[str], request_id: str | None = None) -> list[Node]:
        """The instances `names` of `zone` as nodes: several made by one request are read
        with one listing of the zone filtered on the request's label, the rest (or a single
        one) one `instances.get` each."""
        instances = self._api("instances")
        read: dict[str, Any] = {}
        if request_id and len(names) > 1:
            query = self._query(f'labels.{TAG_LAUNCH_ID} = "{encode_value(request_id)}"')
            token = None
            while True:
                try:
                    page = self._execute(
                        instances.list,
                        project=self.project,
                        zone=zone,
                        filter=query,
                        pageToken=token,
                        maxResults=500,
                    )
                except api_errors() as exc:
                    raise ProviderError(f"cannot list instances: {error_message(exc)}") from exc
                read.update({str(i["name"]): i for i in page.get("items") or ()})
                token = page.get("nextPageToken")
                if not token:
                    break
        found = []
        for name in names:
            instance = read.get(name)
            if instance is None:
                try:
                    instance = self._execute(
                        instances.get, project=self.project, zone=zone, instance=name
                    )
                except api_errors() as exc:
                    raise ProviderError(f"cannot read {name}: {error_message(exc)}") from exc
            with self._lock:
                self._zone[name] = zone
            node = to_node(instance, self.internal, ())
            if node is not None:
                found.append(node)
        return found

    def _made_by(self, request_id: str | None) -> list[Node]:
        if not request_id:
            return []
        condition = f'labels.{TAG_LAUNCH_ID} = "{encode_value(request_id)}"'
        found = (to_node(i, self.internal, ()) for i in self._instances(condition))
        return [n for n in found if n is not None]

    def _resume(
        self, node_type: NodeType, count: int, tags: Mapping[str, str], avoid: Collection[str]
    ) -> list[Node]:
        """Start stopped nodes of `node_type` (stopped by the launcher) for this launch."""
        stopped = [
            i
            for i in self._instances(
                f'labels.{TAG_TYPE} = "{encode_value(node_type.name)}"',
                f'labels.{TAG_KIND} = "{encode_value(tags[TAG_KIND])}"',  # a head as a head
                'status = "TERMINATED"',
            )
            if STOPPED_LABEL in (i.get("labels") or {}) and zone_of(i) not in avoid
        ][:count]
        if not stopped:
            return []
        instances = self._api("instances")
        started = []
        for instance in stopped:
            name, zone = str(instance["name"]), zone_of(instance)
            labels = {**tags_of(instance), **tags}
            self._set_labels(name, zone, labels, drop=(STOPPED_LABEL, TAG_AUTOSTOPPED))
            try:
                operation = self._execute(
                    instances.start, project=self.project, zone=zone, instance=name
                )
            except api_errors() as exc:
                raise ProviderError(f"cannot start {name}: {error_message(exc)}") from exc
            done = self._wait(operation, f"start {name}")
            if done is None or operation_error(done) is None:
                started.append((zone, name))
        nodes: list[Node] = []
        for zone, name in started:
            nodes += self._listed(zone, [name])
        return nodes

    # -- changing ------------------------------------------------------------------------
    def _zone_for(self, name: str) -> str | None:
        with self._lock:
            zone = self._zone.get(name)
        if zone is None:
            for instance in self._instances(f'name = "{name}"'):
                return zone_of(instance)
        return zone

    def stopped_nodes(self) -> list[Node]:
        found = []
        for instance in self._instances(f"labels.{STOPPED_LABEL}:*"):
            if instance.get("status") not in ("TERMINATED", "STOPPING", "STOPPED"):
                continue
            node = to_node({**instance, "status": "RUNNING"}, self.internal, ())
            if node is not None:
                found.append(dataclasses.replace(node, state=NodeState.STOPPED))
        return found

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        """Delete the instances (stopped ones too) and return once GCE says each is gone."""
        self._each(node_ids, "delete")

    def stop_nodes(self, node_ids: Sequence[str]) -> None:
        if not self.settings.cache_stopped_nodes:
            self.terminate_nodes(node_ids)
            return
        for name in node_ids:
            zone = self._zone_for(name)
            if zone is not None:
                self._set_labels(name, zone, {STOPPED_LABEL: "true"})
        self._each(node_ids, "stop")

    def _each(self, names: Sequence[str], verb: str) -> None:
        """`instances.delete` or `instances.stop` each of `names`, then wait for them all."""
        instances = self._api("instances")
        operations = []
        for name in dict.fromkeys(names):
            zone = self._zone_for(name)
            if zone is None:
                continue  # gone already
            key = str(uuid.uuid4())  # one per call: its retries are the same request
            try:
                operation = self._execute(
                    getattr(instances, verb),
                    project=self.project,
                    zone=zone,
                    instance=name,
                    requestId=key,
                )
            except api_errors() as exc:
                if http_status(exc) == 404:
                    continue
                raise ProviderError(f"cannot {verb} {name}: {error_message(exc)}") from exc
            operations.append((name, operation))
        for name, operation in operations:
            self._wait(operation, f"{verb} {name}")
            with self._lock:
                self._answered.add(name)
                if verb == "delete":
                    self._zone.pop(name, None)

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        zone = self._zone_for(node_id)
        if zone is not None:  # else gone (or never made): nothing to tag
            self._set_labels(node_id, zone, tags, missing_ok=True)

    def _set_labels(
        self,
        name: str,
        zone: str,
        tags: Mapping[str, str],
        drop: Collection[str] = (),
        *,
        missing_ok: bool = False,
    ) -> None:
        """Merge `tags` into the instance's labels (less `drop`), with its current
        fingerprint, again when another writer changed them meanwhile (412). An instance
        that is gone is an error unless `missing_ok`."""
        instances = self._api("instances")
        for attempt in range(LABEL_RETRIES + 1):
            try:
                instance = self._execute(
                    instances.get, project=self.project, zone=zone, instance=name
                )
                labels = {**(instance.get("labels") or {}), **labels_of(tags)}
                for key in drop:
                    labels.pop(key, None)
                body = {"labels": labels, "labelFingerprint": instance.get("labelFingerprint")}
                operation = self._execute(
                    instances.setLabels, project=self.project, zone=zone, instance=name, body=body
                )
                self._wait(operation, f"label {name}")
                return
            except api_errors() as exc:
                if http_status(exc) == 412 and attempt < LABEL_RETRIES:
                    continue
                if http_status(exc) == 404 and missing_ok:
                    return
                raise ProviderError(f"cannot label {name}: {error_message(exc)}") from exc

    def cleanup(self, purge: bool = False) -> list[str]:
        removed = []
        left = [str(i["name"]) for i in self._instances()]
        if left:
            self.terminate_nodes(left)
            removed.append(f"{len(left)} stopped instance(s)")
        if purge:
            removed += accounts.remove(self.clients, self.cluster_name, self._workers_run_as())
            firewalls = self.clients.compute.firewalls()
            for name in self._firewall_names():
                try:
                    operation = self._execute(firewalls.delete, project=self.project, firewall=name)
                except api_errors() as exc:
                    if http_status(exc) == 404:
                        continue
                    raise ProviderError(
                        f"cannot delete firewall rule {name}: {error_message(exc)}"
                    ) from exc
                self._wait(operation, f"delete firewall rule {name}")
                removed.append(f"firewall rule {name}")
        return removed

    def _firewall_names(self) -> list[str]:
        return [names.ssh_rule(self.cluster_name), names.internal_rule(self.cluster_name)]
