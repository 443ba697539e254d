"""The page's HTTP server (aiohttp): the page, its static files, and JSON views of what the
collector holds. Every request must carry the token the URL was printed with (`?token=`,
or the `X-Token` header): without it, 403. Listens on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from launcher.web import model
from launcher.web.collector import Collector

STATIC = Path(str(resources.files("launcher.web") / "static"))
DEFAULT_LIMIT = 100
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".txt": "text/plain"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
COLLECTOR = web.AppKey("collector", Collector)
TOKEN = web.AppKey("token", str)
CACHE = web.AppKey("cache", dict)
FORWARDS = web.AppKey("forwards", dict)


def new_token() -> str:
    return secrets.token_urlsafe(24)


@web.middleware
async def _token_check(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.query.get("token") or request.headers.get("X-Token") or ""
    if not hmac.compare_digest(given.encode(), request.app[TOKEN].encode()):
        return web.json_response({"error": "a valid token is required"}, status=403)
    return await handler(request)


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be a whole number") from None


def _json(data: Any) -> web.Response:
    return web.Response(
        text=json.dumps(data, separators=(",", ":")), content_type="application/json"
    )


def _cluster(request: web.Request) -> tuple[Any, model.Live | None, Any, int]:
    collector = request.app[COLLECTOR]
    found = collector.snapshot(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound(text="no such cluster")
    record, live, events = found
    return record, live, events, collector.generation


def _cached(request: web.Request, what: str, make: Callable[[], Any]) -> Any:
    """`make()` once per cluster and collector generation."""
    key = (what, request.match_info["name"])
    generation = request.app[COLLECTOR].generation
    cache: dict[tuple[str, str], tuple[int, Any]] = request.app[CACHE]
    hit = cache.get(key)
    if hit is not None and hit[0] == generation:
        return hit[1]
    value = make()
    cache[key] = (generation, value)
    return value


async def index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["file"]
    path = (STATIC / name).resolve()
    if path.parent != STATIC.resolve() or not path.is_file():
        raise web.HTTPNotFound()
    kind = _TYPES.get(path.suffix, "application/octet-stream")
    return web.FileResponse(path, headers={"Content-Type": kind})


async def clusters(request: web.Request) -> web.StreamResponse:
    collector = request.app[COLLECTOR]
    records, live = collector.everything()
    now = time.time()
    rows = model.cluster_rows(records, live, now)
    return _json({"generation": collector.generation, "now": now, "clusters": rows})


async def cluster(request: web.Request) -> web.StreamResponse:
    record, live, events, generation = _cluster(request)
    counts = _cached(request, "counts", lambda: model.event_counts(events))
    detail = model.cluster_detail(record, live, counts, time.time())
    return _json({"generation": generation, "cluster": detail})


async def nodes(request: web.Request) -> web.StreamResponse:
    record, live, _, _ = _cluster(request)
    rows = _cached(request, "nodes", lambda: model.node_rows(record, live, time.time()))
    shown = model.filter_rows(
        rows, request.query.get("q", ""), ("id", "node_type", "state", "address")
    )
    offset, limit = _int(request, "offset", 0), _int(request, "limit", DEFAULT_LIMIT)
    return _json(model.page(shown, offset, limit))


async def decisions(request: web.Request) -> web.StreamResponse:
    _, live, events, _ = _cluster(request)
    rows = _cached(request, "decisions", lambda: model.decision_rows(events, live))
    view = model.decisions_view(
        rows,
        request.query.get("action", ""),
        request.query.get("q", ""),
        _int(request, "offset", 0),
        _int(request, "limit", DEFAULT_LIMIT),
    )
    return _json(view)


async def reclaims(request: web.Request) -> web.StreamResponse:
    _, _, events, _ = _cluster(request)
    rows = _cached(request, "reclaims", lambda: model.reclaim_rows(events))
    return _json(
        model.page(rows, _int(request, "offset", 0), _int(request, "limit", DEFAULT_LIMIT))
    )


async def series(request: web.Request) -> web.StreamResponse:
    _, live, events, _ = _cluster(request)
    return _json(_cached(request, "series", lambda: model.series(events, live)))


async def runs(request: web.Request) -> web.StreamResponse:
    _, live, _, _ = _cluster(request)
    return _json({"runs": model.run_rows(live.runs if live else (), time.time())})


async def ray_dashboard(request: web.Request) -> web.StreamResponse:
    """Forward the cluster's Ray dashboard to a free port here (once; kept while the page
    is served) and answer with its URL, or why it cannot be reached."""
    record, _, _, _ = _cluster(request)
    forwards: dict[str, Any] = request.app[FORWARDS]
    if record.name not in forwards or "error" in forwards[record.name]:
        loop = asyncio.get_running_loop()
        forwards[record.name] = await loop.run_in_executor(None, _forward, record, forwards)
    answer = forwards[record.name]
    return _json({k: v for k, v in answer.items() if k != "stack"})


def _forward(record: Any, forwards: dict[str, Any]) -> dict[str, Any]:
    from launcher.cluster.dashboard import forwarded_dashboard
    from launcher.cluster.head import connect
    from launcher.config.loader import Overrides, parse_config
    from launcher.errors import LauncherError

    stack = contextlib.ExitStack()
    try:
        config = parse_config(
            record.config_text,
            record.config_path,
            Overrides(cluster_name=record.name),
            local_files=False,
        )
        url, _ = stack.enter_context(forwarded_dashboard(connect(config), free_port(), None))
    except LauncherError as exc:
        stack.close()
        return {"error": str(exc)}
    return {"url": url, "stack": stack}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


async def _close_forwards(app: web.Application) -> None:
    for forward in app[FORWARDS].values():
        if "stack" in forward:
            forward["stack"].close()


def make_app(collector: Collector, token: str) -> web.Application:
    app = web.Application(middlewares=[_token_check])
    app[COLLECTOR] = collector
    app[TOKEN] = token
    app[CACHE] = {}
    app[FORWARDS] = {}
    app.on_cleanup.append(_close_forwards)
    app.router.add_get("/", index)
    app.router.add_get("/static/{file}", static)
    app.router.add_get("/api/clusters", clusters)
    app.router.add_get("/api/clusters/{name}", cluster)
    app.router.add_get("/api/clusters/{name}/nodes", nodes)
    app.router.add_get("/api/clusters/{name}/decisions", decisions)
    app.router.add_get("/api/clusters/{name}/reclaims", reclaims)
    app.router.add_get("/api/clusters/{name}/series", series)
    app.router.add_get("/api/clusters/{name}/runs", runs)
    app.router.add_post("/api/clusters/{name}/ray-dashboard", ray_dashboard)
    return app


def serve(
    collector: Collector,
    *,
    host: str,
    port: int,
    token: str,
    ready: Callable[[str], None],
) -> None:
    """Serve the page until interrupted; `ready` gets its URL (with the token) once it
    listens."""

    async def main() -> None:
        runner = web.AppRunner(make_app(collector, token), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        shown = f"[{host}]" if ":" in host else host
        ready(f"http://{shown}:{bound}/?token={token}")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    collector.start()
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main())
    finally:
        collector.stop()
