"""The REST verbs of the fake API server: create, get, list, watch, update, patch, delete,
deletecollection, and the subresources of pods and serviceaccounts."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Callable
from typing import Any

import yaml
from aiohttp import web

from . import errors, kinds, patches, protobuf, tables
from .cluster import Cluster
from .kubelet_api import Kubelet
from .resources import NAMESPACES, PODS, SERVICEACCOUNTS, Resource
from .routing import Target
from .selectors import parse_fields, parse_labels
from .store import Obj, Store, Watcher, decode_continue, encode_continue, key_of

WATCHES: web.AppKey[set[asyncio.Queue[Any]]] = web.AppKey("kube_watches")
JSON = "application/json"


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def respond(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(obj), status=status, content_type=JSON)


def _status_success(resource: Resource, obj: Obj) -> Obj:
    details = {
        "name": obj["metadata"]["name"],
        "kind": resource.plural,
        "uid": obj["metadata"].get("uid"),
    }
    if resource.group:
        details["group"] = resource.group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        raise errors.bad_request("the request body is empty")
    if raw.startswith(protobuf.MAGIC):
        return protobuf.decode(raw)
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise errors.bad_request(f"the body is neither JSON nor YAML: {exc}") from exc


class Api:
    """The verbs over `store`; pods go through `cluster` (scheduler, kubelet); `mint(ns,
    sa)` makes a serviceaccount token (for serviceaccounts/NAME/token)."""

    def __init__(
        self, store: Store, cluster: Cluster, kubelet: Kubelet, mint: Callable[[str, str], str]
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.kubelet = kubelet
        self.mint = mint

    async def handle(self, request: web.Request, target: Target, verb: str) -> web.StreamResponse:
        sub = target.subresource
        if sub in ("exec", "attach", "portforward", "log"):
            return await self.stream(request, target, sub)
        if sub == "eviction" and verb == "create":
            return await self.evict(target)
        if sub == "token" and verb == "create":
            return await self.token(request, target)
        if sub == "binding" and verb == "create":
            return await self.bind(request, target)
        method = {
            "get": self.get,
            "list": self.list,
            "watch": self.watch,
            "create": self.create,
            "update": self.update,
            "patch": self.patch,
            "delete": self.delete,
            "deletecollection": self.delete_collection,
        }.get(verb)
        if method is None or verb not in target.resource.verbs:
            raise errors.ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        return await method(request, target)

    # -- reading -----------------------------------------------------------------------

    def _render(
        self, request: web.Request, resource: Resource, objs: list[Obj], rv: str, single: bool
    ) -> Any:
        if tables.wants_table(request.headers.get("Accept", "")):
            include = request.query.get("includeObject", "Metadata")
            return tables.table(resource.kind, objs, rv, include)
        return objs[0] if single else None

    async def get(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name
        obj = self.store.get(target.resource, target.namespace or "", target.name)
        table = self._render(
            request, target.resource, [obj], obj["metadata"]["resourceVersion"], True
        )
        return respond(table)

    def _selectors(self, request: web.Request, resource: Resource) -> tuple[Any, Any]:
        labels = parse_labels(request.query.get("labelSelector"))
        fields = parse_fields(request.query.get("fieldSelector"), resource.fields)
        return labels, fields

    async def list(self, request: web.Request, target: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, target.resource)
        objs, rv = self.store.list(target.resource, target.namespace, labels, fields)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        token = request.query.get("continue")
        if token:
            token_rv, start = decode_continue(token)
            self.store.check_rv(token_rv)
            objs = [o for o in objs if key_of(o) > start]
        limit = int(request.query.get("limit") or 0)
        if limit and len(objs) > limit:
            meta["remainingItemCount"] = len(objs) - limit
            objs = objs[:limit]
            meta["continue"] = encode_continue(rv, key_of(objs[-1]))
        if tables.wants_table(request.headers.get("Accept", "")):
            result = tables.table(
                target.resource.kind, objs, str(rv), request.query.get("includeObject", "Metadata")
            )
            result["metadata"].update(meta)
            return respond(result)
        body = {
            "kind": target.resource.list_kind,
            "apiVersion": target.resource.api_version,
            "metadata": meta,
            "items": objs,
        }
        return respond(body)

    async def watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        labels, fields = self._selectors(request, target.resource)
        if target.name:  # a legacy watch of one object
            fields = parse_fields(f"metadata.name={target.name}", ())
        since_text = request.query.get("resourceVersion", "")
        since = None if since_text in ("", "0") else int(since_text)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()

        def push(kind: str, obj: Obj) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped
                loop.call_soon_threadsafe(queue.put_nowait, (kind, obj))

        watcher = Watcher(target.resource, target.namespace, labels, fields, push)
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        try:
            replay = self.store.watch(watcher, since)
        except errors.ApiError as exc:
            if exc.code != 410:
                raise
            replay = []
            queue.put_nowait(("ERROR", exc.status()))
            queue.put_nowait(None)
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        response = web.StreamResponse(headers={"Content-Type": JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        request.app[WATCHES].add(queue)
        try:
            for kind, obj in replay:
                queue.put_nowait((kind, obj))
            await self._stream_events(response, queue, target.resource, as_table, timeout)
        finally:
            request.app[WATCHES].discard(queue)
            self.store.unwatch(watcher)
        return response

    async def _stream_events(
        self,
        response: web.StreamResponse,
        queue: asyncio.Queue[tuple[str, Obj] | None],
        resource: Resource,
        as_table: bool,
        timeout: float,
    ) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            try:
                item = await asyncio.wait_for(queue.get(), left)
            except TimeoutError:
                return
            if item is None:
                return
            kind, obj = item
            if as_table and kind != "ERROR":
                obj = tables.table(
                    resource.kind, [obj], obj["metadata"]["resourceVersion"], "Metadata"
                )
            try:
                await response.write((dumps({"type": kind, "object": obj}) + "\n").encode())
            except (ConnectionResetError, RuntimeError):
                return

    # -- writing -----------------------------------------------------------------------

    def _check_namespace(self, resource: Resource, namespace: str, name: str) -> None:
        ns = self.store.find(NAMESPACES, "", namespace)
        if ns is None:
            raise errors.not_found("", "namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                f'{resource.plural} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated"
            )

    async def create(self, request: web.Request, target: Target) -> web.StreamResponse:
        if target.name:
            raise errors.ApiError(405, "MethodNotAllowed", "POST to a named object")
        body = await read_body(request)
        obj = self.create_object(target.resource, target.namespace, body, _dry_run(request))
        return respond(obj, 201)

    def create_object(
        self, resource: Resource, namespace: str | None, body: Any, dry_run: bool = False
    ) -> Obj:
        """Validate, default and store a new object (also used by the server's helpers);
        `dry_run`: all but the storing (the answer has no uid nor resourceVersion)."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body must be an object")
        return self._create(resource, namespace, copy.deepcopy(body), dry_run)

    def _create(self, resource: Resource, namespace: str | None, body: Obj, dry_run: bool) -> Obj:
        meta = body.setdefault("metadata", {})
        if resource.namespaced:
            assert namespace is not None
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for server_set in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            meta.pop(server_set, None)
        kinds.prepare_create(resource, body)
        shown = meta.get("name") or meta.get("generateName") or ""
        if resource.namespaced:
            self._check_namespace(resource, namespace or "", shown)
        if not meta.get("name") and meta.get("generateName"):
            kinds.validate(
                resource,
                dict(body, metadata=dict(meta, name=meta["generateName"].rstrip("-.") or "x")),
            )
        else:
            kinds.validate(resource, body)
        if resource is PODS:
            self._admit_pod(body)
        if dry_run:
            body["kind"], body["apiVersion"] = resource.kind, resource.api_version
            meta.setdefault("name", meta.get("generateName", "") + "dryrun")
            return body
        obj = self.store.create(resource, body)
        self._after_create(resource, obj)
        return obj

    def _admit_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        account = pod["spec"]["serviceAccountName"]
        sa = self.store.find(SERVICEACCOUNTS, meta["namespace"], account)
        if sa is None:
            raise errors.forbidden(
                f'pods "{meta.get("name") or meta.get("generateName")}" is forbidden: error '
                f"looking up service account {meta['namespace']}/{account}: serviceaccount "
                f'"{account}" not found'
            )
        self.cluster.check_quota(pod)

    def _after_create(self, resource: Resource, obj: Obj) -> None:
        if resource is NAMESPACES:
            with contextlib.suppress(errors.ApiError):
                self.store.create(
                    SERVICEACCOUNTS,
                    {"metadata": {"name": "default", "namespace": obj["metadata"]["name"]}},
                )
        elif resource is PODS:
            self.cluster.pod_created(obj)

    async def update(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name
        body = await read_body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the body must be an object")
        name = (body.get("metadata") or {}).get("name")
        if name not in (None, target.name):
            raise errors.bad_request(
                f"the name of the object ({name}) does not match the name on the URL "
                f"({target.name})"
            )
        expect = (body.get("metadata") or {}).get("resourceVersion") or None
        return respond(self._store_update(target, body, expect, _dry_run(request)))

    def _store_update(
        self, target: Target, new: Obj, expect: str | None, dry_run: bool = False
    ) -> Obj:
        assert target.name
        with self.store.lock:
            old = self.store.get(target.resource, target.namespace or "", target.name)
            if expect and expect != old["metadata"]["resourceVersion"]:
                raise errors.conflict(target.resource.group, target.resource.plural, target.name)
            new = kinds.prepare_update(target.resource, old, copy.deepcopy(new), target.subresource)
            if target.namespace:
                new["metadata"]["namespace"] = target.namespace
            if dry_run:
                return new
            stored = self.store.replace(target.resource, new)
        if target.resource is PODS:
            self.cluster.kick()
        return stored

    async def patch(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"the patch is not JSON: {exc}") from exc
        content_type = request.headers.get("Content-Type", "")
        if content_type.startswith(patches.APPLY_PATCH):
            raise errors.ApiError(
                415,
                "UnsupportedMediaType",
                "server-side apply is not supported by the fake API server",
            )
        with self.store.lock:
            old = self.store.get(target.resource, target.namespace or "", target.name)
            patched = patches.apply_patch(copy.deepcopy(old), content_type, body)
            expect = (patched.get("metadata") or {}).get("resourceVersion")
            return respond(self._store_update(target, patched, expect, _dry_run(request)))

    async def delete(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name
        options = await self._delete_options(request)
        obj = self.store.get(target.resource, target.namespace or "", target.name)
        preconditions = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if preconditions.get(field) and preconditions[field] != obj["metadata"].get(field):
                raise errors.conflict(target.resource.group, target.resource.plural, target.name)
        if _dry_run(request) or options.get("dryRun"):
            return respond(obj)
        result, gone = self.delete_object(
            target.resource, target.namespace or "", target.name, options.get("gracePeriodSeconds")
        )
        if target.resource in (PODS, NAMESPACES) or not gone:
            return respond(result)
        return respond(_status_success(target.resource, result))

    def delete_object(
        self, resource: Resource, namespace: str, name: str, grace: float | None
    ) -> tuple[Obj, bool]:
        """Delete one object as the API does; (the object, whether it is already gone)."""
        if resource is PODS:
            return self.cluster.delete_pod(namespace, name, grace)
        if resource is NAMESPACES:
            return self.cluster.delete_namespace(name), False
        obj = self.store.get(resource, namespace, name)
        if obj["metadata"].get("finalizers"):
            return self.store.change(resource, namespace, name, _mark_deleted), False
        return self.store.remove(resource, namespace, name), True

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                with contextlib.suppress(ValueError):
                    options = json.loads(raw) or {}
        if "gracePeriodSeconds" in request.query:
            options["gracePeriodSeconds"] = int(request.query["gracePeriodSeconds"])
        policy = options.get("propagationPolicy") or request.query.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise errors.bad_request(f"propagationPolicy: Unsupported value: {policy!r}")
        return options

    async def delete_collection(self, request: web.Request, target: Target) -> web.StreamResponse:
        options = await self._delete_options(request)
        labels, fields = self._selectors(request, target.resource)
        objs, _ = self.store.list(target.resource, target.namespace, labels, fields)
        deleted = []
        for obj in objs:
            with contextlib.suppress(errors.ApiError):
                namespace, name = key_of(obj)
                deleted.append(
                    self.delete_object(
                        target.resource, namespace, name, options.get("gracePeriodSeconds")
                    )[0]
                )
        return respond(
            {
                "kind": target.resource.list_kind,
                "apiVersion": target.resource.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": deleted,
            }
        )

    # -- subresources ------------------------------------------------------------------

    async def stream(self, request: web.Request, target: Target, sub: str) -> web.StreamResponse:
        assert target.name
        pod = copy.deepcopy(self.store.get(PODS, target.namespace or "", target.name))
        name, phase = target.name, (pod.get("status") or {}).get("phase", "Pending")
        container = request.query.get("container")
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        names += [c["name"] for c in pod["spec"].get("initContainers") or []]
        if container and container not in names:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        if sub == "log":
            if phase == "Pending":
                shown = container or names[0]
                raise errors.bad_request(
                    f'container "{shown}" in pod "{name}" is waiting to start: ContainerCreating'
                )
            return await self.kubelet.log(request, pod)
        if not pod["spec"].get("nodeName"):
            raise errors.bad_request(f"pod {name} does not have a host assigned")
        if phase in ("Succeeded", "Failed"):
            raise errors.bad_request(
                f"cannot {sub} into a container in a completed pod; current phase is {phase}"
            )
        handler = {
            "exec": self.kubelet.exec,
            "attach": self.kubelet.attach,
            "portforward": self.kubelet.portforward,
        }[sub]
        return await handler(request, pod)

    async def evict(self, target: Target) -> web.StreamResponse:
        assert target.name
        pod, _ = self.cluster.delete_pod(target.namespace or "", target.name, None)
        return respond(_status_success(PODS, pod), 201)

    async def token(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name and target.namespace is not None
        self.store.get(target.resource, target.namespace, target.name)
        body = await read_body(request) if request.can_read_body else {}
        token = self.mint(target.namespace, target.name)
        spec = (body or {}).get("spec") or {}
        return respond(
            {
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": target.name, "namespace": target.namespace},
                "spec": spec,
                "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"},
            },
            201,
        )

    async def bind(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name
        body = await read_body(request)
        node = ((body or {}).get("target") or {}).get("name")
        if not node:
            raise errors.bad_request("a Binding needs target.name")
        self.cluster.bind_to(target.namespace or "", target.name, node)
        return respond(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            201,
        )


def _dry_run(request: web.Request) -> bool:
    """Whether the request asks for a dry run (dryRun=All): checked, answered, not done."""
    return bool(request.query.getall("dryRun", []))


def _mark_deleted(obj: Obj) -> None:
    from .store import now

    obj["metadata"].setdefault("deletionTimestamp", now())
