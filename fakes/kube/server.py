"""KubeServer: a fake Kubernetes API server at the wire level, for the tests.

It serves HTTPS on 127.0.0.1 (a free port and a CA chosen when it is made) with bearer
tokens, the discovery documents and OpenAPI v3 stubs kubectl needs, the REST verbs of
`api.py` over `store.py`, watches, a scheduler over simulated nodes (`scheduler.py`,
`cluster.py`) and, through the `Kubelet` of `kubelet_api.py`, pods that run. The aiohttp
loop runs in a background thread; every helper below is thread-safe.

    with KubeServer(nodes=[NodeSpec("n1", cpu="4", extra={"nvidia.com/gpu": "1"})]) as server:
        server.write_kubeconfig(tmp / "config")        # admin context "kube-fake"
        ...                                            # kubernetes client or kubectl

    # pods as real processes (root): the fake kubelet wired to this server
    KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options()))

Clients: `url`, `token` (admin), `ca_pem`/`ca_file`, `kubeconfig()`/`write_kubeconfig(path,
context=, namespace=, extra=[KubeContext(name, token, namespace)])`, `mint_token(namespace,
serviceaccount)`, `serviceaccount_files(directory, namespace, serviceaccount)` (token,
ca.crt, namespace; returns the KUBERNETES_SERVICE_* environment), `identity(token)`.
State: `pods(namespace, labels)`, `pod(ns, name)`, `get(plural, name, namespace, group)`,
`create(plural, obj, namespace, group)`, `nodes()`, `add_node(NodeSpec)`,
`remove_node(name)` (a preemption: its pods are killed and deleted), `set_node_capacity(name,
cpu=, memory=, extra=)`, `cordon(name)`, `evict(ns, name)` (graceful), `delete_pod_now(ns,
name)` (forced, gone on return), `set_pod_status(ns, name, status)`, `compact()` (watches
from older versions get 410), `wait_for(predicate, timeout)`; `store` and `cluster` below.
Calls and faults: `calls(verb, resource, since)` (Logged: call.verb/resource/subresource/
namespace/name/query/user, status, injected), `count(...)`, `last_seq()`, `clear_calls()`,
`faults.fail(verb, resource, code, times=1)`, `faults.delay(verb, resource, seconds)`,
`faults.add(...)` (see faults.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import secrets
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from aiohttp import web

from fakes.faults import CallLog

from . import authz, errors, resources
from .api import WATCHES, Api, read_body, respond
from .cluster import Cluster, StandInKubelet
from .faults import Call, Faults, Logged
from .kubeconfig import (
    Identity,
    KubeContext,
    Tls,
    kubeconfig_text,
    make_tls,
    write_incluster_files,
)
from .kubelet_api import Kubelet
from .openapi import group_version_document, openapi_v3_index
from .resources import NAMESPACES, NODES, PODS, SERVICES
from .routing import parse, verb
from .scheduler import NodeSpec, node_object
from .selectors import parse_labels
from .store import Obj, Store

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DEFAULT_NODES = (NodeSpec("node-1"), NodeSpec("node-2"), NodeSpec("node-3"))
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
OPEN_PATHS = ("/version", "/healthz", "/livez", "/readyz")


class KubeServer:
    """A fake API server. `nodes`: the simulated nodes (three 4-cpu 16Gi nodes by default);
    `kubelet`: what runs bound pods (a stand-in that marks them Running by default);
    `history_size`: how many changes watches can replay before 410 Expired."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec] = DEFAULT_NODES,
        kubelet: Kubelet | Callable[[KubeServer], Kubelet] | None = None,
        history_size: int = 20000,
    ) -> None:
        # The port and the CA exist from the start, so a kubelet made before the server
        # starts can be given the service environment and the serviceaccount files.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.tls: Tls = make_tls()
        self.store = Store(history_size=history_size)
        self.faults = Faults()
        self.token = secrets.token_urlsafe(24)
        self._identities: dict[str, Identity] = {
            self.token: Identity("kube-admin", ("system:masters", "system:authenticated"))
        }
        self._node_specs = list(nodes)
        self._node_index = itertools.count()
        self._log = CallLog[Logged]()
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="kube-fake-")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._app: web.Application | None = None
        self.kubelet: Kubelet = self._make_kubelet(kubelet)
        self.cluster = Cluster(self.store, self.kubelet)
        self.api = Api(self.store, self.cluster, self.kubelet, self.mint_token)

    def _make_kubelet(self, kubelet: Kubelet | Callable[[KubeServer], Kubelet] | None) -> Kubelet:
        if kubelet is None:
            return StandInKubelet()
        if hasattr(kubelet, "run_pod"):
            return cast(Kubelet, kubelet)
        return kubelet(self)

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> KubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> KubeServer:
        for name in SYSTEM_NAMESPACES:
            self.api.create_object(NAMESPACES, None, {"metadata": {"name": name}})
        self.api.create_object(
            SERVICES,
            "default",
            {
                "metadata": {
                    "name": "kubernetes",
                    "labels": {"component": "apiserver", "provider": "kubernetes"},
                },
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.port}]},
            },
        )
        for spec in self._node_specs:
            self.add_node(spec)
        self.cluster.start()
        ready = threading.Event()
        failure: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._serve, args=(ready, failure), name="kube-fake-api", daemon=True
        )
        self._thread.start()
        ready.wait(timeout=30)
        if failure:
            raise RuntimeError("the fake API server did not start") from failure[0]
        return self

    def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:  # reported to start()
            failure.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    async def _listen(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 2**20)
        app[WATCHES] = set()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._app = app
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        context = self.tls.server_context(Path(self._tmp.name))
        site = web.SockSite(self._runner, self._socket, ssl_context=context)
        await site.start()

    def close(self) -> None:
        loop = self._loop
        if loop is not None and self._thread is not None:
            future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            with contextlib.suppress(Exception):
                future.result(timeout=15)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=15)
            self._loop = None
        self.cluster.stop_scheduling()
        self.kubelet.close()
        self.cluster.close()
        self._socket.close()
        self._tmp.cleanup()

    async def _shutdown(self) -> None:
        if self._app is not None:
            watches: set[asyncio.Queue[Any]] = self._app[WATCHES]
            for queue in [*watches]:
                queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self.tls.ca_pem

    @property
    def ca_file(self) -> Path:
        path = Path(self._tmp.name) / "ca.crt"
        if not path.exists():
            path.write_bytes(self.ca_pem)
        return path

    # -- authentication, call log and faults -----------------------------------------

    def mint_token(self, namespace: str, serviceaccount: str) -> str:
        """A new token for the serviceaccount (which need not exist yet)."""
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._identities[token] = Identity.of_serviceaccount(namespace, serviceaccount)
        return token

    def identity(self, token: str) -> Identity | None:
        with self._lock:
            return self._identities.get(token)

    def _authenticate(self, request: web.Request) -> Identity | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.identity(token.strip())

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        identity = self._authenticate(request)
        call = self._call(request, identity)
        status, injected = 500, False
        try:
            if identity is None and request.path not in OPEN_PATHS:
                raise errors.unauthorized()
            failing = None
            for fault in self.faults.pick(call):  # fakes/faults.py's fire, without blocking
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.effect is not None:
                    fault.effect(call)
                if fault.fails:
                    failing = fault
            if failing is not None and not failing.after:
                injected = True
                raise errors.from_code(failing.code or 500, failing.message, failing.reason)
            response = await handler(request)
            if failing is not None:
                injected = True
                raise errors.from_code(failing.code or 500, failing.message, failing.reason)
            status = response.status
            return response
        except errors.ApiError as exc:
            status = exc.code
            return respond(exc.status(), exc.code)
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            traceback.print_exc()
            error = errors.ApiError(500, "InternalError", f"fake API server error: {exc!r}")
            return respond(error.status(), 500)
        finally:
            with self._lock:
                self._log.append(Logged(call, status, injected))

    def _call(self, request: web.Request, identity: Identity | None) -> Call:
        target = parse(request.path)
        query = dict(request.query)
        return Call(
            seq=next(self._seq),
            method=request.method,
            path=request.path,
            verb=verb(request.method, target, query),
            resource=target.resource.plural if target else "",
            subresource=target.subresource if target else "",
            group=target.resource.group if target else "",
            namespace=target.namespace if target else None,
            name=target.name if target else None,
            query=query,
            user=identity.user if identity else None,
        )

    def calls(
        self, verb: str | None = None, resource: str | None = None, since: int = 0
    ) -> list[Logged]:
        """The calls served so far (optionally of one verb, resource; after seq `since`)."""
        with self._lock:
            log = self._log.entries()
        return [
            c
            for c in log
            if (verb is None or c.call.verb == verb)
            and (resource is None or c.call.resource == resource)
            and c.call.seq > since
        ]

    def count(self, verb: str | None = None, resource: str | None = None, since: int = 0) -> int:
        return len(self.calls(verb, resource, since))

    def last_seq(self) -> int:
        with self._lock:
            log = self._log.entries()
            return log[-1].call.seq if log else 0

    def clear_calls(self) -> None:
        with self._lock:
            self._log.clear()

    # -- dispatch ----------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/") == authz.PATH:
            return await self._access_review(request)
        discovery = self._discovery(request.path)
        if discovery is not None:
            if request.method != "GET":
                raise errors.ApiError(405, "MethodNotAllowed", "discovery is read-only")
            return respond(discovery)
        target = parse(request.path)
        if target is None:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        return await self.api.handle(request, target, verb(request.method, target, request.query))

    async def _access_review(self, request: web.Request) -> web.StreamResponse:
        """POST a SelfSubjectAccessReview: 201 with its status (fakes/kube/authz.py)."""
        if request.method != "POST":
            raise errors.ApiError(405, "MethodNotAllowed", "the server does not allow this method")
        identity = self._authenticate(request)
        assert identity is not None  # the middleware refused anonymous calls
        body = await read_body(request)
        if not isinstance(body, dict) or body.get("kind") not in (None, authz.KIND):
            raise errors.bad_request(f"expected a {authz.KIND}")
        return respond(authz.review(self.store, identity, body), 201)

    def _discovery(self, path: str) -> Any:
        path = path.rstrip("/") or "/"
        if path == "/version":
            return resources.VERSION_INFO
        if path in ("/healthz", "/livez", "/readyz"):
            return "ok"
        if path == "/api":
            return resources.api_versions()
        if path == "/api/v1":
            return resources.resource_list("")
        if path == "/apis":
            return resources.api_group_list()
        if path == "/openapi/v3":
            return openapi_v3_index()
        if path.startswith("/openapi/v3/"):
            return group_version_document(path.removeprefix("/openapi/v3/"))
        parts = path.strip("/").split("/")
        if parts[:2] == ["apis", authz.GROUP] and len(parts) == 3 and parts[2] == "v1":
            return authz.resource_list()
        if parts[0] == "apis" and len(parts) == 2:
            return resources.api_group(parts[1])
        if parts[0] == "apis" and len(parts) == 3 and resources.api_group(parts[1]):
            return resources.resource_list(parts[1]) if parts[2] == "v1" else None
        return None

    # -- files for clients -------------------------------------------------------------

    def kubeconfig(
        self,
        context: str = "kube-fake",
        namespace: str = "default",
        extra: Iterable[KubeContext] = (),
    ) -> str:
        """The text of a kubeconfig whose current context `context` is the admin user in
        `namespace`; `extra` adds contexts (e.g. a serviceaccount's token)."""
        contexts = [KubeContext(context, self.token, namespace, user="kube-admin"), *extra]
        return kubeconfig_text(self.url, self.ca_pem, contexts, context)

    def write_kubeconfig(
        self,
        path: Path | str,
        context: str = "kube-fake",
        namespace: str = "default",
        extra: Iterable[KubeContext] = (),
    ) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.kubeconfig(context, namespace, extra))
        path.chmod(0o600)
        return path

    def serviceaccount_files(
        self, directory: Path | str, namespace: str = "default", serviceaccount: str = "default"
    ) -> dict[str, str]:
        """Write token, ca.crt and namespace (a new token of the serviceaccount) into
        `directory`, and return the environment of a pod: KUBERNETES_SERVICE_HOST/PORT."""
        token = self.mint_token(namespace, serviceaccount)
        write_incluster_files(Path(directory), token, self.ca_pem, namespace)
        return self.service_env()

    # -- what a kubelet needs (FakeKubelet(**server.kubelet_options())) ----------------

    def service_env(self) -> dict[str, str]:
        """The variables every container gets to find the API server."""
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.port),
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{self.port}",
        }

    def service_account_file_contents(self, namespace: str, account: str) -> dict[str, bytes]:
        """token (a new one), ca.crt and namespace, as mounted into a pod."""
        token = self.mint_token(namespace, account)
        return {"token": token.encode(), "ca.crt": self.ca_pem, "namespace": namespace.encode()}

    def lookup(self, namespace: str, kind: str, name: str, key: str) -> str | None:
        """A ConfigMap's or Secret's value (decoded) for env valueFrom references."""
        plural = {"ConfigMap": "configmaps", "Secret": "secrets"}.get(kind)
        obj = self.get(plural, name, namespace) if plural else None
        if obj is None:
            return None
        if kind == "Secret":
            value = (obj.get("data") or {}).get(key)
            return None if value is None else base64.b64decode(value).decode()
        found = (obj.get("data") or {}).get(key)
        return None if found is None else str(found)

    def node_ip(self, node_name: str) -> str:
        node = self.get("nodes", node_name)
        for address in ((node or {}).get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
        return "127.17.0.1"

    def kubelet_options(self) -> dict[str, Any]:
        """The keyword arguments of fakes/kube/kubelet.py's FakeKubelet that wire it to
        this server: KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options()))."""
        return {
            "service_account_files": self.service_account_file_contents,
            "service_env": self.service_env(),
            "lookup": self.lookup,
            "host_ip": self.node_ip,
        }

    # -- helpers for tests -------------------------------------------------------------

    def create(self, plural: str, obj: Obj, namespace: str | None = None, group: str = "") -> Obj:
        """Create an object as a client would (validation, defaults, scheduling)."""
        resource = resources.find(group, plural)
        assert resource is not None, f"unknown resource {group}/{plural}"
        if resource.namespaced:
            namespace = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        return copy.deepcopy(self.api.create_object(resource, namespace, obj))

    def get(self, plural: str, name: str, namespace: str = "", group: str = "") -> Obj | None:
        resource = resources.find(group, plural)
        assert resource is not None, f"unknown resource {group}/{plural}"
        found = self.store.find(resource, namespace, name)
        return copy.deepcopy(found) if found else None

    def pods(self, namespace: str | None = None, labels: str | None = None) -> list[Obj]:
        """Copies of the pods (in `namespace`, None: all), matching a label selector."""
        found, _ = self.store.list(PODS, namespace, parse_labels(labels))
        return copy.deepcopy(found)

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.get("pods", name, namespace)

    def nodes(self) -> list[Obj]:
        return copy.deepcopy(self.store.list(NODES)[0])

    def add_node(self, spec: NodeSpec) -> Obj:
        obj = self.store.create(NODES, node_object(spec, next(self._node_index)))
        self.cluster.kick()
        return copy.deepcopy(obj)

    def set_node_capacity(
        self,
        name: str,
        cpu: str | None = None,
        memory: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> Obj:
        """Change a node's capacity and allocatable (the scheduler retries pending pods)."""

        def edit(node: Obj) -> None:
            for key in ("capacity", "allocatable"):
                values = node["status"][key]
                if cpu is not None:
                    values["cpu"] = cpu
                if memory is not None:
                    values["memory"] = memory
                values.update(extra or {})

        node = self.store.change(NODES, "", name, edit)
        self.cluster.kick()
        return copy.deepcopy(node)

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        self.store.change(
            NODES, "", name, lambda n: n["spec"].__setitem__("unschedulable", unschedulable)
        )
        self.cluster.kick()

    def remove_node(self, name: str) -> None:
        """The node vanishes (a spot preemption): its pods are stopped at once and deleted."""
        self.store.remove(NODES, "", name)
        for pod in self.store.list(PODS)[0]:
            if pod["spec"].get("nodeName") == name:
                meta = pod["metadata"]
                with contextlib.suppress(errors.ApiError):
                    self.delete_pod_now(meta["namespace"], meta["name"])

    def delete_pod_now(self, namespace: str, name: str) -> None:
        """Force-delete a pod: the kubelet kills it without grace, the object is gone when
        this returns (`kubectl delete --force --grace-period=0`)."""
        pod, gone = self.cluster.delete_pod(namespace, name, 0)
        if not gone:
            self.cluster.wait_stopped(pod["metadata"]["uid"], timeout=60)

    def evict(self, namespace: str, name: str, grace: float | None = None) -> Obj:
        """Delete a pod gracefully, as the eviction API or a node drain does; returns the
        pod as marked for deletion (it is gone once the kubelet has stopped it)."""
        return copy.deepcopy(self.cluster.delete_pod(namespace, name, grace)[0])

    def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge `status` into a pod's status, as its kubelet would report it."""
        self.cluster.update_status(namespace, name, status)

    def compact(self) -> None:
        """Forget the watch history: watches from older resourceVersions get 410."""
        self.store.compact()

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01
    ) -> Any:
        """Poll `predicate` until it returns something truthy (returned), or raise
        TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(interval)
