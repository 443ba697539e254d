"""Workers kept across a lost head: the recovering run's supervisor marks those it reached
as its own to restart until a deadline (`TAG_REJOIN_BY`), starts only their Ray against the
new head as soon as its Ray is up, and the new head's autoscaler leaves them alone until
then, taking up any the supervisor did not finish."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from pathlib import Path

import pytest

from launcher.autoscaler.decide.choice import setups_of
from launcher.config.loader import parse_config
from launcher.events import Event
from launcher.providers.access import NoAccess
from launcher.providers.base import (
    TAG_REJOIN_BY,
    TAG_SETUP_HASH,
    TAG_STATUS,
    Node,
    NodeKind,
    NodeState,
    NodeStatus,
)
from launcher.providers.localhost.provider import LocalhostProvider
from launcher.runners.base import CommandRunner
from launcher.runs import recovery
from launcher.testing import MemoryProvider

CONFIG = """
cluster_name: kept
max_workers: 4
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 0}, max_workers: 0}
  worker: {node_config: {}, resources: {CPU: 2}, min_workers: 0, max_workers: 4}
head_node_type: head
setup_commands: ['echo set up >> ~/setup-ran']
worker_start_ray_commands: ['echo "$RAY_HEAD_IP" > ~/ray-started']
"""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))


def _worker(node_id: str, status: NodeStatus, rejoin_by: float | None = None) -> Node:
    tags = {TAG_STATUS: status.value}
    if rejoin_by is not None:
        tags[TAG_REJOIN_BY] = str(int(rejoin_by))
    return Node(node_id, NodeKind.WORKER, "worker", "127.0.0.9", NodeState.RUNNING, tags)


def test_the_autoscaler_leaves_a_kept_worker_to_its_supervisor_until_the_deadline() -> None:
    now = 1_000_000.0
    listed = [
        _worker("w-new", NodeStatus.UNINITIALIZED),  # launched by the autoscaler
        _worker("w-kept", NodeStatus.UNINITIALIZED, now + 300),  # the supervisor's
        _worker("w-restarting", NodeStatus.STARTING_RAY, now + 300),  # the supervisor at it
        _worker("w-late", NodeStatus.UNINITIALIZED, now - 1),  # not restarted in time
        _worker("w-halfway", NodeStatus.STARTING_RAY, now - 1),  # its supervisor died
        _worker("w-setting-up", NodeStatus.SETTING_UP),  # another autoscaler's own setup
        _worker("w-done", NodeStatus.UP_TO_DATE, now - 1),
    ]
    chosen = setups_of(listed, set(), False, now)
    assert [(n.id, files_only) for n, files_only in chosen] == [
        ("w-new", False),
        ("w-late", False),
        ("w-halfway", False),
    ]
    # Busy here (its setup running on this autoscaler's thread): not started twice.
    assert [n.id for n, _ in setups_of(listed, {"w-halfway"}, False, now)] == ["w-new", "w-late"]


class _Reaching(NoAccess):
    """Kills a worker's Ray at once, except `unreached`'s, which never answers in time."""

    unreached = ""
    hang = threading.Event()

    def stop_node_ray(self, node: Node, runner: CommandRunner, force: bool = False) -> str | None:
        if node.id == self.unreached:
            self.hang.wait(60)
        return None


@pytest.mark.parametrize("reaches_head_as_listed", [True, False])
def test_retiring_a_head_makes_the_workers_it_reached_the_supervisors_until_a_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reaches_head_as_listed: bool
) -> None:
    config = parse_config(CONFIG, str(tmp_path / "cluster.yaml"))
    provider = MemoryProvider(config)
    provider.traits = dataclasses.replace(
        provider.traits, node_env_has_cluster_head_ip=reaches_head_as_listed
    )
    access = _Reaching(config)
    provider.access = access
    monkeypatch.setattr(recovery, "node_runner", lambda *args: object())
    monkeypatch.setattr(recovery, "KILL_WAIT_S", 0.5)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    workers = provider.create_nodes(
        config.node_types["worker"], NodeKind.WORKER, 2, {TAG_STATUS: NodeStatus.UP_TO_DATE}
    )
    for node in workers:
        provider.update(node.id, state=NodeState.RUNNING, ip="127.0.0.9")
    access.unreached = workers[1].id
    access.hang = threading.Event()
    before = time.time()
    try:
        kept = recovery.retire_head(config, provider, head.id, lambda _: None)
    finally:
        access.hang.set()
    assert sorted(kept) == sorted(n.id for n in workers)
    listed = {n.id: n for n in provider.nodes()}
    assert head.id not in listed
    reached, unreached = listed[workers[0].id], listed[workers[1].id]
    assert reached.status is NodeStatus.UNINITIALIZED
    assert unreached.status is NodeStatus.UNINITIALIZED
    assert unreached.rejoin_by == 0  # the new head's autoscaler sets it up
    if reaches_head_as_listed:
        assert (
            before + recovery.REJOIN_S - 1 <= reached.rejoin_by <= time.time() + recovery.REJOIN_S
        )
    else:  # this machine would tell it a wrong head address: the autoscaler's to set up
        assert reached.rejoin_by == 0


def test_the_supervisor_starts_only_ray_on_its_kept_workers_against_the_new_head() -> None:
    config = parse_config(CONFIG, "inline")
    provider = LocalhostProvider(config)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    soon, past = time.time() + 300, time.time() - 1

    def worker(tags: dict[str, str]) -> Node:
        kind = config.node_types["worker"]
        base = {TAG_STATUS: NodeStatus.UNINITIALIZED.value, TAG_SETUP_HASH: "set-up-before"}
        return provider.create_nodes(kind, NodeKind.WORKER, 1, {**base, **tags})[0]

    mine = worker({TAG_REJOIN_BY: str(int(soon))})
    halfway = worker({TAG_REJOIN_BY: str(int(soon)), TAG_STATUS: NodeStatus.STARTING_RAY.value})
    late = worker({TAG_REJOIN_BY: str(int(past))})
    autoscalers = worker({})
    events: list[Event] = []
    started = recovery.restart_kept(config, provider, head, events.append)
    assert sorted(started) == sorted([mine.id, halfway.id])

    def home(node: Node) -> Path:
        return provider.nodes_dir / node.id / "home"

    listed = {n.id: n for n in provider.nodes()}
    for node in (mine, halfway):
        assert (home(node) / "ray-started").read_text().strip() == head.ip
        assert not (home(node) / "setup-ran").exists()  # Ray only: its setup is on it
        assert listed[node.id].status is NodeStatus.UP_TO_DATE
        assert listed[node.id].rejoin_by == 0  # no longer the supervisor's
        assert listed[node.id].tags[TAG_SETUP_HASH] == "set-up-before"
    for node in (late, autoscalers):  # the autoscaler's to set up
        assert not (home(node) / "ray-started").exists()
        assert listed[node.id].status is NodeStatus.UNINITIALIZED
    provider.terminate_nodes(list(listed))


def test_a_worker_whose_ray_is_being_started_is_not_started_twice() -> None:
    """A recovery tried again (its `up` failed after the head's Ray was up) while the first
    try's start of a kept worker still runs leaves that worker to it."""
    config = parse_config(CONFIG, "inline")
    provider = LocalhostProvider(config)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    tags = {TAG_STATUS: NodeStatus.UNINITIALIZED.value, TAG_REJOIN_BY: str(int(time.time() + 300))}
    busy, free = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 2, tags)
    restarts = recovery.Restarts()
    assert restarts.claim([busy.id]) == {busy.id}  # the earlier try's start
    assert recovery.restart_kept(config, provider, head, lambda _: None, restarts) == [free.id]
    assert not (provider.nodes_dir / busy.id / "home" / "ray-started").exists()
    restarts.release(busy.id)
    assert recovery.restart_kept(config, provider, head, lambda _: None, restarts) == [busy.id]
    provider.terminate_nodes([head.id, busy.id, free.id])


def test_a_first_try_beside_the_heads_start_waits_for_its_gcs_and_fails_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first try (as the new head's start-ray commands begin) starts a kept worker's Ray
    only once the head's GCS takes its connection, probed from the worker; one that could
    not is neither tagged failed nor said to have failed, and is left to the try once the
    head is up, which starts it (or, failing, tags it failed and says why)."""
    config = parse_config(CONFIG, "inline")
    provider = LocalhostProvider(config)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    tags = {TAG_STATUS: NodeStatus.UNINITIALIZED.value, TAG_REJOIN_BY: str(int(time.time() + 300))}
    (kept,) = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 1, tags)
    started = provider.nodes_dir / kept.id / "home" / "ray-started"
    monkeypatch.setattr(recovery, "GCS_WAIT_S", 0.3)
    host, _, port = provider.access.ray_address(head).rpartition(":")
    events: list[Event] = []
    try:
        # No GCS there yet: nothing is started, tagged or said.
        assert recovery.restart_kept(config, provider, head, events.append, final=False) == []
        assert not started.exists() and events == []
        (listed,) = [n for n in provider.nodes() if n.id == kept.id]
        assert listed.status is NodeStatus.UNINITIALIZED and listed.rejoin_by > time.time()
        # The GCS takes connections: started.
        with socket.create_server((host, int(port))):
            assert recovery.restart_kept(config, provider, head, events.append, final=False) == [
                kept.id
            ]
        assert started.read_text().strip() == head.ip
        (listed,) = [n for n in provider.nodes() if n.id == kept.id]
        assert listed.status is NodeStatus.UP_TO_DATE
    finally:
        provider.terminate_nodes([head.id, kept.id])


def test_a_failed_first_try_is_left_to_the_final_one(monkeypatch: pytest.MonkeyPatch) -> None:
    text = CONFIG.replace("""['echo "$RAY_HEAD_IP" > ~/ray-started']""", "['exit 3']")
    config = parse_config(text, "inline")
    provider = LocalhostProvider(config)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    tags = {TAG_STATUS: NodeStatus.UNINITIALIZED.value, TAG_REJOIN_BY: str(int(time.time() + 300))}
    (kept,) = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 1, tags)
    host, _, port = provider.access.ray_address(head).rpartition(":")
    events: list[Event] = []
    try:
        with socket.create_server((host, int(port))):
            assert recovery.restart_kept(config, provider, head, events.append, final=False) == []
        assert not [e for e in events if getattr(e, "failed", False)]
        assert not [e for e in events if getattr(e, "level", "") == "warning"]
        (listed,) = [n for n in provider.nodes() if n.id == kept.id]
        assert listed.status is not NodeStatus.FAILED and listed.rejoin_by > time.time()
        assert recovery.restart_kept(config, provider, head, events.append) == []
        (listed,) = [n for n in provider.nodes() if n.id == kept.id]
        assert listed.status is NodeStatus.FAILED
        assert [e for e in events if getattr(e, "level", "") == "warning"]
    finally:
        provider.terminate_nodes([head.id, kept.id])
