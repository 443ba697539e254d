"""The EC2 provider: nodes are instances tagged with the cluster's name.

Everything the launcher knows of a node is in its instance's tags (cluster, kind, type,
setup status and hashes), so any laptop, or the head, recovers the cluster by listing them.

- create_nodes returns once DescribeInstances lists the new instances (EC2 lists them a
  while after the launch), so stopping the autoscaler in the middle of a launch leaves
  nothing `down` cannot list.
- Launches try the type's subnets in order (zones the autoscaler avoids are left out); a
  capacity refusal (`CAPACITY_CODES`) moves on to the next subnet, and when none is left a
  CapacityError names the zones tried, which the autoscaler answers with the type's
  fallbacks. Each RunInstances carries a client token, so a retried call never launches
  twice. Throttling is retried with jitter by botocore (`clients`).
- A worker AWS reclaims (spot) is listed as PREEMPTED until the autoscaler has answered it
  (remembered on the head across autoscaler restarts: removed_journal.py).
- Launches from the user's machine are written down until a listing shows what they made
  (`launch_journal`); one whose answer never came back (an interrupted `up`) is sent again, same
  client token, by the next `up` (bootstrap) or `down` (cleanup). Their instances are nodes
  before any listing shows them, so `up` never makes a second head and `down` leaves
  nothing behind.
- `cache_stopped_nodes`: workers the autoscaler removes are stopped, and started again for a
  later launch of the same type and node_config. `down` (from the user's machine)
  terminates every instance of the cluster, stopped ones included, and checks by listing.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError, ProviderError
from launcher.providers.aws import iam, keys, launch_journal, network, removed_journal
from launcher.providers.aws.access import AwsAccess
from launcher.providers.aws.bootstrap import group_name, own_key_name, resolve
from launcher.providers.aws.clients import (
    AwsClients,
    boto_errors,
    capacity_scope,
    error_code,
    error_message,
    is_capacity,
    retry_throttled,
)
from launcher.providers.aws.instances import (
    LIVE_STATES,
    TAG_LAUNCH_CONFIG,
    aws_tags,
    launch_config_digest,
    tags_of,
    to_node,
    was_reclaimed,
)
from launcher.providers.aws.launch import (
    LaunchContext,
    Placement,
    placements_to_try,
    run_request,
)
from launcher.providers.aws.spec import AwsProviderConfig
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
from launcher.providers.keyfiles import key_path
from launcher.providers.ssh_access import known_hosts_path
from launcher.runners.known_hosts import KnownHosts

PUBLIC_IP_WAIT_S = 180.0
PROFILE_RETRIES = 8  # a new head instance profile takes a while to be usable
TERMINATE_WAIT_S = 600.0  # `down --purge` waits this long for instances to be gone
LISTED_WAIT_S = 60.0  # `settle` waits this long at most for new instances to be listed
LISTED_POLL_S = 0.5
ALL_STATES = ("pending", "running", "stopping", "stopped", "shutting-down", "terminated")
FINAL_STATES = ("stopped", "terminated")
# Refusals of a launch sent again (see `launch_journal`) that say nothing about what the
# first one made.
UNSETTLED_CODES = frozenset(
    {"UnauthorizedOperation", "AuthFailure", "RequestExpired", "Blocked", "OptInRequired"}
)


class AwsProvider(NodeProvider):
    traits = ProviderTraits(
        installs_launcher_on_head=True,
        logs_in_over_ssh=True,
        node_env_has_cluster_head_ip=True,  # AwsAccess gives the private IPs
    )

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        super().__init__(config, on_head)
        settings = config.provider
        assert isinstance(settings, AwsProviderConfig)
        self.settings = settings
        self.clients = AwsClients(settings.region)
        # On the head the nodes are reached inside the VPC; from the user's machine, by
        # public address unless use_internal_ips.
        self.private = on_head or settings.use_internal_ips
        self._contexts: dict[str, LaunchContext] | None = None  # per node type
        self._lock = threading.Lock()
        self._private_ips: dict[str, str] = {}
        # Instances launched from this machine (`launch_journal`), until a listing shows them.
        self._unlisted: dict[str, dict[str, Any]] = {}
        # Terminated (or stopped) by this provider: a reclaimed worker among them has been
        # answered, and a launch not listed yet is not a node any more. On the head, also
        # by the autoscaler's earlier runs (`removed_journal`).
        self._gone: set[str] = set()
        self._listed_once = False
        # Workers seen live at the last listing, or launched since: one missing from the next
        # listing is asked about (was it reclaimed?). Reclaimed ones seen, until answered.
        self._watched: set[str] = set()
        self._reclaimed: dict[str, dict[str, Any]] = {}
        self._live: dict[str, bool] = {}  # pending or running at the last listing: stoppable?
        if on_head:
            self._gone.update(
                removed_journal.load(removed_journal.removed_path(self.cluster_name), time.time())
            )
        key = config.auth.ssh_private_key
        name = own_key_name(config)
        self._key = key if key else (str(key_path(name)) if name else None)
        self.access = AwsAccess(config, self._key, self._private_ips)
        self.traits = dataclasses.replace(
            type(self).traits, keeps_stopped_nodes=settings.cache_stopped_nodes
        )

    # -- bootstrap ----------------------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        contexts, done = resolve(
            self.clients, self.config, create=not self.on_head, ssh_from=self._ssh_from
        )
        with self._lock:
            self._contexts = contexts
        if not self.on_head:  # `up`: what an interrupted `up` launched is the head
            made = self._send_unanswered()
            if made:
                done.append(
                    f"found {', '.join(made)}, launched by an earlier up whose answer was lost"
                )
        return done

    def _ssh_from(self, vpc_id: str) -> list[str]:
        if self.settings.allow_ssh_from:
            return list(self.settings.allow_ssh_from)
        if self.settings.use_internal_ips:
            return network.vpc_cidrs(self.clients, vpc_id)
        return [public_address()]

    def contexts(self) -> dict[str, LaunchContext]:
        """What launches of each node type need, looked up once (bootstrap sets it)."""
        with self._lock:
            if self._contexts is not None:
                return self._contexts
        contexts, _ = resolve(self.clients, self.config, create=False, ssh_from=self._ssh_from)
        with self._lock:
            self._contexts = contexts
        return contexts

    # -- listing ------------------------------------------------------------------------
    def _instances(
        self, states: Sequence[str], *filters: Mapping[str, Any]
    ) -> Iterator[dict[str, Any]]:
        query = [
            {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_name]},
            {"Name": "instance-state-name", "Values": list(states)},
            *filters,
        ]
        try:
            pages = self.clients.ec2_listing.get_paginator("describe_instances").paginate(
                Filters=query
            )
            for page in pages:
                for reservation in page["Reservations"]:
                    yield from reservation["Instances"]
        except boto_errors() as exc:
            raise ProviderError(f"cannot list instances: {error_message(exc)}") from exc

    def nodes(self) -> list[Node]:
        """The cluster's pending and running instances, and the workers AWS reclaimed that
        nobody answered yet (PREEMPTED). Reclaimed instances are terminated (or stopped):
        the first listing asks for every state (reclaims while no autoscaler ran, which EC2
        lists for about an hour); later ones only for the live states, plus, when a worker
        seen live before is missing, for that worker's fate."""
        launches = launch_journal.pending(self.cluster_name) if not self.on_head else []
        with self._lock:
            first, self._listed_once = not self._listed_once, True
            # Asked about by id when missing: workers seen live, and instances launched here
            # and not listed yet (EC2's lag, or gone before ever being listed live).
            asked = (set(self._watched) | set(self._unlisted)) - self._gone
        listed = list(self._instances(ALL_STATES if first else LIVE_STATES))
        listed_ids = {str(i["InstanceId"]) for i in listed}
        missing = sorted(asked - listed_ids)
        answered_ids: set[str] = set()
        if missing:
            by_id = {"Name": "instance-id", "Values": missing}
            for instance in self._instances(ALL_STATES, by_id):
                state = instance.get("State", {}).get("Name")
                if state in LIVE_STATES or was_reclaimed(instance):
                    listed.append(instance)
                elif state in FINAL_STATES:  # ended otherwise: not a node, not asked again
                    answered_ids.add(str(instance["InstanceId"]))
        with self._lock:
            for instance in listed:
                if was_reclaimed(instance):
                    self._reclaimed[str(instance["InstanceId"])] = instance
            shown = {str(i["InstanceId"]) for i in listed}
            listed += [i for key, i in self._reclaimed.items() if key not in shown]
            for instance_id in answered_ids:
                self._unlisted.pop(instance_id, None)
            self._live = {  # id -> stoppable (not spot)
                str(i["InstanceId"]): i.get("InstanceLifecycle") != "spot"
                for i in listed
                if i.get("State", {}).get("Name") in LIVE_STATES
            }
            live_workers = {
                str(i["InstanceId"])
                for i in listed
                if i.get("State", {}).get("Name") in LIVE_STATES
                and tags_of(i).get(TAG_KIND) == NodeKind.WORKER.value
            }
            # Still watched: what is live, and what was missing without a final answer yet
            # (not listed at all, or shutting down without a reason given yet).
            unsettled = set(missing) - answered_ids - set(self._reclaimed)
            self._watched = live_workers | (unsettled & self._watched)
            listed_ids = {str(i["InstanceId"]) for i in listed}
            for launch in launches:
                if launch.instances is None:
                    continue  # never answered: `up` and `down` send it again
                if launch.instance_ids <= listed_ids:
                    launch_journal.forget(launch.path)  # listed now: no longer needed
                for made in launch.instances:
                    instance = launch_journal.restored(made, launch.request)
                    self._unlisted.setdefault(instance["InstanceId"], instance)
            for instance_id in listed_ids:
                self._unlisted.pop(instance_id, None)
            unlisted = [i for key, i in self._unlisted.items() if key not in self._gone]
            gone = set(self._gone)
        found: list[Node] = []
        for instance in listed + unlisted:
            node = to_node(instance, self.private, gone)
            if node is None:
                continue
            if instance.get("PrivateIpAddress"):
                self._private_ips[node.id] = str(instance["PrivateIpAddress"])
            found.append(node)
        return found

    def _send_unanswered(self) -> list[str]:
        """Send once more the launches sent from this machine whose answer never came
        (`launch_journal`): EC2 answers with what they made, which is written down. Returns the ids
        of the instances they made."""
        made: list[str] = []
        for launch in launch_journal.pending(self.cluster_name):
            if launch.instances is not None:
                continue
            again = functools.partial(self.clients.ec2_launch.run_instances, **launch.request)
            try:
                instances = retry_throttled(again)["Instances"]
            except boto_errors() as exc:
                if error_code(exc) and error_code(exc) not in UNSETTLED_CODES:
                    launch_journal.forget(launch.path)  # refused: the first one made nothing either
                    continue
                raise ProviderError(
                    f"cannot learn what a launch sent at {launch.when}, whose answer was "
                    f"lost, made: {error_message(exc)}; run the command again"
                ) from exc
            launch_journal.answered(launch.path, instances)
            made += [str(i["InstanceId"]) for i in instances]
        return made

    def zones(self, node_type: NodeType) -> tuple[str, ...]:
        context = self.contexts().get(node_type.name)
        return tuple(p.zone for p in context.placements) if context else ("",)

    # -- launching ----------------------------------------------------------------------
    def _create(self, launch: Launch) -> list[Node]:
        node_type, kind, count = launch.node_type, launch.kind, launch.count
        avoid_zones, request_id = launch.avoid_zones, launch.request_id
        all_tags = {
            **launch.tags,
            TAG_LAUNCH_CONFIG: launch_config_digest(node_type.node_config),
            "Name": f"launcher-{self.cluster_name}-{kind.value}",
        }
        # A repeated request: what the first made (as listed; a launch it made that is not
        # listed yet is answered again by EC2 for the same client token, below).
        created = [n for n in self._made_by(request_id) if n.node_type == node_type.name][:count]
        # Stopped nodes of the type are started again: workers the autoscaler stopped, and a
        # head (with its workers) stopped by the cluster's autostop.
        if len(created) < count and self.settings.cache_stopped_nodes:
            created += self._restart_stopped(node_type, count - len(created), all_tags, avoid_zones)
        context = self.contexts()[node_type.name]
        if kind is NodeKind.WORKER:
            context = dataclasses.replace(context, instance_profile_arn=None)
        tried: list[str] = []
        last = ""
        for placement in placements_to_try(context.placements, avoid_zones):
            # AWS may launch fewer than asked (MinCount is 1): ask again for the rest.
            while len(created) < count:
                try:
                    batch = self._run(
                        node_type,
                        count - len(created),
                        placement,
                        context,
                        all_tags,
                        _client_token(request_id, placement.zone, count - len(created)),
                    )
                except CapacityError as exc:
                    if exc.scope == "quota":  # no other zone lifts it: stop here
                        zones = [p.zone for p in context.placements]
                        raise CapacityError(
                            node_type.name, zones, str(exc), self._with_ips(created), "quota"
                        ) from exc
                    tried.append(placement.zone)
                    last = str(exc)
                    break
                if not batch:
                    break
                created += batch
        if len(created) < count:
            zones = tried or sorted(set(avoid_zones))
            detail = last or "every zone it may use is being avoided after recent failures"
            raise CapacityError(node_type.name, zones, detail, self._with_ips(created))
        return self._with_ips(created)

    def settle(self, timeout_s: float = LISTED_WAIT_S) -> None:
        """Return once DescribeInstances lists every instance this provider launched (EC2
        lists new instances a while after launching them), or after `timeout_s`: the
        autoscaler calls it as it stops, so that whoever stopped it (`down`) then finds them
        by listing. A launch itself returns with RunInstances' answer."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                wanted = sorted(set(self._unlisted) - self._gone)
            if not wanted:
                return
            try:
                by_id = {"Name": "instance-id", "Values": wanted}
                listed = {str(i["InstanceId"]) for i in self._instances(ALL_STATES, by_id)}
            except ProviderError:
                return  # listing is someone else's business now
            with self._lock:
                for instance_id in listed:
                    self._unlisted.pop(instance_id, None)
            if time.monotonic() > deadline:
                return
            time.sleep(LISTED_POLL_S)

    def _run(
        self,
        node_type: NodeType,
        count: int,
        placement: Placement,
        context: LaunchContext,
        tags: Mapping[str, str],
        client_token: str,
    ) -> list[Node]:
        """One RunInstances call in `placement`; CapacityError when AWS has no room there."""
        request = run_request(
            node_type.node_config,
            count,
            placement,
            context,
            tags,
            {TAG_CLUSTER: self.cluster_name},
            client_token=client_token,
        )
        # Written down until answered: if this command dies meanwhile, the next one learns
        # what the launch made by sending it again.
        record = None if self.on_head else launch_journal.record(self.cluster_name, request)
        for attempt in range(PROFILE_RETRIES + 1):
            try:
                reply = retry_throttled(lambda: self.clients.ec2_launch.run_instances(**request))
                break
            except boto_errors() as exc:
                if attempt < PROFILE_RETRIES and iam.is_profile_not_ready(exc):
                    iam.wait_between_profile_retries(attempt)
                    continue
                if error_code(exc):  # refused, so nothing was made
                    launch_journal.forget(record)
                if is_capacity(exc):
                    raise CapacityError(
                        node_type.name,
                        (placement.zone,),
                        error_message(exc),
                        scope=capacity_scope(exc),
                    ) from exc
                raise ProviderError(
                    f"{node_type.name}: launch in {placement.zone} ({placement.subnet_id}) "
                    f"refused: {error_message(exc)}"
                ) from exc
        launch_journal.answered(record, reply["Instances"])
        nodes = []
        for launched in reply["Instances"]:
            # RunInstances may answer before the tags are readable back: use ours.
            instance = {**launched, "Tags": aws_tags(tags)}
            node = to_node(instance, self.private, ())
            if node is not None:
                nodes.append(node)
                if instance.get("PrivateIpAddress"):
                    self._private_ips[node.id] = str(instance["PrivateIpAddress"])
                with self._lock:  # listed as a node until a listing shows it
                    self._unlisted[node.id] = instance
                    if node.kind is NodeKind.WORKER:
                        self._watched.add(node.id)
        return nodes

    def _restart_stopped(
        self,
        node_type: NodeType,
        count: int,
        tags: Mapping[str, str],
        avoid_zones: Collection[str],
    ) -> list[Node]:
        stopped = [
            i
            for i in self._instances(
                ("stopped",),
                {"Name": f"tag:{TAG_TYPE}", "Values": [node_type.name]},
                {"Name": f"tag:{TAG_KIND}", "Values": [tags[TAG_KIND]]},  # a head as a head
                {"Name": f"tag:{TAG_LAUNCH_CONFIG}", "Values": [tags[TAG_LAUNCH_CONFIG]]},
            )
            if i.get("Placement", {}).get("AvailabilityZone") not in avoid_zones
        ][:count]
        if not stopped:
            return []
        ids = [i["InstanceId"] for i in stopped]
        if any(TAG_AUTOSTOPPED in tags_of(i) for i in stopped):
            tags = {**tags, TAG_AUTOSTOPPED: ""}  # running again: no longer autostopped
        try:
            retry_throttled(lambda: self.clients.ec2_launch.start_instances(InstanceIds=ids))
            self._tag(ids, tags)
        except boto_errors() as exc:
            if is_capacity(exc):
                return []  # no room to start them here now: launch new ones instead
            raise ProviderError(f"cannot restart stopped workers: {error_message(exc)}") from exc
        nodes = []
        for instance in stopped:
            merged = {
                **instance,
                "Tags": aws_tags({**tags_of(instance), **tags}),
                "State": {"Name": "pending"},
            }
            node = to_node(merged, self.private, ())
            if node is not None:
                nodes.append(node)
        with self._lock:  # theirs again: listed and watched as any launched node
            self._gone.difference_update(ids)
            self._watched.update(n.id for n in nodes if n.kind is NodeKind.WORKER)
        return nodes

    def _with_ips(self, nodes: list[Node]) -> list[Node]:
        """Nodes reached by public address get one only once running: wait for it."""
        if self.private or not nodes:
            return nodes
        deadline = time.monotonic() + PUBLIC_IP_WAIT_S
        wanted = {n.id for n in nodes}
        while True:
            current = {n.id: n for n in self.nodes() if n.id in wanted}
            if all(n.ip for n in current.values()) and len(current) == len(wanted):
                return [current[n.id] for n in nodes]
            if time.monotonic() > deadline:
                missing = sorted(i for i in wanted if not (current.get(i) and current[i].ip))
                raise ProviderError(
                    f"instances {', '.join(missing)} have no public address after "
                    f"{PUBLIC_IP_WAIT_S:g} s; use a subnet that assigns public IPs, or "
                    "set provider.use_internal_ips: true when this machine is in the VPC"
                )
            time.sleep(2.0)

    def _made_by(self, request_id: str | None) -> list[Node]:
        if not request_id:
            return []
        launched = {"Name": f"tag:{TAG_LAUNCH_ID}", "Values": [request_id]}
        found = (to_node(i, self.private, ()) for i in self._instances(LIVE_STATES, launched))
        return [n for n in found if n is not None]

    # -- changing -----------------------------------------------------------------------
    def stopped_nodes(self) -> list[Node]:
        found = []
        for instance in self._instances(("stopping", "stopped")):
            node = to_node({**instance, "State": {"Name": "running"}}, self.private, ())
            if node is not None:
                found.append(dataclasses.replace(node, state=NodeState.STOPPED))
        return found

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        """Terminate instances (stopped ones too)."""
        self._remove(node_ids, stop=False)

    def stop_nodes(self, node_ids: Sequence[str]) -> None:
        """With cache_stopped_nodes, stop the instances (a later launch of their type and
        node_config starts them again); else terminate them."""
        self._remove(node_ids, stop=self.settings.cache_stopped_nodes)

    def _remove(self, node_ids: Sequence[str], *, stop: bool) -> None:
        ids = list(dict.fromkeys(node_ids))
        if not ids:
            return
        try:
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                if stop:
                    self._stop_or_terminate(batch)
                else:
                    self.clients.ec2.terminate_instances(InstanceIds=batch)
        except boto_errors() as exc:
            raise ProviderError(f"cannot terminate {', '.join(ids)}: {error_message(exc)}") from exc
        with self._lock:
            self._gone.update(ids)
            # Kept across restarts: a reclaimed worker answered is not PREEMPTED again when a
            # restarted autoscaler's first listing finds it (others are never listed again).
            reclaimed = [i for i in ids if i in self._reclaimed]
            if self.on_head and reclaimed:
                removed_journal.add(
                    removed_journal.removed_path(self.cluster_name), reclaimed, time.time()
                )
        if not stop:  # their host keys go with them (a stopped instance keeps its own)
            KnownHosts(known_hosts_path(self.cluster_name)).forget_nodes(set(ids))

    def _stop_or_terminate(self, batch: list[str]) -> None:
        """Stop the live on-demand instances of `batch` (kept for reuse), terminate the
        others (EC2 cannot stop a one-time spot instance, nor a stopped one). Which are live
        is known from the last listing, or for an instance launched here and not listed yet
        (EC2's lag) from RunInstances' answer; only the others are asked about, and a stop
        refused because a state changed since is decided again from a fresh answer."""
        with self._lock:
            known = {i: self._live[i] for i in batch if i in self._live}
            for i in batch:
                if i not in known and i in self._unlisted:
                    known[i] = self._unlisted[i].get("InstanceLifecycle") != "spot"
        unknown = [i for i in batch if i not in known]
        live = [i for i, stoppable in known.items() if stoppable]
        if unknown:
            live += self._live_among(unknown, LIVE_STATES)
        try:
            if live:
                self.clients.ec2.stop_instances(InstanceIds=live)
        except boto_errors() as exc:
            if error_code(exc) != "IncorrectInstanceState":
                raise
            # The listing was out of date, or one is still pending (not stoppable on EC2):
            # stop the running ones, terminate the rest.
            live = self._live_among(batch, ("running",))
            if live:
                self.clients.ec2.stop_instances(InstanceIds=live)
        gone = [i for i in batch if i not in live]
        if gone:
            self.clients.ec2.terminate_instances(InstanceIds=gone)

    def _live_among(self, ids: list[str], states: Sequence[str]) -> list[str]:
        """Which of `ids` are in `states` and can be stopped (not spot)."""
        by_id = {"Name": "instance-id", "Values": ids}
        return [
            str(i["InstanceId"])
            for i in self._instances(states, by_id)
            if i.get("InstanceLifecycle") != "spot"
        ]

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        try:
            self._tag([node_id], tags)
        except boto_errors() as exc:
            raise ProviderError(f"cannot tag {node_id}: {error_message(exc)}") from exc
        with self._lock:
            if node_id in self._unlisted:  # not listed yet: keep its tags as they now are
                instance = self._unlisted[node_id]
                merged = {**tags_of(instance), **tags}
                instance["Tags"] = aws_tags(merged)

    def _tag(self, ids: list[str], tags: Mapping[str, str]) -> None:
        self.clients.ec2.create_tags(Resources=ids, Tags=aws_tags(tags))

    # -- taking down --------------------------------------------------------------------
    def cleanup(self, purge: bool = False) -> list[str]:
        removed: list[str] = []
        lost = [i for i in self._send_unanswered() if i not in self._gone]
        if lost:
            self.terminate_nodes(lost)
            removed.append(f"{len(lost)} instance(s) of a launch whose answer was lost")
        stopped = [i["InstanceId"] for i in self._instances(("stopped", "stopping"))]
        if stopped:
            self.terminate_nodes(stopped)
            removed.append(f"{len(stopped)} stopped instance(s)")
        removed += self._cancel_spot_requests()
        left = [
            i["InstanceId"] for i in self._instances(("pending", "running", "stopping", "stopped"))
        ]
        if left:
            raise ProviderError(
                f"instances of cluster {self.cluster_name} still there after terminating: "
                f"{', '.join(left)}; run `launcher down` again"
            )
        if purge:
            removed += self._purge()
        return removed

    def _cancel_spot_requests(self) -> list[str]:
        try:
            requests = self.clients.ec2.describe_spot_instance_requests(
                Filters=[
                    {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_name]},
                    {"Name": "state", "Values": ["open", "active"]},
                ]
            )["SpotInstanceRequests"]
            ids = [r["SpotInstanceRequestId"] for r in requests]
            if ids:
                self.clients.ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=ids)
        except boto_errors() as exc:
            raise ProviderError(f"cannot cancel spot requests: {error_message(exc)}") from exc
        return [f"{len(ids)} spot request(s)"] if ids else []

    def _purge(self) -> list[str]:
        """Remove the shared bootstrap resources too (key pair, security group, IAM)."""
        self._wait_terminated()
        removed: list[str] = []
        try:
            for interface in self._own_interfaces():
                self.clients.ec2.delete_network_interface(NetworkInterfaceId=interface)
                removed.append(f"network interface {interface}")
        except boto_errors() as exc:
            message = error_message(exc)
            raise ProviderError(f"cannot remove network interfaces: {message}") from exc
        group = group_name(self.config)
        if group is not None:
            removed += network.delete_groups(self.clients, group, self.cluster_name)
        key_name = own_key_name(self.config)
        if key_name:
            removed += keys.delete_key_pair(self.clients, key_name)
        if "IamInstanceProfile" not in self.config.head_type.node_config:
            removed += iam.delete_head_profile(self.clients, self.cluster_name)
        return removed

    def _own_interfaces(self) -> list[str]:
        found = self.clients.ec2.describe_network_interfaces(
            Filters=[
                {"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster_name]},
                {"Name": "status", "Values": ["available"]},
            ]
        )["NetworkInterfaces"]
        return [str(i["NetworkInterfaceId"]) for i in found]

    def _wait_terminated(self) -> None:
        deadline = time.monotonic() + TERMINATE_WAIT_S
        while any(True for _ in self._instances(("shutting-down",))):
            if time.monotonic() > deadline:
                raise ProviderError(
                    "instances still shutting down; run `launcher down --purge` again later"
                )
            time.sleep(3.0)


def _client_token(request_id: str | None, zone: str, count: int) -> str:
    """RunInstances' idempotency token: fresh for a request without an id; for one with an
    id, the same for a repeat of the same launch (zone and count), so EC2 answers a
    repeated request with the instances the first made."""
    if not request_id:
        return uuid.uuid4().hex
    return hashlib.sha256(f"{request_id}/{zone}/{count}".encode()).hexdigest()[:64]
