"""What `launcher/providers/base.py` promises, checked for every provider alike.

Each test runs against every harness in tests/contract/harnesses.py: the localhost provider,
on-prem machines (isolated sshd hosts), AWS (moto's EC2/IAM server). A provider passes by
keeping the promises in base.py's docstring, not by being special-cased here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from launcher.errors import CapacityError
from launcher.providers.base import (
    TAG_CLUSTER,
    TAG_KIND,
    TAG_LAUNCH_ID,
    TAG_STATUS,
    TAG_TYPE,
    Node,
    NodeKind,
    NodeProvider,
)
from tests.contract.harnesses import Harness

LISTING_WAIT_S = 60.0  # listing is eventually consistent with creation


def eventually(provider: NodeProvider, check: Callable[[list[Node]], bool]) -> list[Node]:
    """The nodes, once `check` holds of them (listing catches up with changes)."""
    deadline = time.monotonic() + LISTING_WAIT_S
    while True:
        nodes = provider.nodes()
        if check(nodes) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.2)


def ids(nodes: list[Node]) -> set[str]:
    return {n.id for n in nodes}


def test_created_nodes_are_listed_with_kind_type_and_cluster(
    harness: Harness, cluster: str
) -> None:
    provider = harness.provider(cluster)
    types = provider.config.node_types
    (head,) = provider.create_nodes(types[harness.types.head], NodeKind.HEAD, 1, {"mine": "a"})
    workers = provider.create_nodes(types[harness.types.worker], NodeKind.WORKER, 2, {})
    made = {head.id, *ids(workers)}
    assert len(made) == 3
    listed = {n.id: n for n in eventually(provider, lambda ns: made <= ids(ns))}
    assert made <= set(listed)
    for node in listed.values():
        assert node.tags[TAG_CLUSTER] == cluster
    assert listed[head.id].kind is NodeKind.HEAD and listed[head.id].node_type == harness.types.head
    assert listed[head.id].tags[TAG_KIND] == "head" and listed[head.id].tags["mine"] == "a"
    assert TAG_STATUS in listed[head.id].tags
    for worker in workers:
        assert listed[worker.id].kind is NodeKind.WORKER
        assert listed[worker.id].tags[TAG_TYPE] == harness.types.worker
    assert provider.head() is not None and provider.head().id == head.id  # type: ignore[union-attr]
    provider.terminate_nodes(list(made))


def test_nodes_never_shows_another_clusters_nodes(harness: Harness, cluster: str) -> None:
    mine, theirs = harness.provider(cluster), harness.provider(f"{cluster}-b")
    worker = harness.types.worker
    made = mine.create_nodes(mine.config.node_types[worker], NodeKind.WORKER, 1, {})
    other = theirs.create_nodes(theirs.config.node_types[worker], NodeKind.WORKER, 1, {})
    listed = eventually(mine, lambda ns: ids(made) <= ids(ns))
    assert ids(made) <= ids(listed)
    assert all(n.tags[TAG_CLUSTER] == cluster for n in listed)
    assert len(listed) == 1
    their_list = eventually(theirs, lambda ns: ids(other) <= ids(ns))
    assert all(n.tags[TAG_CLUSTER] == f"{cluster}-b" for n in their_list) and len(their_list) == 1
    mine.terminate_nodes(list(ids(made)))
    theirs.terminate_nodes(list(ids(other)))


def test_a_repeated_request_makes_nothing_more(harness: Harness, cluster: str) -> None:
    provider = harness.provider(cluster)
    worker = provider.config.node_types[harness.types.worker]
    request = uuid.uuid4().hex
    first = provider.create_nodes(worker, NodeKind.WORKER, 1, {}, request_id=request)
    eventually(provider, lambda ns: ids(first) <= ids(ns))
    again = provider.create_nodes(worker, NodeKind.WORKER, 1, {}, request_id=request)
    assert ids(again) == ids(first)
    listed = eventually(provider, lambda ns: ids(first) <= ids(ns))
    assert ids(listed) == ids(first)
    assert {n.tags[TAG_LAUNCH_ID] for n in listed} == {request}
    other = provider.create_nodes(worker, NodeKind.WORKER, 1, {}, request_id=uuid.uuid4().hex)
    assert not ids(other) & ids(first)  # another request is another launch
    provider.terminate_nodes(list(ids(first) | ids(other)))


def test_removing_a_node_that_is_gone_is_a_no_op(harness: Harness, cluster: str) -> None:
    provider = harness.provider(cluster)
    worker = provider.config.node_types[harness.types.worker]
    (node,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
    eventually(provider, lambda ns: node.id in ids(ns))
    provider.terminate_nodes([node.id])
    assert node.id not in ids(eventually(provider, lambda ns: node.id not in ids(ns)))
    provider.terminate_nodes([node.id])
    provider.stop_nodes([node.id])
    provider.terminate_nodes([])


def test_capacity_runs_out_after_every_zone_was_tried(harness: Harness, cluster: str) -> None:
    provider = harness.provider(cluster)
    try:
        scarce = provider.config.node_types[harness.exhaust(provider)]
        with pytest.raises(CapacityError) as raised:
            provider.create_nodes(scarce, NodeKind.WORKER, 1, {})
        assert raised.value.node_type == scarce.name
        assert set(raised.value.zones) == set(provider.zones(scarce))
        zones = provider.zones(scarce)
        if len(zones) > 1:  # zones asked to be avoided are not tried
            with pytest.raises(CapacityError) as avoided:
                provider.create_nodes(scarce, NodeKind.WORKER, 1, {}, avoid_zones=zones[:1])
            assert set(avoided.value.zones) == set(zones[1:])
    finally:
        harness.restore()
        provider.terminate_nodes([n.id for n in provider.nodes()])


def test_tags_merge(harness: Harness, cluster: str) -> None:
    provider = harness.provider(cluster)
    worker = provider.config.node_types[harness.types.worker]
    (node,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {"a": "1"})
    provider.set_tags(node.id, {"b": "2"})
    provider.set_tags(node.id, {"a": "3"})

    def merged(nodes: list[Node]) -> bool:
        tags = next((n.tags for n in nodes if n.id == node.id), {})
        return tags.get("a") == "3" and tags.get("b") == "2"

    listed = {n.id: n for n in eventually(provider, merged)}
    tags = listed[node.id].tags
    assert (tags["a"], tags["b"]) == ("3", "2")
    assert tags[TAG_CLUSTER] == cluster and tags[TAG_TYPE] == harness.types.worker
    provider.terminate_nodes([node.id])


def test_stopped_nodes_are_resumed_where_the_provider_keeps_them(
    harness: Harness, cluster: str
) -> None:
    provider = harness.provider(cluster)
    worker = provider.config.node_types[harness.types.worker]
    (node,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
    eventually(provider, lambda ns: node.id in ids(ns))
    provider.stop_nodes([node.id])
    assert node.id not in ids(eventually(provider, lambda ns: node.id not in ids(ns)))
    (again,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
    if provider.traits.keeps_stopped_nodes:
        assert again.id == node.id  # resumed, not made anew
    provider.terminate_nodes([again.id])
    assert again.id not in ids(eventually(provider, lambda ns: again.id not in ids(ns)))


def test_cleanup_with_purge_leaves_nothing(harness: Harness, cluster: str) -> None:
    provider = harness.provider(cluster)
    types = provider.config.node_types
    (head,) = provider.create_nodes(types[harness.types.head], NodeKind.HEAD, 1, {})
    (worker,) = provider.create_nodes(types[harness.types.worker], NodeKind.WORKER, 1, {})
    provider.stop_nodes([worker.id])  # kept stopped, where the provider keeps nodes
    provider.terminate_nodes([head.id])
    eventually(provider, lambda ns: not ns)
    provider.cleanup(purge=True)
    assert harness.leftovers(cluster) == []
    assert provider.nodes() == []
