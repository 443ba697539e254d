"""The in-memory provider (launcher/testing): the seam's invariants, kept in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import CapacityError, ProviderError
from launcher.providers.base import (
    TAG_CLUSTER,
    TAG_KIND,
    TAG_LAUNCH_ID,
    TAG_TYPE,
    NodeKind,
    NodeState,
    made_by,
)
from launcher.testing import Call, MemoryProvider

CONFIG = """\
cluster_name: mem
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  cpu: {node_config: {}, resources: {CPU: 4}, max_workers: 10}
head_node_type: head
"""


@pytest.fixture
def config() -> ClusterConfig:
    return parse_config(CONFIG, "mem.yaml")


def _zoned(config: ClusterConfig, capacity: dict[tuple[str, str], int]) -> MemoryProvider:
    return MemoryProvider(config, capacity, zones={"cpu": ("a", "b", "c")})


def test_nodes_fill_the_zones_in_order_and_carry_the_cluster_tags(config: ClusterConfig) -> None:
    cloud = _zoned(config, {("cpu", "a"): 1, ("cpu", "b"): 5})
    made = cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 3, {"mine": "yes"})
    assert [n.zone for n in made] == ["a", "b", "b"]
    assert cloud.nodes() == made and len({n.id for n in made}) == 3
    node = made[0]
    assert node.state is NodeState.PENDING and node.kind is NodeKind.WORKER
    assert node.tags[TAG_CLUSTER] == "mem" and node.tags[TAG_KIND] == "worker"
    assert node.tags[TAG_TYPE] == "cpu" and node.tags["mine"] == "yes"
    assert cloud.zones(config.node_types["cpu"]) == ("a", "b", "c")
    assert cloud.zones(config.node_types["head"]) == ("",)


def test_capacity_runs_out_only_after_every_zone_not_avoided(config: ClusterConfig) -> None:
    cloud = _zoned(config, {("cpu", "a"): 1, ("cpu", "b"): 1, ("cpu", "c"): 1})
    cpu = config.node_types["cpu"]
    with pytest.raises(CapacityError) as caught:
        cloud.create_nodes(cpu, NodeKind.WORKER, 3, {}, avoid_zones={"b"})
    assert caught.value.zones == ("a", "c") and caught.value.node_type == "cpu"
    assert [n.zone for n in caught.value.created] == ["a", "c"]
    assert len(cloud.nodes()) == 2  # what fit is kept


def test_a_zone_holds_its_capacity_at_once_and_a_termination_frees_room(
    config: ClusterConfig,
) -> None:
    cloud = MemoryProvider(config, {("cpu", ""): 1})
    cpu = config.node_types["cpu"]
    (first,) = cloud.create_nodes(cpu, NodeKind.WORKER, 1, {})
    with pytest.raises(CapacityError):
        cloud.create_nodes(cpu, NodeKind.WORKER, 1, {})
    with pytest.raises(CapacityError):  # a pair the capacity does not name holds none
        cloud.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})
    cloud.terminate_nodes([first.id])
    assert len(cloud.create_nodes(cpu, NodeKind.WORKER, 1, {})) == 1


def test_no_capacity_given_means_no_limit(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config)
    assert len(cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 50, {})) == 50


def test_a_repeated_request_makes_only_what_the_first_did_not(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config, {("cpu", ""): 2})
    cpu = config.node_types["cpu"]
    with pytest.raises(CapacityError):
        cloud.create_nodes(cpu, NodeKind.WORKER, 3, {}, request_id="r1")
    cloud.capacity = {("cpu", ""): 5}
    again = cloud.create_nodes(cpu, NodeKind.WORKER, 3, {}, request_id="r1")
    assert len(again) == 3 and len(cloud.nodes()) == 3
    assert all(n.tags[TAG_LAUNCH_ID] == "r1" for n in again)
    assert cloud.create_nodes(cpu, NodeKind.WORKER, 3, {}, request_id="r1") == again
    assert made_by(cloud.nodes(), "r1") == again


def test_tags_merge_and_removing_a_gone_node_is_no_error(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config)
    (node,) = cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {"a": "1"})
    cloud.set_tags(node.id, {"b": "2"})
    (tagged,) = cloud.nodes()
    assert tagged.tags["a"] == "1" and tagged.tags["b"] == "2"
    cloud.terminate_nodes([node.id])
    cloud.terminate_nodes([node.id, "never-was"])
    assert cloud.nodes() == []
    cloud.set_tags(node.id, {"c": "3"})  # gone: ignored
    assert cloud.nodes() == []


def test_stopped_nodes_are_kept_and_resumed_before_new_ones(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config, keeps_stopped=True)
    cpu = config.node_types["cpu"]
    first, second = cloud.create_nodes(cpu, NodeKind.WORKER, 2, {})
    cloud.stop_nodes([first.id])
    assert cloud.traits.keeps_stopped_nodes
    assert [n.id for n in cloud.nodes()] == [second.id]
    assert [(n.id, n.state) for n in cloud.stopped_nodes()] == [(first.id, NodeState.STOPPED)]
    resumed, new = cloud.create_nodes(cpu, NodeKind.WORKER, 2, {"again": "yes"})
    assert resumed.id == first.id and new.id not in {first.id, second.id}
    assert resumed.state is NodeState.PENDING and resumed.tags["again"] == "yes"
    assert cloud.stopped_nodes() == []


def test_without_keeping_stopped_nodes_a_stop_terminates(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config)
    (node,) = cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {})
    cloud.stop_nodes([node.id])
    assert cloud.nodes() == [] and cloud.stopped_nodes() == []
    assert not cloud.traits.keeps_stopped_nodes


def test_failures_are_used_up_in_turn_or_last_until_cleared(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config)
    cloud.fail("nodes", ZeroDivisionError("first"), times=1)
    cloud.fail("nodes", ProviderError("second"), times=2)
    with pytest.raises(ZeroDivisionError):
        cloud.nodes()
    for _ in range(2):
        with pytest.raises(ProviderError, match="second"):
            cloud.nodes()
    assert cloud.nodes() == []
    cloud.fail("create_nodes", ProviderError("down"))
    for _ in range(3):
        with pytest.raises(ProviderError, match="down"):
            cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {})
    assert cloud.nodes() == []  # a failed call makes nothing
    cloud.clear_failures()
    assert len(cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {})) == 1


def test_every_call_is_recorded_failed_ones_too(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config)
    cloud.fail("create_nodes", ProviderError("down"), times=1)
    with pytest.raises(ProviderError):
        cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 2, {}, avoid_zones={"x"})
    cloud.nodes()
    cloud.terminate_nodes(["n9"])
    assert cloud.calls == [
        Call("create_nodes", "cpu", 2, frozenset({"x"})),
        Call("nodes"),
        Call("terminate_nodes", node_ids=("n9",)),
    ]
    assert cloud.ids_of("terminate_nodes", "nodes") == ["n9"]  # the ids the calls named
    assert cloud.held() == [] and len(cloud.calls) == 3  # looking records nothing


def test_the_world_changes_nodes_through_update(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config)
    (node,) = cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {})
    cloud.update(node.id, state=NodeState.PREEMPTED, ip="10.0.0.1")
    (seen,) = cloud.nodes()
    assert seen.state is NodeState.PREEMPTED and seen.ip == "10.0.0.1"


def test_with_a_lag_listings_show_a_change_only_after_that_many_calls(
    config: ClusterConfig,
) -> None:
    cpu = config.node_types["cpu"]
    cloud = MemoryProvider(config, lag=2)
    (first,) = cloud.create_nodes(cpu, NodeKind.WORKER, 1, {})
    assert cloud.nodes() == [] and cloud.nodes() == []  # made, not listed yet
    assert cloud.nodes() == [first] and cloud.held() == [first]
    cloud.update(first.id, state=NodeState.PREEMPTED)
    assert cloud.nodes() == [first]  # as it was
    cloud.terminate_nodes([first.id])  # meanwhile: shows with the update
    assert cloud.nodes() == [first] and cloud.held() == []
    assert cloud.nodes() == []
    cloud.terminate_nodes([first.id])  # nothing changes: nothing to lag behind
    (second,) = cloud.create_nodes(cpu, NodeKind.WORKER, 1, {})
    cloud.lag = 0  # the lag already begun runs out; later changes show at once
    assert cloud.nodes() == [] and cloud.nodes() == []
    cloud.set_tags(second.id, {"k": "v"})
    (seen,) = cloud.nodes()
    assert seen.tags["k"] == "v" and len(cloud.calls_of("nodes")) == 9


def test_bootstrap_is_idempotent_and_cleanup_leaves_nothing(config: ClusterConfig) -> None:
    cloud = MemoryProvider(config, keeps_stopped=True)
    assert cloud.bootstrap() == ["in-memory cluster mem"]
    assert cloud.bootstrap() == []
    (node,) = cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {})
    cloud.stop_nodes([node.id])
    assert cloud.cleanup(purge=True) == ["1 stopped nodes", "in-memory cluster mem"]
    assert cloud.cleanup(purge=True) == [] and cloud.stopped_nodes() == []
    cloud.settle()


def test_in_memory_nodes_run_no_commands(config: ClusterConfig, tmp_path: Path) -> None:
    cloud = MemoryProvider(config, frees_capacity=True)
    assert cloud.traits.terminating_frees_capacity and not cloud.traits.keeps_stopped_nodes
    (node,) = cloud.create_nodes(config.node_types["cpu"], NodeKind.WORKER, 1, {})
    with pytest.raises(ProviderError, match="run no commands"):
        cloud.access.command_runner(node, tmp_path / "log")
