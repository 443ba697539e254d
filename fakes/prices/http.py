"""The loopback HTTP server under each price fake: a free port on 127.0.0.1, a call log, and
switches for an unreachable or slow API."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"

    @staticmethod
    def json(value: Any, status: int = 200, content_type: str = "application/json") -> Answer:
        return Answer(status, json.dumps(value).encode(), content_type)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[[Request], Answer]


class LoopbackServer:
    """Serves `handle` on 127.0.0.1 (a free port) in a thread; a context manager."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle
        self.calls: list[Request] = []
        self.offline = False  # every call answers 503, as an unreachable API behind a proxy
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Request(
                    self.command,
                    parts.path,
                    parts.query,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length) if length else b"",
                )
                answer = fake.answer(request)
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_GET = do_POST = _serve

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, request: Request) -> Answer:
        with self._lock:
            self.calls.append(request)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.offline:
            return Answer.json({"message": "Service Unavailable"}, 503)
        return self._handle(request)
