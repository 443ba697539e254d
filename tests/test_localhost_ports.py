"""The localhost provider gives each node its own Ray ports: distinct within a node (Ray
refuses to start when two of its components are given one port) and across every cluster
here, whether or not the node's Ray is running when the next node is made."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from launcher.config.loader import parse_config
from launcher.errors import ProviderError
from launcher.providers.base import NodeKind
from launcher.providers.localhost import provider as localhost
from launcher.providers.localhost.node_files import read_json, write_json
from launcher.providers.localhost.provider import LocalhostProvider


@pytest.fixture(autouse=True)
def _own_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's claims are shared by every home here; these tests hand out made-up
    ports (7000, ...), so they claim them in a machine directory of their own, neither
    seeing a real cluster's claims nor leaving theirs for the next run to trip on."""
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))


def _provider(name: str) -> LocalhostProvider:
    config = parse_config(f"cluster_name: {name}\nprovider: {{type: localhost}}\n", "inline")
    return LocalhostProvider(config)


def _ports(provider: LocalhostProvider, node_id: str) -> dict[str, int]:
    record = read_json(provider.nodes_dir / node_id / "node.json")
    assert record is not None
    ports: dict[str, int] = record["ports"]
    return ports


def test_every_port_of_every_node_is_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    given: list[int] = []
    for name in ("one", "two"):
        provider = _provider(name)
        config = provider.config
        head = provider.create_nodes(config.head_type, NodeKind.HEAD, 1, {})[0]
        assert set(_ports(provider, head.id)) == {"agent", "ray", "client", "dashboard"}
        workers = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 3, {})
        for node in (head, *workers):
            given.extend(_ports(provider, node.id).values())
    assert len(given) == 2 * 4 + 2 * 3
    assert len(set(given)) == len(given), given


class _Kernel:
    """Stands in for `socket.socket`: binding port 0 hands out the ports of `answers` in
    turn, as a kernel may hand out again a port whose probe was closed."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers

    def __call__(self, *args: Any) -> _Probe:
        return _Probe(self)


class _Probe:
    def __init__(self, kernel: _Kernel) -> None:
        self.kernel = kernel
        self.port = 0

    def __enter__(self) -> _Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        self.port = self.kernel.answers.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("0.0.0.0", self.port)


def test_a_port_handed_out_twice_owned_by_a_stopped_node_or_rays_is_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    provider = _provider("old")
    provider.bootstrap()
    (provider.nodes_dir / "h-old").mkdir()
    write_json(provider.nodes_dir / "h-old" / "node.json", {"id": "h-old", "ports": {"ray": 6000}})
    kernel = _Kernel([6000, 7000, 7000, 7001, 15000, 6000, 7002, 7003])
    monkeypatch.setattr(socket, "socket", kernel)
    ports = localhost._free_ports(["agent", "ray", "client", "dashboard"], localhost._given().ports)
    assert ports == {"agent": 7000, "ray": 7001, "client": 7002, "dashboard": 7003}


def test_real_probes_give_distinct_ports() -> None:
    ports = localhost._free_ports([f"p{i}" for i in range(50)], set())
    assert len(set(ports.values())) == 50
    for port in ports.values():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as check:
            check.bind(("", port))  # free again once chosen: Ray binds it next


def test_a_machine_whose_ports_are_all_rays_is_told_what_to_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "socket", _Kernel([15000] * 300))
    with pytest.raises(ProviderError, match="ip_local_port_range"):
        localhost._free_ports(["agent"], set())


def test_no_node_is_given_a_port_where_a_head_serves_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heads' autoscalers serve metrics on their own address (Ray's default 44217, or the
    cluster's metrics_port): a port no node's Ray, which binds every address, may get."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    config = parse_config(
        "cluster_name: own\nprovider: {type: localhost}\n"
        "metadata: {launcher: {metrics_port: 7100}}\n",
        "inline",
    )
    provider = LocalhostProvider(config)
    real = socket.socket
    monkeypatch.setattr(socket, "socket", _Kernel([44217, 7100, 7000, 7001, 7002, 7003]))
    head = provider.create_nodes(config.head_type, NodeKind.HEAD, 1, {})[0]
    assert sorted(_ports(provider, head.id).values()) == [7000, 7001, 7002, 7003]
    monkeypatch.setattr(socket, "socket", real)
    assert 7100 in localhost._given().ports  # the head claims it for every cluster here
    other = _provider("other")
    monkeypatch.setattr(socket, "socket", _Kernel([7100, 7200]))
    worker = other.create_nodes(other.config.node_types["worker"], NodeKind.WORKER, 1, {})[0]
    assert _ports(other, worker.id) == {"agent": 7200}
