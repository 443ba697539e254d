"""The on-prem provider (`type: local`, as in Ray): the user lists machines, the cluster uses
them over SSH.

"Creating" a node claims a listed machine (a record on the head, see `records`), and
"terminating" one stops Ray on it (with the Ray its start commands use, and checks that none
is left) and frees the machine. The head is
`provider.head_ip`, reached from the laptop at `external_head_ip` when given; workers are
picked from `provider.worker_ips` in the order listed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.config.model import ClusterConfig
from launcher.errors import CapacityError, ProviderError
from launcher.paths import node_log
from launcher.providers.base import (
    Launch,
    Node,
    NodeKind,
    NodeProvider,
    NodeState,
    ProviderTraits,
    made_by,
)
from launcher.providers.onprem.claims import (
    FileRecords,
    Record,
    Records,
    RemoteRecords,
)
from launcher.providers.onprem.spec import OnPremProviderConfig, records_dir
from launcher.providers.ssh_access import SSHAccess, SshNodeAccess
from launcher.runners.base import wait_until_ready
from launcher.runners.container import container_for, stop_command
from launcher.runners.ray_node import STOP_TIMEOUT_S, stop_problem
from launcher.runners.ssh import SSHRunner


class OnPremAccess(SshNodeAccess):
    """The listed machines over SSH, known by their addresses (the head's external one from
    the user's machine), sharing the provider's connections."""

    # As Ray: each machine advertises what Ray detects on it.
    overrides_ray_resources = False

    def container_mounts(self, node: Node) -> tuple[str, ...]:
        # The autoscaler in the head's container reads and writes the records of machines
        # in use, which the laptop reaches on the host; without a key in the config it
        # reaches the workers as the head machine does, with the keys in its ~/.ssh.
        if node.kind is not NodeKind.HEAD:
            return ()
        keys = () if self.config.auth.ssh_private_key else ("~/.ssh:ro",)
        return (records_dir(self.cluster_name), *keys)


class OnPremProvider(NodeProvider):
    traits = ProviderTraits(
        installs_launcher_on_head=True,
        terminating_frees_capacity=True,  # the listed machines are the whole pool
        logs_in_over_ssh=True,
        replaces_lost_head=False,  # the head is provider.head_ip
    )

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        super().__init__(config, on_head)
        provider = config.provider
        assert isinstance(provider, OnPremProviderConfig)
        if provider.coordinator_address:
            raise ProviderError(
                "provider.coordinator_address (Ray's coordinator server) is not supported; "
                "list the machines in provider.head_ip and provider.worker_ips"
            )
        if not provider.head_ip:
            raise ProviderError("provider.head_ip is not set; name the head machine")
        self.head_ip = provider.head_ip
        self.worker_ips = provider.worker_ips
        # The laptop reaches the head at its external address; the head reaches itself and
        # the workers at their listed ones.
        self.head_address = (
            provider.external_head_ip if provider.external_head_ip and not on_head else self.head_ip
        )
        self.ssh = SSHAccess(self.cluster_name, config.auth)
        self.access = OnPremAccess(
            config,
            config.auth.ssh_private_key,
            address=lambda node: self._address(node.id),
            ssh=self.ssh,
            by_node=False,
        )
        self.records: Records = (
            FileRecords(self.cluster_name)
            if on_head
            else RemoteRecords(self.cluster_name, self._head_runner(), self.head_address)
        )

    def _address(self, ip: str) -> str:
        return self.head_address if ip == self.head_ip else ip

    def _head_runner(self) -> SSHRunner:
        return self.ssh.runner(self.head_address, node_log(self.cluster_name, self.head_ip))

    # -- NodeProvider -------------------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        if self.on_head:
            return []
        problem = wait_until_ready(self._head_runner(), wait_s)
        if problem is not None:
            raise ProviderError(
                f"the head machine {self.head_address} did not answer over SSH within "
                f"{wait_s:g} s (last error: {problem}); check that it is on and that "
                "provider.head_ip and auth are right"
            )
        return []

    def nodes(self) -> list[Node]:
        return [self._node(record) for record in self.records.all()]

    def _create(self, launch: Launch) -> list[Node]:
        node_type, kind, count = launch.node_type, launch.kind, launch.count
        request_id = launch.request_id
        candidates = [self.head_ip] if kind is NodeKind.HEAD else list(self.worker_ips)
        earlier = made_by(self.nodes(), request_id)
        created = [n for n in earlier if n.node_type == node_type.name][:count]
        for ip in candidates:
            if len(created) == count:
                break
            record: Record = {
                "ip": ip,
                "kind": kind.value,
                "node_type": node_type.name,
                "created_at": time.time(),
                "tags": dict(launch.tags),
            }
            if self.records.claim(record):
                created.append(self._node(record))
        if len(created) < count:
            raise CapacityError(
                node_type.name,
                ("",),
                f"every machine in provider.worker_ips is in use ({len(candidates)} listed); "
                f"{len(created)} of {count} claimed",
                created,
            )
        return created

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        """Stop Ray on each machine (in its container, which is removed) and free it once
        no Ray process is left there. A machine whose Ray could not be stopped, or (from
        the user's machine) that does not answer, stays claimed and is named in the
        ProviderError raised after all were tried; the autoscaler frees a machine that does
        not answer (it is off: no Ray runs there)."""
        known = {record["ip"]: record for record in self.records.all()}
        problems = []
        for ip in node_ids:
            if ip not in known:
                continue
            record = known[ip]
            head = record["kind"] == NodeKind.HEAD.value
            runner = self.ssh.runner(self._address(ip), node_log(self.cluster_name, ip))
            unreachable = runner.check_ready()
            if unreachable is not None and not self.on_head:
                problems.append(f"{ip} does not answer ({unreachable})")
                continue
            if unreachable is None:
                container = container_for(self.config, record["node_type"], head=head)
                paths = self.access.ray_paths(head=head)
                result = runner.run(stop_command(container, paths), timeout=STOP_TIMEOUT_S)
                problem = stop_problem(result)
                if problem is not None:
                    problems.append(f"{ip}: {problem}")
                    continue
            self.records.remove(ip)
        if problems:
            raise ProviderError(
                "could not stop Ray on " + "; ".join(problems) + ". Those machines stay in "
                "the cluster: stop Ray there (`ray stop --force` with the Ray your start "
                "commands use) or bring them back, and run this again"
            )

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        record = self.records.get(node_id)
        if record is not None:
            record["tags"] = {**record.get("tags", {}), **tags}
            self.records.write(record)

    def cleanup(self, purge: bool = False) -> list[str]:
        if self.records.remove_all():
            return [f"the record of machines in use on {self.head_address}"]
        return []

    def _node(self, record: Mapping[str, Any]) -> Node:
        return Node(
            id=record["ip"],
            kind=NodeKind(record["kind"]),
            node_type=record["node_type"],
            ip=record["ip"],
            state=NodeState.RUNNING,
            tags=dict(record.get("tags", {})),
            created_at=float(record.get("created_at", 0)),
        )
