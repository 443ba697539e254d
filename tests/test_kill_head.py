"""`kill-random-node --head [--hard]`: the head taken away, as a cloud would, without a real
Ray cluster: the choice and what is reported against the in-memory provider, and on the
localhost provider every process of the head killed (stand-ins for Ray, the autoscaler and
drivers, found by the cluster key and the head's node id) while other nodes' and clusters'
live on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from launcher.cli import node_commands
from launcher.cluster.chaos import Kill, KillResult, kill_random_node
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, UsageError
from launcher.providers.access import NoAccess
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.localhost.processes import is_alive
from launcher.providers.localhost.provider import LocalhostProvider
from launcher.providers.simulation import SimulatesReclaims
from launcher.runners.base import CommandRunner
from launcher.testing import MemoryProvider
from tests.conftest import run_cli


def _config(name: str, head_config: str = "{}") -> ClusterConfig:
    return parse_config(
        f"cluster_name: {name}\nprovider: {{type: localhost}}\n"
        "available_node_types:\n"
        f"  head: {{node_config: {head_config}, resources: {{CPU: 1}}, max_workers: 0}}\n"
        "  w: {node_config: {simulated_spot: true}, resources: {CPU: 1}, max_workers: 3}\n"
        "head_node_type: head\n",
        f"{name}.yaml",
    )


CONFIG = _config("khead")


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))


# -- the choice and the report, against the in-memory provider ----------------------------


class _RayStops(NoAccess):
    """Node access whose nodes run nothing, but whose Ray can be stopped (recorded);
    `stuck`: what it cannot stop."""

    def __init__(self, config: ClusterConfig, stuck: str | None) -> None:
        super().__init__(config)
        self.stuck = stuck
        self.stopped: list[str] = []

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        return cast(CommandRunner, object())  # stop_node_ray below runs nothing

    def stop_node_ray(self, node: Node, runner: CommandRunner, force: bool = False) -> str | None:
        self.stopped.append(node.id)
        return self.stuck


class _Provider(MemoryProvider):
    """The in-memory provider with a running head and worker at 127.0.0.9 (the head in
    `head_state`), whose Ray `access` stops (recorded); with `reclaims`, it takes a node
    back as a cloud would (listed preempted). `lag`: the listings a termination or a
    reclaim takes to show."""

    def __init__(
        self,
        head_state: NodeState = NodeState.RUNNING,
        *,
        reclaims: bool = False,
        lag: int = 0,
        stuck: str | None = None,
    ) -> None:
        super().__init__(CONFIG)
        self.access = self.ray = _RayStops(CONFIG, stuck)
        self.reclaims = reclaims
        self.reclaimed: list[str] = []
        types = CONFIG.node_types
        (worker,) = self.create_nodes(types["w"], NodeKind.WORKER, 1, {})
        (head,) = self.create_nodes(types["head"], NodeKind.HEAD, 1, {})
        self.update(worker.id, ip="127.0.0.9", state=NodeState.RUNNING)
        self.head_id = self.update(head.id, ip="127.0.0.9", state=head_state).id
        self.lag = lag

    def notify_reclaim(self, node: Node, at: float) -> bool:
        raise AssertionError("a head is given no notice")

    def reclaim_node(self, node: Node) -> bool:
        if self.reclaims:
            self.reclaimed.append(node.id)
            self.update(node.id, state=NodeState.PREEMPTED)
        return self.reclaims


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _kill_head(provider: _Provider, *, hard: bool) -> KillResult:
    clock = _Clock()
    return kill_random_node(
        CONFIG,
        hard=hard,
        head=True,
        rng=random.Random(1),
        provider=provider,
        clock=clock,
        sleep=clock.sleep,
    )


def test_without_hard_the_heads_ray_is_stopped_and_its_machine_stays() -> None:
    provider = _Provider()
    result = _kill_head(provider, hard=False)
    assert (result.node.id, result.how) == (provider.head_id, Kill.RAY_STOPPED)
    assert provider.ray.stopped == [provider.head_id]
    assert provider.ids_of("terminate_nodes") == [] and provider.reclaimed == []


def test_ray_left_on_the_head_is_an_error_naming_the_head() -> None:
    provider = _Provider(stuck="1 process(es) of the head still run: pid 7")
    with pytest.raises(
        LauncherError, match=f"could not stop Ray on head {provider.head_id}: 1 process"
    ):
        _kill_head(provider, hard=False)


def test_hard_reclaims_the_head_where_the_provider_can_once_it_is_listed_preempted() -> None:
    provider = _Provider(reclaims=True, lag=2)
    assert isinstance(provider, SimulatesReclaims)
    result = _kill_head(provider, hard=True)
    assert (result.node.id, result.how) == (provider.head_id, Kill.RECLAIMED)
    assert provider.reclaimed == [provider.head_id] and provider.ids_of("terminate_nodes") == []
    assert len(provider.calls_of("nodes")) == 1 + 3  # the pick, then until it was seen preempted


def test_hard_terminates_the_head_elsewhere_once_it_is_unlisted() -> None:
    provider = _Provider(lag=3)
    result = _kill_head(provider, hard=True)
    assert (result.node.id, result.how) == (provider.head_id, Kill.TERMINATED)
    assert provider.ids_of("terminate_nodes") == [provider.head_id] and provider.ray.stopped == []
    assert len(provider.calls_of("nodes")) == 1 + 4


def test_a_head_that_stays_listed_is_an_error_naming_the_head() -> None:
    provider = _Provider(lag=10**6)
    with pytest.raises(
        LauncherError, match=f"terminate head {provider.head_id}, but it is still listed"
    ):
        _kill_head(provider, hard=True)


def test_a_head_already_taken_or_without_ray_is_refused_and_left_alone() -> None:
    preempted = _Provider(NodeState.PREEMPTED, reclaims=True)
    with pytest.raises(
        LauncherError, match=f"head {preempted.head_id} of cluster khead is listed preempted"
    ):
        _kill_head(preempted, hard=True)
    dead = _Provider(NodeState.DEAD)
    with pytest.raises(LauncherError, match="is listed dead: there is no Ray"):
        _kill_head(dead, hard=False)
    assert (preempted.reclaimed, dead.ray.stopped, dead.ids_of("terminate_nodes")) == ([], [], [])
    # A head whose Ray died is still a machine: --hard takes it.
    assert _kill_head(_Provider(NodeState.DEAD), hard=True).how is Kill.TERMINATED


def test_a_notice_is_refused_for_the_head_before_anything_is_listed() -> None:
    provider = _Provider(reclaims=True)
    with pytest.raises(UsageError, match="drop --notice"):
        kill_random_node(CONFIG, hard=True, head=True, notice_s=5, provider=provider)
    assert provider.calls_of("nodes") == [] and provider.reclaimed == []


# -- the command --------------------------------------------------------------------------


def _cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, provider: _Provider, *args: str) -> Any:
    path = tmp_path / "khead.yaml"
    path.write_text("cluster_name: khead\nprovider: {type: localhost}\n")
    monkeypatch.setattr(node_commands, "make_provider", lambda config: provider)
    return run_cli("kill-random-node", str(path), *args), path


def test_head_with_notice_is_one_usage_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    provider = _Provider(reclaims=True)
    for flags in (["--hard", "--notice", "5"], ["--notice", "5"]):
        result, _ = _cli(monkeypatch, tmp_path, provider, "--head", *flags, "-y")
        assert result.exit_code == 2, result.stdout + result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: --notice") and "drop --notice" in line
    assert provider.calls_of("nodes") == [] and provider.reclaimed == []


def test_the_question_names_the_head(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    provider = _Provider(reclaims=True)
    result, _ = _cli(monkeypatch, tmp_path, provider, "--head", "--hard")  # not at a terminal
    assert result.exit_code == 2
    said = f"This will take away the head {provider.head_id} (head) with IP 127.0.0.9 of cluster"
    assert said + " khead" in result.stderr
    assert provider.reclaimed == [] and provider.ids_of("terminate_nodes") == []


@pytest.mark.parametrize(
    ("flags", "reclaims", "said"),
    [
        (["--hard"], True, "Reclaimed head {} (head) with IP 127.0.0.9 as a cloud reclaims"),
        (["--hard"], False, "Terminated head {} (head) with IP 127.0.0.9;"),
        ([], False, "Stopped Ray on head {} (head) with IP 127.0.0.9;"),
    ],
)
def test_what_was_done_to_the_head_and_what_brings_it_back_is_said(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    flags: list[str],
    reclaims: bool,
    said: str,
) -> None:
    provider = _Provider(reclaims=reclaims)
    result, path = _cli(monkeypatch, tmp_path, provider, "--head", *flags, "-y")
    assert result.exit_code == 0, result.stdout + result.stderr
    (line,) = result.stdout.strip().splitlines()
    assert line.startswith(said.format(provider.head_id)), line
    assert "nothing replaces a lost head by itself" in line
    assert "`launcher submit --recover` brings up a new head" in line
    assert line.endswith(f"`launcher up {path}`.")


# -- the localhost provider ---------------------------------------------------------------


class _Processes:
    """Stand-in processes (`sleep 600`) carrying a node's marks; all killed at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, provider: LocalhostProvider, node_id: str, *, own_session: bool = False
    ) -> subprocess.Popen[bytes]:
        env = dict(
            os.environ, LAUNCHER_CLUSTER_KEY=provider.cluster_key(), LAUNCHER_NODE_ID=node_id
        )
        process = subprocess.Popen(["sleep", "600"], env=env, start_new_session=own_session)
        self.started.append(process)
        return process

    def start_with_child(self, provider: LocalhostProvider, node_id: str) -> int:
        """A marked process in a session of its own with an unmarked child (as Ray's
        workers hide their environment): returns the child's pid."""
        env = dict(
            os.environ, LAUNCHER_CLUSTER_KEY=provider.cluster_key(), LAUNCHER_NODE_ID=node_id
        )
        plain = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
        script = (
            "import subprocess, sys\n"
            f"child = subprocess.Popen(['sleep', '600'], env={plain!r})\n"
            "print(child.pid, flush=True)\n"
            "child.wait()\n"
        )
        parent = subprocess.Popen(
            [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, start_new_session=True
        )
        self.started.append(parent)
        assert parent.stdout is not None
        return int(parent.stdout.readline())


@pytest.fixture
def processes() -> Iterator[_Processes]:
    made = _Processes()
    yield made
    for process in made.started:
        process.kill()
        process.wait()


def _localhost(name: str, head_config: str) -> tuple[LocalhostProvider, Node, Node]:
    provider = LocalhostProvider(_config(name, head_config))
    types = provider.config.node_types
    (head,) = provider.create_nodes(types["head"], NodeKind.HEAD, 1, {})
    (worker,) = provider.create_nodes(types["w"], NodeKind.WORKER, 1, {})
    return provider, head, worker


def _killed(process: subprocess.Popen[bytes], how: signal.Signals) -> bool:
    return process.wait(timeout=30) == -how


def test_a_simulated_spot_head_is_reclaimed_with_every_process_it_carries(
    processes: _Processes,
) -> None:
    provider, head, worker = _localhost("spothead", "{simulated_spot: true}")
    other, other_head, _ = _localhost("otherclu", "{simulated_spot: true}")
    ray, autoscaler = processes.start(provider, head.id), processes.start(provider, head.id)
    driver_child = processes.start_with_child(provider, head.id)
    on_worker = processes.start(provider, worker.id)
    other_cluster = processes.start(other, head.id)  # another cluster, the same node id
    other_cluster_head = processes.start(other, other_head.id)

    result = kill_random_node(provider.config, hard=True, head=True, provider=provider)

    assert (result.node.id, result.how) == (head.id, Kill.RECLAIMED)
    assert _killed(ray, signal.SIGKILL) and _killed(autoscaler, signal.SIGKILL)
    assert not is_alive(driver_child)
    assert all(p.poll() is None for p in (on_worker, other_cluster, other_cluster_head))
    states = {n.id: n.state for n in provider.nodes()}
    assert states == {head.id: NodeState.PREEMPTED, worker.id: NodeState.RUNNING}
    record = provider.nodes_dir / head.id / "node.json"
    assert "reclaimed_at" in record.read_text()
    assert [n.state for n in other.nodes()] == [NodeState.RUNNING, NodeState.RUNNING]


def test_a_head_is_given_no_reclaim_notice_a_spot_worker_is() -> None:
    provider, head, worker = _localhost("noticed", "{simulated_spot: true}")
    assert provider.notify_reclaim(head, 1e12) is False
    assert provider.notify_reclaim(worker, 1e12) is True


def test_a_head_of_a_type_not_spot_is_terminated_and_unlisted(processes: _Processes) -> None:
    provider, head, worker = _localhost("plainhead", "{}")
    ray = processes.start(provider, head.id)
    on_worker = processes.start(provider, worker.id)
    assert provider.reclaim_node(head) is False and ray.poll() is None  # nothing done

    result = kill_random_node(provider.config, hard=True, head=True, provider=provider)

    assert (result.node.id, result.how) == (head.id, Kill.TERMINATED)
    assert ray.wait(timeout=30) is not None and on_worker.poll() is None
    assert [n.id for n in provider.nodes()] == [worker.id]


def test_without_hard_the_heads_processes_stop_and_its_record_stays(
    processes: _Processes,
) -> None:
    provider, head, worker = _localhost("rayhead", "{simulated_spot: true}")
    ray = processes.start(provider, head.id)
    on_worker = processes.start(provider, worker.id)

    result = kill_random_node(provider.config, hard=False, head=True, provider=provider)

    assert (result.node.id, result.how) == (head.id, Kill.RAY_STOPPED)
    assert _killed(ray, signal.SIGTERM) and on_worker.poll() is None
    assert {n.id for n in provider.nodes()} == {head.id, worker.id}  # the machine stays
    assert (provider.nodes_dir / head.id / "home").is_dir()
