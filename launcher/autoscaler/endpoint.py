"""The HTTP endpoint Prometheus scrapes the autoscaler's metrics from (prometheus_client's
own server, on a thread of its own), bound to the head's Ray address only: never 0.0.0.0,
so clusters whose heads have addresses of their own on one machine (the localhost
provider's 127.0.0.x) each serve on the same port without meeting.

The daemon calls `serve_on(ip)` every tick with the head's address as Ray knows it; the
server starts (or moves) then, and a port that is taken is tried again every `RETRY_S`,
its error logged once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

RETRY_S = 30.0


def host_port(ip: str, port: int) -> str:
    """`ip:port`, with an IPv6 address in brackets (as Ray writes addresses)."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class MetricsEndpoint:
    def __init__(
        self,
        registry: CollectorRegistry,
        port: int,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.port = port
        self.log = log
        self.clock = clock
        self.server: WSGIServer | None = None
        self.ip: str | None = None
        self.retry_at = 0.0
        self.failed_with = ""

    @property
    def address(self) -> str | None:
        """`ip:port` where it serves now, None when it does not."""
        if self.server is None or self.ip is None:
            return None
        return host_port(self.ip, self.server.server_port)

    def serve_on(self, ip: str) -> str | None:
        """Serve on `ip` (moving there from another address); the address it serves on."""
        if self.server is not None and self.ip == ip:
            return self.address
        self.close()
        now = self.clock()
        if now < self.retry_at:
            return None
        try:
            self.server, _ = start_http_server(self.port, addr=ip, registry=self.registry)
        except OSError as exc:
            self.retry_at = now + RETRY_S
            why = f"{host_port(ip, self.port)}: {exc.strerror or exc}"
            if why != self.failed_with:
                self.log(
                    f"error: cannot serve the autoscaler's metrics on {why}; trying again "
                    f"every {RETRY_S:g} s (metadata.launcher.metrics_port sets the port)"
                )
            self.failed_with = why
            return None
        self.ip, self.failed_with = ip, ""
        self.log(f"serving the autoscaler's metrics at http://{self.address}/metrics")
        return self.address

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.server, self.ip = None, None
