"""Compute's batch endpoint (POST /batch/compute/v1, multipart/mixed) for fakes/gce/server.py:
gcloud sends several requests at once there (e.g. `instances delete A B`). Each part is one
HTTP request (`application/http`); the fake answers it as if it came alone (logged, faults
applied; the batch itself is logged as `compute.batch` with params["parts"]) and returns the answers as parts whose Content-ID is `response-` + the request's."""

from __future__ import annotations

import email.parser
import io
import json
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from fakes.gce.faults import Call, GoogleError

if TYPE_CHECKING:
    from fakes.gce.server import GceServer

BATCH_PATH = "/batch/compute/v1"


def answer_batch(server: GceServer, environ: dict[str, Any]) -> tuple[int, str, bytes]:
    """(HTTP status, content type, body) for a batch request."""
    from fakes.gce.routes import REASONS

    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    if server.iam.token_owner(authorization) is None:
        error = GoogleError(401, "authError", "Request had invalid authentication credentials.")
        return 401, "application/json", json.dumps(error.body()).encode()
    head = f"Content-Type: {environ.get('CONTENT_TYPE', '')}\r\n\r\n".encode()
    message = email.parser.BytesParser().parsebytes(head + raw)
    if not message.is_multipart():
        error = GoogleError(400, "badRequest", "Batch requests must be multipart/mixed.")
        return 400, "application/json", json.dumps(error.body()).encode()
    parts = message.get_payload()
    call = Call(
        server.next_seq(), "compute.batch", "POST", BATCH_PATH, {"parts": str(len(parts))}, None
    )
    server.record(call, 200, None, False)
    boundary = f"batch_{uuid.uuid4().hex}"
    out = []
    for part in parts:
        payload = part.get_payload()
        request_line, _, rest = str(payload).replace("\r\n", "\n").partition("\n")
        verb, target, _ = request_line.strip().split(" ", 2)
        inner = email.parser.Parser().parsestr(rest)
        body = str(inner.get_payload() or "").encode()
        url = urlsplit(target)
        sub = {
            "PATH_INFO": unquote(url.path),
            "QUERY_STRING": url.query,
            "REQUEST_METHOD": verb,
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "HTTP_AUTHORIZATION": inner.get("Authorization") or authorization,
            "HTTP_USER_AGENT": inner.get("User-Agent") or environ.get("HTTP_USER_AGENT", ""),
        }
        status, answer = server._answer(sub)
        content_id = str(part.get("Content-ID", "<>"))[1:-1]
        out.append(
            f"--{boundary}\r\nContent-Type: application/http\r\n"
            f"Content-ID: <response-{content_id}>\r\n\r\n"
            f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n"
            f"Content-Type: application/json; charset=UTF-8\r\n\r\n{json.dumps(answer)}\r\n"
        )
    out.append(f"--{boundary}--\r\n")
    return 200, f"multipart/mixed; boundary={boundary}", "".join(out).encode()
