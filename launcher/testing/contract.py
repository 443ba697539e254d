"""The provider contract as a kit: the tests every provider passes, importable from the
package (as fsspec ships its abstract tests).

A provider's contract test is one file holding its harness, the fixture of its backend
and one class:

    @pytest.fixture(scope="module")
    def harness() -> Iterator[Harness]:
        with MyCloudFake() as fake:
            yield MyCloudHarness(fake)

    class TestMyCloud(ProviderContract):
        provider_type = "mycloud"
        lacks = (Lack(RUNS_COMMANDS, "the fake's instances are API objects, not machines"),)

The class inherits every test below; each checks one promise of the instance seam
(`launcher/providers/base.py`) or of node access (`launcher/providers/access.py`), against
the provider the harness makes, never special-casing one. A capability the provider lacks
is declared in `lacks` (a `Lack` with the reason), and the tests that need it are skipped saying so;
nothing is skipped silently. Every seam method is exercised: bootstrap, nodes,
create_nodes, terminate_nodes, stop_nodes, stopped_nodes, set_tags, zones, settle,
cleanup, the declared traits and the access object.

Tests share the harness's backend (one per class), so each test uses cluster names of its
own (the `cluster` fixture).
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import pytest

from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import CapacityError
from launcher.providers.access import NodeAccess
from launcher.providers.base import (
    TAG_CLUSTER,
    TAG_KIND,
    TAG_LAUNCH_ID,
    TAG_STATUS,
    TAG_TYPE,
    Node,
    NodeKind,
    NodeProvider,
    NodeStatus,
    ProviderTraits,
)
from launcher.providers.factory import make_provider
from launcher.providers.registry import SPECS

LISTING_WAIT_S = 60.0  # listing is eventually consistent with creation

# Cluster names that collide once lowercased, stripped of punctuation or cut to a length cap
# (and one named as another's changed name: `ML-prod` becomes `ml-prod-00696b36` where a
# rule forces a change). Every name a provider derives from them must stay apart.
LONG = "a" * 60
COLLIDING = (
    ("ml.prod", "ml_prod", "ML-prod", "ml-prod", "ml--prod", "Ml.Prod", "ml-prod-00696b36"),
    (LONG + "xyz", LONG + "xyw", LONG + "XYZ", LONG),
)

# Capabilities a provider (or its harness's backend) may lack, declared in `lacks`.
RUNS_COMMANDS = "runs commands"  # its nodes are machines (or processes) that run commands
SEVERAL_ZONES = "several zones"  # its harness's worker type has more than one zone
REGISTERED = "a registration"  # `provider.type` names it in launcher/providers/registry.py


@dataclass(frozen=True)
class Lack:
    """A capability the provider (or its backend in the test) lacks, and why."""

    capability: str
    why: str


@dataclass(frozen=True)
class Types:
    """The node type names of a harness's configs: a head type, a worker type, and a type
    whose capacity `Harness.exhaust` makes run out."""

    head: str
    worker: str


class Harness(Protocol):
    """How the contract reaches one provider against a backend the test owns."""

    types: Types

    def config(self, cluster: str) -> ClusterConfig:
        """The config of a cluster named `cluster` on the backend."""
        ...

    def provider(self, cluster: str) -> NodeProvider:
        """A provider for cluster `cluster` as the user's machine has it, bootstrapped."""
        ...

    def exhaust(self, provider: NodeProvider) -> str:
        """Make capacity run out for a worker type of `provider`'s cluster; returns it."""
        ...

    def restore(self) -> None:
        """Undo `exhaust`."""
        ...

    def leftovers(self, cluster: str) -> list[str]:
        """What the backend still holds of `cluster` (empty once it is wholly gone)."""
        ...


class ConfigHarness:
    """A harness whose providers are made from `config` as commands make them (the
    factory), bootstrapped; subclasses give `types`, `config`, `exhaust`, `leftovers`, and
    `restore` where `exhaust` changed the backend."""

    types: Types

    def config(self, cluster: str) -> ClusterConfig:
        raise NotImplementedError

    def provider(self, cluster: str) -> NodeProvider:
        provider = make_provider(self.config(cluster))
        provider.bootstrap()
        return provider

    def exhaust(self, provider: NodeProvider) -> str:
        raise NotImplementedError

    def restore(self) -> None:
        return None

    def leftovers(self, cluster: str) -> list[str]:
        raise NotImplementedError


def eventually(provider: NodeProvider, check: Callable[[list[Node]], bool]) -> list[Node]:
    """The nodes, once `check` holds of them (listing catches up with changes), or as
    listed when LISTING_WAIT_S has passed."""
    deadline = time.monotonic() + LISTING_WAIT_S
    while True:
        nodes = provider.nodes()
        if check(nodes) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.2)


def ids(nodes: list[Node]) -> set[str]:
    return {n.id for n in nodes}


class ProviderContract:
    """Subclass with `provider_type`, `lacks` and a `harness` fixture (see the module)."""

    provider_type: ClassVar[str] = ""
    # A config of the provider's users would write (the repo's example), for the checks of
    # what `up` names after the cluster; its cluster_name is replaced.
    example: ClassVar[Path | None] = None
    # What the provider (or its backend here) lacks, each with why.
    lacks: ClassVar[tuple[Lack, ...]] = ()

    def need(self, capability: str) -> None:
        for lack in self.lacks:
            if lack.capability == capability:
                pytest.skip(f"{self.provider_type} declares it lacks {capability}: {lack.why}")

    @pytest.fixture
    def cluster(self, request: pytest.FixtureRequest) -> str:
        """A cluster name of the test's own (the backend is shared by the class's tests)."""
        digest = hashlib.sha256(request.node.originalname.encode()).hexdigest()[:8]
        return f"c-{digest}"

    # -- registration ---------------------------------------------------------------------
    def test_the_provider_type_is_registered_and_built_by_its_spec(
        self, harness: Harness, cluster: str
    ) -> None:
        self.need(REGISTERED)
        spec = SPECS.get(self.provider_type)
        assert spec is not None, f"{self.provider_type} is not in launcher/providers/registry.py"
        assert spec.implementation, "the spec names no implementation"
        provider = harness.provider(cluster)
        module, _, name = spec.implementation.partition(":")
        assert (type(provider).__module__, type(provider).__name__) == (module, name)
        assert provider.config.provider.type == self.provider_type
        assert isinstance(provider.traits, ProviderTraits)
        assert isinstance(provider.access, NodeAccess)

    def example_config(self, cluster: str) -> ClusterConfig:
        if self.example is None:
            pytest.fail(f"{type(self).__name__} names no example config")
        text = re.sub(r"(?m)^cluster_name:.*$", "", self.example.read_text())
        return parse_config(f"cluster_name: {cluster}\n{text}", str(self.example), Overrides())

    @pytest.mark.parametrize("names", COLLIDING, ids=["punctuation-and-case", "length"])
    def test_names_derived_from_colliding_cluster_names_stay_apart(
        self, names: tuple[str, ...]
    ) -> None:
        self.need(REGISTERED)
        spec = SPECS[self.provider_type]
        by_kind: dict[str, dict[str, str]] = {}
        for cluster in names:
            config = self.example_config(cluster)
            derived = spec.derived_names(config)
            assert derived == spec.derived_names(config)  # a pure function of the config
            for kind, name in derived.items():
                assert name and name == name.strip() and len(name) <= 255, (kind, name)
                by_kind.setdefault(kind, {})[cluster] = name
        # Every provider creates something named after the cluster (a role, an account, an
        # object, a directory): a spec that derives no name has not been asked.
        assert by_kind, f"{self.provider_type}: derived_names is empty"
        for kind, given in by_kind.items():
            assert set(given) == set(names), f"{kind} is derived for some names only: {given}"
            clashes = {n for n in given.values() if list(given.values()).count(n) > 1}
            assert not clashes, f"{self.provider_type}: {kind} shared by clusters: {given}"
            # Names the cloud compares without case must differ without case too.
            if any(word in kind.lower() for word in ("role", "iam", "group", "profile")):
                folded = [n.lower() for n in given.values()]
                assert len(set(folded)) == len(folded), (kind, given)

    def test_plan_prints_the_names_up_creates(self) -> None:
        self.need(REGISTERED)
        spec = SPECS[self.provider_type]
        for cluster in ("ml.prod", LONG + "xyz"):
            config = self.example_config(cluster)
            shown = " ".join(f"{r.name} {r.detail}" for r in spec.bootstrap_plan(config))
            for kind, name in spec.derived_names(config).items():
                assert name in shown, (
                    f"{self.provider_type}: plan does not show the {kind} {name!r}"
                )

    # -- bootstrap ------------------------------------------------------------------------
    def test_bootstrap_again_creates_nothing(self, harness: Harness, cluster: str) -> None:
        harness.provider(cluster)  # bootstrapped once
        assert harness.provider(cluster).bootstrap() == []

    # -- create_nodes, nodes ----------------------------------------------------------------
    def test_created_nodes_are_listed_with_kind_type_and_cluster(
        self, harness: Harness, cluster: str
    ) -> None:
        provider = harness.provider(cluster)
        types = provider.config.node_types
        head_type = types[harness.types.head]
        (head,) = provider.create_nodes(head_type, NodeKind.HEAD, 1, {"mine": "a"})
        workers = provider.create_nodes(types[harness.types.worker], NodeKind.WORKER, 2, {})
        made = {head.id, *ids(workers)}
        assert len(made) == 3
        listed = {n.id: n for n in eventually(provider, lambda ns: made <= ids(ns))}
        assert made <= set(listed)
        for node in listed.values():
            assert node.tags[TAG_CLUSTER] == cluster
        assert listed[head.id].kind is NodeKind.HEAD
        assert listed[head.id].node_type == harness.types.head
        assert listed[head.id].tags[TAG_KIND] == "head" and listed[head.id].tags["mine"] == "a"
        assert listed[head.id].tags[TAG_STATUS] == NodeStatus.UNINITIALIZED
        for worker in workers:
            assert listed[worker.id].kind is NodeKind.WORKER
            assert listed[worker.id].tags[TAG_TYPE] == harness.types.worker
        found = provider.head()
        assert found is not None and found.id == head.id
        assert ids(provider.workers()) == ids(workers)
        provider.terminate_nodes(list(made))

    def test_nodes_never_shows_another_clusters_nodes(self, harness: Harness, cluster: str) -> None:
        mine, theirs = harness.provider(cluster), harness.provider(f"{cluster}-b")
        worker = harness.types.worker
        made = mine.create_nodes(mine.config.node_types[worker], NodeKind.WORKER, 1, {})
        other = theirs.create_nodes(theirs.config.node_types[worker], NodeKind.WORKER, 1, {})
        listed = eventually(mine, lambda ns: ids(made) <= ids(ns))
        assert ids(made) <= ids(listed)
        assert all(n.tags[TAG_CLUSTER] == cluster for n in listed)
        assert len(listed) == 1
        their_list = eventually(theirs, lambda ns: ids(other) <= ids(ns))
        assert all(n.tags[TAG_CLUSTER] == f"{cluster}-b" for n in their_list)
        assert len(their_list) == 1
        mine.terminate_nodes(list(ids(made)))
        theirs.terminate_nodes(list(ids(other)))

    def test_a_repeated_request_makes_nothing_more(self, harness: Harness, cluster: str) -> None:
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

    # -- terminate_nodes --------------------------------------------------------------------
    def test_removing_a_node_that_is_gone_is_a_no_op(self, harness: Harness, cluster: str) -> None:
        provider = harness.provider(cluster)
        worker = provider.config.node_types[harness.types.worker]
        (node,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
        eventually(provider, lambda ns: node.id in ids(ns))
        provider.terminate_nodes([node.id])
        assert node.id not in ids(eventually(provider, lambda ns: node.id not in ids(ns)))
        provider.terminate_nodes([node.id])
        provider.stop_nodes([node.id])
        provider.terminate_nodes([])
        provider.set_tags(node.id, {"late": "1"})  # a gone node's tags: ignored

    # -- zones, capacity --------------------------------------------------------------------
    def test_capacity_runs_out_after_every_zone_was_tried(
        self, harness: Harness, cluster: str
    ) -> None:
        provider = harness.provider(cluster)
        try:
            scarce = provider.config.node_types[harness.exhaust(provider)]
            with pytest.raises(CapacityError) as raised:
                provider.create_nodes(scarce, NodeKind.WORKER, 1, {})
            assert raised.value.node_type == scarce.name
            assert set(raised.value.zones) == set(provider.zones(scarce))
        finally:
            harness.restore()
            provider.terminate_nodes([n.id for n in provider.nodes()])

    def test_zones_asked_to_be_avoided_are_not_tried(self, harness: Harness, cluster: str) -> None:
        provider = harness.provider(cluster)
        try:
            scarce = provider.config.node_types[harness.exhaust(provider)]
            zones = provider.zones(scarce)
            assert zones and all(isinstance(z, str) for z in zones)
            if len(zones) < 2:
                self.need(SEVERAL_ZONES)
                pytest.fail(f"{self.provider_type} lists one zone but does not declare that")
            with pytest.raises(CapacityError) as avoided:
                provider.create_nodes(scarce, NodeKind.WORKER, 1, {}, avoid_zones=zones[:1])
            assert set(avoided.value.zones) == set(zones[1:])
        finally:
            harness.restore()
            provider.terminate_nodes([n.id for n in provider.nodes()])

    # -- set_tags ---------------------------------------------------------------------------
    def test_tags_merge(self, harness: Harness, cluster: str) -> None:
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

    # -- stop_nodes, stopped_nodes ----------------------------------------------------------
    def test_stopped_nodes_are_kept_and_resumed_as_the_traits_say(
        self, harness: Harness, cluster: str
    ) -> None:
        provider = harness.provider(cluster)
        worker = provider.config.node_types[harness.types.worker]
        (node,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
        eventually(provider, lambda ns: node.id in ids(ns))
        provider.stop_nodes([node.id])
        assert node.id not in ids(eventually(provider, lambda ns: node.id not in ids(ns)))
        kept = ids(provider.stopped_nodes())
        assert (node.id in kept) is provider.traits.keeps_stopped_nodes
        (again,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
        if provider.traits.keeps_stopped_nodes:
            assert again.id == node.id  # resumed, not made anew
        else:
            assert not provider.stopped_nodes()
        provider.terminate_nodes([again.id])
        assert again.id not in ids(eventually(provider, lambda ns: again.id not in ids(ns)))

    # -- settle, cleanup ----------------------------------------------------------------------
    def test_settle_returns_with_what_was_made_listed(self, harness: Harness, cluster: str) -> None:
        provider = harness.provider(cluster)
        worker = provider.config.node_types[harness.types.worker]
        made = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
        provider.settle(LISTING_WAIT_S)
        other = harness.provider(cluster)  # as another process lists them
        assert ids(made) <= ids(eventually(other, lambda ns: ids(made) <= ids(ns)))
        provider.terminate_nodes(list(ids(made)))

    def test_cleanup_with_purge_leaves_nothing(self, harness: Harness, cluster: str) -> None:
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

    # -- node access ------------------------------------------------------------------------
    def test_access_gives_each_node_its_environment(self, harness: Harness, cluster: str) -> None:
        provider = harness.provider(cluster)
        types = provider.config.node_types
        (head,) = provider.create_nodes(types[harness.types.head], NodeKind.HEAD, 1, {})
        try:
            env = provider.access.node_env(head, head)
            assert env["LAUNCHER_CLUSTER"] == cluster and env["LAUNCHER_NODE_ID"] == head.id
            assert env["RAY_NODE_TYPE_NAME"] == harness.types.head
            assert provider.access.gcs_port() > 0
            assert provider.access.head_python()
        finally:
            provider.terminate_nodes([head.id])

    def test_a_worker_is_told_the_head_address_the_head_tells_it_where_the_traits_say(
        self, harness: Harness, cluster: str
    ) -> None:
        """`traits.node_env_has_cluster_head_ip`: a worker set up from the user's machine
        (a recovering run's supervisor starts kept workers' Ray so) is told the head's
        address as the head's own autoscaler tells it."""
        provider = harness.provider(cluster)
        if not provider.traits.node_env_has_cluster_head_ip:
            return  # the autoscaler on the head sets every worker up
        types = provider.config.node_types
        (head,) = provider.create_nodes(types[harness.types.head], NodeKind.HEAD, 1, {})
        (worker,) = provider.create_nodes(types[harness.types.worker], NodeKind.WORKER, 1, {})
        made = {head.id, worker.id}

        def addressed(nodes: list[Node]) -> bool:
            return made <= {n.id for n in nodes if n.ip}

        try:
            told = []
            for side in (provider, make_provider(provider.config, on_head=True)):
                listed = {n.id: n for n in eventually(side, addressed)}
                env = side.access.node_env(listed[worker.id], listed[head.id])
                told.append(env.get("RAY_HEAD_IP"))
            here, on_head = told
            assert here and here == on_head
        finally:
            provider.terminate_nodes(sorted(made))

    def test_access_runs_a_command_on_a_node(
        self, harness: Harness, cluster: str, tmp_path: Path
    ) -> None:
        self.need(RUNS_COMMANDS)
        provider = harness.provider(cluster)
        worker = provider.config.node_types[harness.types.worker]
        (node,) = provider.create_nodes(worker, NodeKind.WORKER, 1, {})
        try:
            (listed,) = [
                n for n in eventually(provider, lambda ns: node.id in ids(ns)) if n.id == node.id
            ]
            runner = provider.access.command_runner(listed, tmp_path / "node.log")
            result = runner.run("echo contract-$LAUNCHER_NODE_ID", {"LAUNCHER_NODE_ID": node.id})
            assert result.ok, result.output_tail
            assert f"contract-{node.id}" in result.output_tail
        finally:
            provider.terminate_nodes([node.id])
