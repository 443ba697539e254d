"""Forward a port on this machine to a port of a node (TCP): each connection accepted here
is relayed to a stream the provider opens (a direct TCP connection, or an SSH channel)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

# Opens a stream to the node's port: anything with recv, sendall, close and fileno.
PortOpener = Callable[[int], Any]


def direct(host: str) -> PortOpener:
    """Streams that are plain TCP connections to `host`."""
    return lambda port: socket.create_connection((host, port), timeout=10)


class TcpForwarder:
    """Listens on 127.0.0.1:`local_port` and relays each connection to the node's port."""

    def __init__(self, local_port: int, opener: PortOpener, target_port: int) -> None:
        self.opener = opener
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", local_port), reuse_port=False)
        self.server.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True, name="port-forward")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2)
        self.server.close()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

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
            while not self.stopping.is_set():
                for key, _ in selector.select(timeout=0.5):
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
