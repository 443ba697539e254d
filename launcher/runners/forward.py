"""Forward a port on this machine to an address the node can be reached at (TCP)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Iterator


class TcpForwarder:
    """Listens on 127.0.0.1:`local_port` and relays each connection to `target`."""

    def __init__(self, local_port: int, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
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
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
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
def forwarding(ports: list[tuple[int, int]], target_host: str) -> Iterator[None]:
    forwarders = [TcpForwarder(local, target_host, remote) for local, remote in ports]
    for forwarder in forwarders:
        forwarder.start()
    try:
        yield
    finally:
        for forwarder in forwarders:
            forwarder.stop()
