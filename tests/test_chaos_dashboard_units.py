"""kill-random-node and dashboard, without Ray: which worker is picked, what is reported
only once seen done, and which port the dashboard is on."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.chaos import GONE_WAIT_S, Kill, candidates, kill_random_node
from launcher.cluster.dashboard import (
    RAY_DASHBOARD_PORT,
    NoDashboardError,
    dashboard_port,
    forwarded_dashboard,
)
from launcher.cluster.head import HeadSession
from launcher.config.loader import parse_config
from launcher.errors import LauncherError, NoClusterError, UsageError
from launcher.providers.access import NoAccess
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.simulation import SimulatesReclaims
from launcher.runners.base import CommandRunner
from launcher.runners.forward import PortOpener
from launcher.testing import MemoryProvider

CONFIG = parse_config(
    "cluster_name: chaos\nprovider: {type: localhost}\n"
    "available_node_types:\n"
    "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
    "  w: {node_config: {}, resources: {CPU: 1}, max_workers: 3}\n"
    "head_node_type: head\n",
    "chaos.yaml",
)


def _node(
    node_id: str, kind: NodeKind = NodeKind.WORKER, state: NodeState = NodeState.RUNNING
) -> Node:
    return Node(node_id, kind, "w" if kind is NodeKind.WORKER else "head", "127.0.0.9", state)


class _Provider(MemoryProvider):
    """The in-memory provider with a running head (unless not `head`) and a worker in state
    `worker` (None: none), at 127.0.0.9. `lag`: the listings a termination takes to show;
    with `reclaims`, it gives notice (recorded) and takes a node back as a cloud would
    (listed preempted)."""

    def __init__(
        self,
        head: bool = True,
        worker: NodeState | None = NodeState.RUNNING,
        *,
        lag: int = 0,
        reclaims: bool = False,
    ) -> None:
        super().__init__(CONFIG)
        self.reclaims = reclaims
        self.noticed: list[tuple[str, float]] = []
        types = CONFIG.node_types
        if head:
            (made,) = self.create_nodes(types["head"], NodeKind.HEAD, 1, {})
            self.update(made.id, ip="127.0.0.9", state=NodeState.RUNNING)
        self.worker_id = ""
        if worker is not None:
            (made,) = self.create_nodes(types["w"], NodeKind.WORKER, 1, {})
            self.worker_id = self.update(made.id, ip="127.0.0.9", state=worker).id
        self.lag = lag

    def notify_reclaim(self, node: Node, at: float) -> bool:
        if not self.reclaims:
            return False
        self.noticed.append((node.id, at))
        return True

    def reclaim_node(self, node: Node) -> bool:
        if not self.reclaims:
            return False
        self.update(node.id, state=NodeState.PREEMPTED)
        return True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _kill(provider: _Provider, clock: _Clock | None = None) -> Any:
    clock = clock or _Clock()
    return kill_random_node(
        CONFIG,
        hard=True,
        rng=random.Random(1),
        provider=provider,
        clock=clock,
        sleep=clock.sleep,
    )


def test_only_running_workers_are_candidates() -> None:
    nodes = [
        _node("h", NodeKind.HEAD),
        _node("dead", state=NodeState.DEAD),
        _node("gone", state=NodeState.PREEMPTED),
        _node("ok"),
    ]
    assert [n.id for n in candidates(nodes)] == ["ok"]


def test_terminated_is_said_only_once_the_node_is_no_longer_listed() -> None:
    provider = _Provider(lag=3)
    result = _kill(provider)
    assert result.how is Kill.TERMINATED and result.node.id == provider.worker_id
    assert provider.ids_of("terminate_nodes") == [provider.worker_id]
    assert len(provider.calls_of("nodes")) == 1 + 4  # the pick, then until it was gone


def test_a_node_still_listed_after_the_wait_is_an_error_not_a_success() -> None:
    provider = _Provider(lag=10**6)
    with pytest.raises(LauncherError, match=f"still listed .* after {GONE_WAIT_S:g} s"):
        _kill(provider)


def test_a_provider_that_can_reclaim_reports_the_node_preempted() -> None:
    provider = _Provider(reclaims=True)
    assert isinstance(provider, SimulatesReclaims)
    result = _kill(provider)
    assert result.how is Kill.RECLAIMED and provider.ids_of("terminate_nodes") == []


def test_no_head_is_no_cluster_and_no_worker_is_said_plainly() -> None:
    with pytest.raises(NoClusterError, match="is not running"):
        _kill(_Provider(head=False))
    with pytest.raises(LauncherError, match="has no running worker to kill"):
        _kill(_Provider(worker=NodeState.DEAD))


@pytest.mark.parametrize(
    ("commands", "env", "port"),
    [
        (["ray start --head --port=6379"], {}, RAY_DASHBOARD_PORT),
        (["ray stop", "ray start --head --dashboard-port 9000"], {}, 9000),
        (["ray start --head --dashboard-port=$P"], {"P": "9100"}, 9100),
        (["ray start --head --dashboard-port=${P}"], {"P": "9101"}, 9101),
        (["ray start --head --include-dashboard=false --dashboard-port=9000"], {}, None),
        (["ray start --head --include-dashboard False"], {}, None),
        (["ray start --head --include-dashboard=true"], {}, RAY_DASHBOARD_PORT),
    ],
)
def test_the_dashboard_port_is_read_from_the_head_start_command(
    commands: list[str], env: Mapping[str, str], port: int | None
) -> None:
    assert dashboard_port(commands, env) == port


def test_a_dashboard_port_that_is_not_a_number_asks_for_remote_port() -> None:
    with pytest.raises(UsageError, match="--remote-port"):
        dashboard_port(["ray start --head --dashboard-port=$UNSET"], {})


def test_a_cluster_without_a_dashboard_is_refused_before_anything_is_forwarded(
    tmp_path: Path,
) -> None:
    config = parse_config(
        "cluster_name: nodash\nprovider: {type: localhost}\n"
        "head_start_ray_commands: [ray start --head --include-dashboard=false]\n",
        "nodash.yaml",
    )

    class _NoForwarding(NoAccess):
        def port_opener(self, node: Node, runner: CommandRunner) -> PortOpener:
            raise AssertionError("nothing must be forwarded")

    provider = MemoryProvider(config)
    provider.access = _NoForwarding(config)
    session = HeadSession(config, provider, _node("h", NodeKind.HEAD), None, {}, None)  # type: ignore[arg-type]
    with (
        pytest.raises(NoDashboardError, match="runs Ray without a dashboard"),
        forwarded_dashboard(session, 8265, None),
    ):
        pass


def test_a_notice_is_given_then_the_node_is_reclaimed_when_it_runs_out() -> None:
    provider = _Provider(reclaims=True)
    clock, told = _Clock(), []
    result = kill_random_node(
        CONFIG,
        hard=True,
        notice_s=30,
        on_notice=lambda node, at: told.append((node.id, at, clock.now)),
        provider=provider,
        clock=clock,
        sleep=clock.sleep,
    )
    assert result.how is Kill.RECLAIMED
    ((node_id, at, told_at),) = told
    assert node_id == provider.worker_id and provider.noticed == [(provider.worker_id, at)]
    assert told_at == 0.0 and clock.now >= 30  # told first, taken after the notice


def test_a_notice_needs_hard_and_a_provider_that_can_give_one() -> None:
    with pytest.raises(UsageError, match="needs --hard"):
        kill_random_node(CONFIG, hard=False, notice_s=5, provider=_Provider(False, None))
    cannot = _Provider()
    with pytest.raises(UsageError, match="cannot be given a reclaim notice"):
        kill_random_node(CONFIG, hard=True, notice_s=5, provider=cannot)
    assert cannot.ids_of("terminate_nodes") == []  # nothing was done to it
