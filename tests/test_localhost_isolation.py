"""Two localhost clusters never touch each other, whatever their names or homes: a cluster's
processes are found by a key only that cluster (of that home) has, not by its name, and the
addresses and ports its nodes are given are claimed machine-wide, not per home."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.config.loader import parse_config
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.localhost.machine import claims, machine_lock
from launcher.providers.localhost.node_files import read_json
from launcher.providers.localhost.processes import is_alive
from launcher.providers.localhost.provider import LocalhostProvider
from tests.conftest import run_cli


def _provider(name: str) -> LocalhostProvider:
    config = parse_config(f"cluster_name: {name}\nprovider: {{type: localhost}}\n", "inline")
    return LocalhostProvider(config)


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """Somebody else's process that carries the cluster's name (as any process may)."""
    env = dict(os.environ, LAUNCHER_CLUSTER="shared-name", LAUNCHER_NODE_ID="w-1")
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
    yield process
    process.kill()
    process.wait()


def test_down_of_a_cluster_leaves_another_homes_process_of_that_name(
    stranger: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "empty-home"))
    config = tmp_path / "cluster.yaml"
    config.write_text("cluster_name: shared-name\nprovider: {type: localhost}\n")
    result = run_cli("down", "-y", str(config))
    assert result.exit_code == 0, result.stdout + result.stderr
    provider = _provider("shared-name")
    provider.cleanup(purge=True)
    assert (
        provider.access.stop_node_ray(
            Node("w-1", NodeKind.WORKER, "worker", None, NodeState.RUNNING), None
        )
        is None
    )  # type: ignore[arg-type]
    assert is_alive(stranger.pid)
    assert stranger.poll() is None


def test_a_cluster_stops_its_own_processes_by_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    provider = _provider("shared-name")
    config = provider.config
    (node,) = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 1, {})
    env = dict(os.environ, **provider.access.node_env(node, None))
    assert env["LAUNCHER_CLUSTER_KEY"] == provider.cluster_key()
    own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
    try:
        provider.terminate_nodes([node.id])
        assert own.wait(timeout=30) is not None
    finally:
        own.kill()


def test_two_homes_never_get_one_address_or_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: dict[str, str] = {}
    ports: list[int] = []
    made = []
    for home in ("one", "two"):
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / home))
        provider = _provider("same")
        head = provider.create_nodes(provider.config.head_type, NodeKind.HEAD, 1, {})[0]
        (worker,) = provider.create_nodes(
            provider.config.node_types["worker"], NodeKind.WORKER, 1, {}
        )
        for node in (head, worker):
            assert node.ip is not None and node.ip not in given, (node.ip, given)
            given[node.ip] = home
            record = read_json(provider.nodes_dir / node.id / "node.json")
            assert record is not None
            ports.extend(record["ports"].values())
        made.append(provider)
    assert len(set(ports)) == len(ports)
    claimed = {c.ip for c in claims()}
    assert set(given) <= claimed
    for index, provider in enumerate(made):
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / ("one", "two")[index]))
        provider.terminate_nodes([n.id for n in provider.nodes()])
    assert not set(given) & {c.ip for c in claims()}  # released with their nodes


def test_a_home_deleted_by_hand_frees_its_addresses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "gone"))
    provider = _provider("short-lived")
    (node,) = provider.create_nodes(provider.config.node_types["worker"], NodeKind.WORKER, 1, {})
    assert node.ip in {c.ip for c in claims()}
    subprocess.run(["rm", "-rf", str(tmp_path / "gone")], check=True)
    assert node.ip not in {c.ip for c in claims()}


def test_a_cluster_whose_state_was_lost_still_finds_its_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is derived, not stored: `down` after the state directory is lost still stops a
    process of the cluster that uses nothing under Ray's temp dir (the autoscaler daemon)."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    provider = _provider("lost")
    (node,) = provider.create_nodes(provider.config.node_types["worker"], NodeKind.WORKER, 1, {})
    env = dict(os.environ, **provider.access.node_env(node, None))
    own = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], env=env, cwd=tmp_path
    )
    try:
        subprocess.run(["rm", "-rf", str(tmp_path / "home")], check=True)
        found = _provider("lost").cleanup(purge=True)
        assert any("leftover process" in line for line in found), found
        assert own.wait(timeout=30) is not None
    finally:
        own.kill()


def test_claims_and_lock_are_readable_by_every_user_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under umask 077 a claim was 0600: another user skipped it and took the address."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))
    old = os.umask(0o077)
    try:
        provider = _provider("private-umask")
        (node,) = provider.create_nodes(
            provider.config.node_types["worker"], NodeKind.WORKER, 1, {}
        )
    finally:
        os.umask(old)
    machine = tmp_path / "machine"
    assert machine.stat().st_mode & 0o7777 == 0o1777
    assert (machine / "claims").stat().st_mode & 0o7777 == 0o1777
    (claim,) = (machine / "claims").glob("*.json")
    assert claim.stat().st_mode & 0o777 == 0o644
    assert (machine / "localhost-ips.lock").stat().st_mode & 0o777 == 0o644
    assert node.ip in {c.ip for c in claims()}


def test_a_lock_held_too_long_is_named_not_waited_on_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))
    with machine_lock("localhost-ips.lock"):
        holder = subprocess.run(
            [
                sys.executable,
                "-c",
                "from launcher.providers.localhost.machine import machine_lock\n"
                "with machine_lock('localhost-ips.lock', wait_s=0.3): pass",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=dict(os.environ, LAUNCHER_MACHINE_DIR=str(tmp_path / "machine")),
        )
    assert holder.returncode != 0
    assert "localhost-ips.lock stayed locked for 0.3 s" in holder.stderr
