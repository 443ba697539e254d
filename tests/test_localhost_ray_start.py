"""When localhost nodes may run `ray start` side by side: Ray names a node's sockets and log
files by counting those already in its session directory, so two starts into one Ray temp
dir race; nodes with a temp dir of their own (every worker, with the provider's defaults)
start together, nodes that share one start one at a time, and so do two clusters only when
they share one."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.config.loader import parse_config
from launcher.providers.base import Node, NodeKind
from launcher.providers.localhost.provider import LocalhostProvider
from launcher.providers.localhost.spec import node_temp_dir, ray_temp_dir

TYPES = (
    "available_node_types:\n"
    "  head: {node_config: {}, resources: {CPU: 0}, max_workers: 0}\n"
    "  worker: {node_config: {}, resources: {CPU: 1}, min_workers: 0, max_workers: 2}\n"
    "head_node_type: head\n"
)
SHARED = "worker_start_ray_commands: ['ray start --address=$RAY_HEAD_IP:$LAUNCHER_RAY_PORT']\n"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))


def _cluster(name: str, extra: str = "") -> tuple[LocalhostProvider, Node, list[Node]]:
    text = f"cluster_name: {name}\nmax_workers: 2\nprovider: {{type: localhost}}\n{TYPES}{extra}"
    config = parse_config(text, "inline")
    provider = LocalhostProvider(config)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    workers = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 2, {})
    return provider, head, workers


class Holder:
    """A guard entered on a thread of its own (`held` is set once it is), left on `leave`."""

    def __init__(self, guard: contextlib.AbstractContextManager[None]) -> None:
        self.held, self._leave = threading.Event(), threading.Event()

        def hold() -> None:
            with guard:
                self.held.set()
                self._leave.wait(120)

        self._thread = threading.Thread(target=hold, daemon=True)
        self._thread.start()

    def leave(self) -> None:
        self._leave.set()
        self._thread.join(120)


@contextlib.contextmanager
def _held_elsewhere(guard: contextlib.AbstractContextManager[None]) -> Iterator[threading.Event]:
    holder = Holder(guard)
    try:
        yield holder.held
    finally:
        holder.leave()


def test_each_worker_has_its_own_ray_temp_dir_inside_the_clusters() -> None:
    provider, head, (one, two) = _cluster("own-dirs")
    env_one = provider.access.node_env(one, head)
    env_two = provider.access.node_env(two, head)
    assert env_one["LAUNCHER_NODE_TEMP_DIR"] == node_temp_dir("own-dirs", one.id)
    assert env_one["LAUNCHER_NODE_TEMP_DIR"] != env_two["LAUNCHER_NODE_TEMP_DIR"]
    assert env_one["LAUNCHER_NODE_TEMP_DIR"].startswith(ray_temp_dir("own-dirs") + "/")
    # What Ray puts under it stays within a Unix socket path's 107 bytes.
    sockets = f"{env_one['LAUNCHER_NODE_TEMP_DIR']}/session_2026-12-06_00-51-29_186950_76901/"
    assert len(sockets + "sockets/plasma_store") < 107
    assert any(
        "--temp-dir=$LAUNCHER_NODE_TEMP_DIR" in c for c in provider.config.worker_start_ray_commands
    )


def test_workers_with_their_own_temp_dir_start_side_by_side() -> None:
    provider, head, (one, two) = _cluster("side-by-side")
    with (
        _held_elsewhere(provider.access.ray_start_guard(head)) as head_held,
        _held_elsewhere(provider.access.ray_start_guard(one)) as one_held,
        _held_elsewhere(provider.access.ray_start_guard(two)) as two_held,
    ):
        assert head_held.wait(60) and one_held.wait(60) and two_held.wait(60)


def test_nodes_sharing_a_temp_dir_start_one_at_a_time() -> None:
    provider, head, (one, _two) = _cluster("one-at-a-time", SHARED)
    first = Holder(provider.access.ray_start_guard(head))
    assert first.held.wait(60)
    then = Holder(provider.access.ray_start_guard(one))
    assert not then.held.wait(1.0)  # waits for the head's start
    first.leave()
    assert then.held.wait(60)  # and starts once it is done
    then.leave()


def test_two_clusters_start_side_by_side_unless_they_share_rays_default_temp_dir() -> None:
    first_provider, first, _ = _cluster("first")
    second_provider, second, _ = _cluster("second")
    with (
        _held_elsewhere(first_provider.access.ray_start_guard(first)) as first_held,
        _held_elsewhere(second_provider.access.ray_start_guard(second)) as second_held,
    ):
        assert first_held.wait(60) and second_held.wait(60)
    default = "head_start_ray_commands: ['ray start --head']\n" + SHARED
    a, a_head, _ = _cluster("default-a", default)
    b, b_head, _ = _cluster("default-b", default)
    first = Holder(a.access.ray_start_guard(a_head))
    assert first.held.wait(60)
    then = Holder(b.access.ray_start_guard(b_head))
    assert not then.held.wait(1.0)  # both in Ray's default temp dir: one at a time
    first.leave()
    assert then.held.wait(60)
    then.leave()
