"""Forward a port on this machine to a port of a node (TCP): each connection accepted here
is relayed to a stream the provider opens (a direct TCP connection, or an SSH channel)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

# Opens a stream to the node's port: anything with recv, sendall, close and fileno.
PortOpener = Callable[[int], Any]


def direct(host: str) -> PortOpener:
    """Streams that are plain TCP connections to `host`."""
    return lambda port: socket.create_connection((host, port), timeout=10)


# When the command the ports were forwarded for ends, connections still open get this long
# to finish what they relay (as ssh waits for its forwarded channels before it exits).
DRAIN_S = 5.0


class TcpForwarder:
    """Listens on 127.0.0.1:`local_port` (from construction on: a client may connect as soon
    as this exists) and relays each connection to the node's port."""

    def __init__(self, local_port: int, opener: PortOpener, target_port: int) -> None:
        self.opener = opener
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", local_port), reuse_port=False)
        self.server.settimeout(0.2)
        self.accepting = threading.Event()
        self.closing = threading.Event()  # relays still open after the drain are cut
        self.relays: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._serve, daemon=True, name="port-forward")

    def start(self) -> None:
        self.accepting.set()
        self.thread.start()

    def stop(self, drain_s: float = DRAIN_S) -> None:
        """Stop accepting; connections already made (the kernel's backlog included) relay
        until one side closes, for up to `drain_s`, and are then cut."""
        self.accepting.clear()
        if self.thread.ident is not None:
            self.thread.join(timeout=2)
        self.server.setblocking(False)
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                break
            self._spawn(client)
        self.server.close()
        deadline = time.monotonic() + drain_s
        for relay in list(self.relays):
            relay.join(timeout=max(0.0, deadline - time.monotonic()))
        self.closing.set()
        for relay in list(self.relays):
            relay.join(timeout=1)

    def _serve(self) -> None:
        while self.accepting.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(client)

    def _spawn(self, client: socket.socket) -> None:
        client.setblocking(True)
        relay = threading.Thread(target=self._relay, args=(client,), daemon=True)
        self.relays.append(relay)
        relay.start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = self.opener(self.target_port)
        except Exception:
            client.close()
            return
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self.closing.is_set():
                for key, _ in selector.select(timeout=0.2):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            client.close()
            upstream.close()


@contextlib.contextmanager
def forwarding(ports: list[tuple[int, int]], opener: PortOpener) -> Iterator[None]:
    forwarders = [TcpForwarder(local, opener, remote) for local, remote in ports]
    for forwarder in forwarders:
        forwarder.start()
    try:
        yield
    finally:
        for forwarder in forwarders:
            forwarder.stop()
