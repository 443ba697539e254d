"""The fake kubelet: runs the pods the fake API server binds to its nodes as real process
trees on this box (see pod_runtime.py) and serves their streaming subresources.

    kubelet = FakeKubelet(service_account_files=..., service_env={...})
    kubelet.bind(sink)                  # once, before any pod
    kubelet.run_pod(pod, "node-1")      # returns at once; status reports go to the sink
    await asyncio.to_thread(kubelet.stop_pod, pod, 30)   # blocks until the pod is gone
    return await kubelet.exec(request, pod)  # from the server's route, pod found and allowed
    kubelet.close()

exec and attach speak the channel websocket protocols (v5, v4, v4.base64, v3, v2,
channel.k8s.io, base64.channel.k8s.io); portforward the v4/channel.k8s.io one with ?ports=
(the Python client) and SPDY/3.1 tunnelled in a websocket (kubectl 1.31+, spdy.py); log
serves text/plain (follow, tailLines, previous, limitBytes). A request that is not a
websocket upgrade (SPDY itself: kubectl's fallback) gets 400 with a Status, so kubectl
reports the refusal instead of hanging.

Not modelled: attach (400), readiness and liveness probes (a running container is ready),
resource limits, configMap/secret/projected volumes, images (the container runs this
machine's files).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from fakes.kube import portforward, spdy
from fakes.kube.channels import EXEC_PROTOCOLS, Channels, new_websocket, status_response
from fakes.kube.exec_session import ExecRequest, Session, nsenter_argv
from fakes.kube.kubelet_api import Pod, PodStatusSink
from fakes.kube.pod_env import ObjectKeyLookup
from fakes.kube.pod_runtime import (
    ContainerRun,
    IpPool,
    PodRun,
    RuntimeOptions,
    sweep_stale,
)

LOG_POLL_S = 0.05


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1", "yes")


class FakeKubelet:
    """One kubelet for every node of the fake cluster (nodes differ only in hostIP).

    service_account_files(namespace, account) -> {"token": ..., "ca.crt": ...,
    "namespace": ...}: the files mounted at /var/run/secrets/kubernetes.io/serviceaccount
    (none if it is None or returns nothing, or the pod sets automountServiceAccountToken:
    false). service_env: variables every container gets (KUBERNETES_SERVICE_HOST/PORT).
    lookup(namespace, "ConfigMap"|"Secret", name, key): values for env valueFrom refs.
    host_ip(node_name): the node's address for status.hostIP. restart_backoff_s: the first
    restart delay of a restartPolicy, doubling up to max_restart_backoff_s.
    """

    def __init__(
        self,
        *,
        service_account_files: Callable[[str, str], Mapping[str, bytes]] | None = None,
        service_env: Mapping[str, str] | None = None,
        lookup: ObjectKeyLookup | None = None,
        host_ip: Callable[[str], str] | None = None,
        restart_backoff_s: float = 0.5,
        max_restart_backoff_s: float = 10.0,
    ) -> None:
        self.options = RuntimeOptions(
            service_account_files=service_account_files,
            service_env=dict(service_env or {}),
            lookup=lookup,
            restart_backoff_s=restart_backoff_s,
            max_restart_backoff_s=max_restart_backoff_s,
        )
        if host_ip is not None:
            self.options.host_ip = host_ip
        sweep_stale()
        self._sink: PodStatusSink | None = None
        self._pool = IpPool()
        self._lock = threading.Lock()
        self._pods: dict[str, PodRun] = {}
        self._stopped: list[PodRun] = []
        # Exec sessions whose output stayed open after their command ended (see
        # exec_session.DRAIN_S): a real kubelet would have hung there.
        self.undrained: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------

    def bind(self, sink: PodStatusSink) -> None:
        self._sink = sink

    def run_pod(self, pod: Pod, node_name: str) -> None:
        key = _key(pod)
        sink = self._sink
        if sink is None:
            raise RuntimeError("FakeKubelet.bind was not called")
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))

        def report(status: dict[str, Any]) -> None:
            sink.update_status(namespace, name, status)

        with self._lock:
            if key in self._pods:
                return
            ip = self._pool.take()
            try:
                run = PodRun(pod, node_name, ip, self.options, report)
            except BaseException:
                self._pool.give_back(ip)
                raise
            self._pods[key] = run
        run.start()

    def stop_pod(self, pod: Pod, grace_period_s: float) -> None:
        with self._lock:
            run = self._pods.pop(_key(pod), None)
        if run is None:
            return
        try:
            run.stop(grace_period_s)
        finally:
            self._pool.give_back(run.ip)
            with self._lock:
                self._stopped.append(run)

    def close(self) -> None:
        with self._lock:
            running = list(self._pods.values())
        for run in running:
            self.stop_pod(run.pod, 0)
        with self._lock:
            stopped, self._stopped = self._stopped, []
        for run in stopped:
            run.remove()

    # -- what tests and the server may look at ---------------------------------------------

    def pod_run(self, pod: Pod) -> PodRun | None:
        with self._lock:
            return self._pods.get(_key(pod))

    def pod_ip(self, pod: Pod) -> str | None:
        run = self.pod_run(pod)
        return run.ip if run else None

    def pod_dir(self, pod: Pod) -> Path | None:
        run = self.pod_run(pod)
        return run.root if run else None

    # -- streaming subresources ------------------------------------------------------------

    def _target(self, pod: Pod, container: str | None) -> ContainerRun | web.Response:
        run = self.pod_run(pod)
        name = str((pod.get("metadata") or {}).get("name"))
        if run is None:
            return status_response(400, "BadRequest", f"pod {name} is not running on a node")
        found = run.container(container)
        if found is None and not container:
            names = " ".join(c.name for c in run.containers)
            message = f"a container name must be specified for pod {name}, choose one of: [{names}]"
            return status_response(400, "BadRequest", message)
        if found is None:
            message = f"container {container} is not valid for pod {name}"
            return status_response(400, "BadRequest", message)
        return found

    async def exec(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        query = request.query
        command = query.getall("command", [])
        if not command:
            return status_response(400, "BadRequest", "you must specify at least 1 command")
        target = self._target(pod, query.get("container"))
        if isinstance(target, web.Response):
            return target
        tty = _flag(query.get("tty"))
        wanted = ExecRequest(
            command=command,
            stdin=_flag(query.get("stdin")),
            stdout=_flag(query.get("stdout")),
            stderr=_flag(query.get("stderr")) and not tty,
            tty=tty,
        )
        if not (wanted.stdin or wanted.stdout or wanted.stderr):
            message = "you must specify at least 1 of stdin, stdout, stderr"
            return status_response(400, "BadRequest", message)
        ws = new_websocket(EXEC_PROTOCOLS)
        if not ws.can_prepare(request).ok:
            message = "exec needs a websocket upgrade (SPDY is not served by the fake kubelet)"
            return status_response(400, "BadRequest", message)
        pid = target.init_pid
        if pid is None:
            message = f"container {target.name} is not running ({target.state})"
            return status_response(400, "BadRequest", message)
        await ws.prepare(request)
        session = Session(
            Channels(ws),
            wanted,
            nsenter_argv(pid, command),
            target.env,
            on_undrained=lambda what: self.undrained.append(f"{_key(pod)}: {what}"),
        )
        await session.run()
        return ws

    async def attach(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        return status_response(400, "BadRequest", "attach is not supported by the fake kubelet")

    async def portforward(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        run = self.pod_run(pod)
        name = str((pod.get("metadata") or {}).get("name"))
        if run is None:
            return status_response(400, "BadRequest", f"pod {name} is not running on a node")
        offered = request.headers.get("Sec-WebSocket-Protocol", "")
        if spdy.PROTOCOL in (p.strip() for p in offered.split(",")):
            return await spdy.serve(request, run.ip, name)  # kubectl 1.31+
        if "ports" not in request.query:
            # SPDY itself (the fallback of kubectl, and older ones): not served here.
            message = "port-forward needs ?ports= or SPDY tunnelled in a websocket"
            return status_response(400, "BadRequest", message)
        return await portforward.serve(request, run.ip, name)

    async def log(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        query = request.query
        target = self._target(pod, query.get("container"))
        if isinstance(target, web.Response):
            return target
        name = str((pod.get("metadata") or {}).get("name"))
        previous = _flag(query.get("previous"))
        restarts = target.restart_count - 1 if previous else target.restart_count
        path = target.log_path(restarts)
        if restarts < 0 or not path.exists():
            if previous:
                message = f'previous terminated container "{target.name}" in pod "{name}" not found'
            else:
                reason = (target.state.get("waiting") or {}).get("reason", "ContainerCreating")
                message = f'container "{target.name}" in pod "{name}" is waiting to start: {reason}'
            return status_response(400, "BadRequest", message)
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
        except ValueError:
            return status_response(400, "BadRequest", "tailLines and limitBytes are integers")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        follow = _flag(query.get("follow")) and not previous
        await _stream_log(response, target, path, restarts, tail, limit, follow)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response


async def _stream_log(
    response: web.StreamResponse,
    target: ContainerRun,
    path: Path,
    restarts: int,
    tail: int | None,
    limit: int | None,
    follow: bool,
) -> None:
    with path.open("rb") as log:
        data = log.read()
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail > 0 else b""
        sent = 0
        while True:
            if limit is not None:
                data = data[: max(limit - sent, 0)]
            if data:
                await response.write(data)
                sent += len(data)
            if not follow or (limit is not None and sent >= limit):
                return
            # The container writes the file itself: look again until it has ended.
            live = target.running and target.restart_count == restarts
            data = log.read()
            if not data and not live:
                return
            if not data:
                await asyncio.sleep(LOG_POLL_S)


def _key(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
