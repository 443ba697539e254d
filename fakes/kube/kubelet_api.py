"""Where the fake API server and the fake kubelet meet.

The server owns every object and its resourceVersion. When its scheduler binds a pod to a
node, it calls `Kubelet.run_pod`; the kubelet starts the pod's containers and reports what
happens to them through the `PodStatusSink` it was given (the server turns each report
into a status update with a new resourceVersion and a watch event). When a pod is deleted
the server calls `Kubelet.stop_pod` and removes the object once it returns (at once when
the pod was never started). The streaming subresources of a pod (exec, attach,
portforward, log) are routed by the server, after it has authenticated the caller and
found the pod, to the kubelet's handlers, which own the HTTP upgrade (websocket channel
protocols v5/v4/base64 channel.k8s.io, v4/v5 portforward.k8s.io) or the log stream.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

Pod = dict[str, Any]  # the pod object as the API serves it (metadata, spec, status)


class PodStatusSink(Protocol):
    def update_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` (phase, podIP, conditions, containerStatuses, ...) into the pod's
        status. Thread-safe; a pod that is gone is ignored."""


class Kubelet(Protocol):
    def bind(self, sink: PodStatusSink) -> None:
        """Called once by the server before any pod runs."""

    def run_pod(self, pod: Pod, node_name: str) -> None:
        """Start the pod (its IP, containers...); returns at once, reports through the sink."""

    def stop_pod(self, pod: Pod, grace_period_s: float) -> None:
        """Kill the pod's processes (SIGTERM, SIGKILL after the grace period) and free
        its IP; returns once they are gone."""

    async def exec(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        """GET/POST .../pods/NAME/exec?command=...&container=&stdin=&stdout=&stderr=&tty="""

    async def attach(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        """GET/POST .../pods/NAME/attach"""

    async def portforward(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        """GET/POST .../pods/NAME/portforward?ports=..."""

    async def log(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        """GET .../pods/NAME/log?container=&follow=&tailLines=&previous="""

    def close(self) -> None:
        """Stop every pod."""
