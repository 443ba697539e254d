"""Port forwarding (`-p`, `launcher dashboard`): what a connection made while the command ran
receives is relayed in full, even when the command ends first."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from launcher.runners.forward import TcpForwarder, direct


@pytest.fixture
def node_server() -> Iterator[tuple[int, threading.Event, list[socket.socket]]]:
    """A 'node' on 127.0.0.1 that answers each connection once `release` is set."""
    server = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

            def answer(conn: socket.socket = conn) -> None:
                release.wait(30)
                conn.sendall(b"hello from the node")
                conn.close()

            threading.Thread(target=answer, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], release, accepted
    server.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_connection_made_before_the_command_ended_gets_its_whole_answer(
    node_server: tuple[int, threading.Event, list[socket.socket]],
) -> None:
    port, release, _ = node_server
    forwarder = TcpForwarder(_free_port(), direct("127.0.0.1"), port)
    forwarder.start()
    client = socket.create_connection(("127.0.0.1", forwarder.server.getsockname()[1]), 10)
    # The command ends (the forwarder is stopped) before the node has answered.
    stopper = threading.Thread(target=forwarder.stop)
    stopper.start()
    release.set()
    client.settimeout(30)
    received = b""
    while chunk := client.recv(100):
        received += chunk
    client.close()
    stopper.join(30)
    assert received == b"hello from the node"


def test_a_connection_still_in_the_backlog_when_stopped_is_served(
    node_server: tuple[int, threading.Event, list[socket.socket]],
) -> None:
    port, release, _ = node_server
    forwarder = TcpForwarder(_free_port(), direct("127.0.0.1"), port)
    # Never started: the listening socket exists, so the kernel completes the connection,
    # but nothing has accepted it yet when the forwarder stops.
    client = socket.create_connection(("127.0.0.1", forwarder.server.getsockname()[1]), 10)
    release.set()
    forwarder.stop()
    client.settimeout(30)
    assert client.recv(100) == b"hello from the node"
    client.close()


def test_connections_left_open_are_cut_after_the_drain(
    node_server: tuple[int, threading.Event, list[socket.socket]],
) -> None:
    port, _release, _accepted = node_server  # never released: the node keeps it open
    forwarder = TcpForwarder(_free_port(), direct("127.0.0.1"), port)
    forwarder.start()
    client = socket.create_connection(("127.0.0.1", forwarder.server.getsockname()[1]), 10)
    client.sendall(b"x")
    forwarder.stop(drain_s=0.2)
    client.settimeout(30)
    assert client.recv(100) == b""  # closed by the forwarder, not left hanging
    client.close()
    assert all(not r.is_alive() for r in forwarder.relays)
