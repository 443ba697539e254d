"""The Kubernetes channel protocols over websockets, server side, for exec, attach and
port-forward.

Every websocket message carries one channel's data: its first byte is the channel number
(binary protocols) or, in the base64 ones, a text message whose first character is the
channel digit and the rest the data in base64. Exec and attach use 0 stdin, 1 stdout,
2 stderr, 3 error (a v1 Status as JSON from v4 on, plain text before), 4 resize (from v3 on:
{"Width": W, "Height": H}); v5 adds 255 CLOSE ([255, channel]: the client will send no more
on that channel, which is how stdin gets its end of file). Port-forward (v4 and the plain
channel.k8s.io) gives port i the channels 2i (data) and 2i+1 (error).

A client that asks for no subprotocol gets channel.k8s.io, as from the kubelet.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import WSMsgType, web

EXEC_PROTOCOLS = (
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
)
PORTFORWARD_PROTOCOLS = (
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
)
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
_ENDED = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


def status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A v1 Status object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def status_response(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status(code, reason, message), status=code)


def exit_status(exit_code: int) -> dict[str, Any]:
    """What the error channel says when the command has ended."""
    if exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {exit_code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
    }


def new_websocket(protocols: tuple[str, ...]) -> web.WebSocketResponse:
    # No size limit: clients send stdin in messages of any size (the Python client writes
    # what it is given in one). No compression: tar streams go through.
    return web.WebSocketResponse(protocols=protocols, max_msg_size=0, compress=False)


class Channels:
    """A prepared websocket speaking one of the channel protocols."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.protocol = ws.ws_protocol or "channel.k8s.io"
        self.base64 = "base64" in self.protocol
        version = self.protocol.split(".", 1)[0]
        self.version = int(version[1:]) if version.startswith("v") else 1

    @property
    def closed(self) -> bool:
        return self.ws.closed

    async def send(self, channel: int, data: bytes) -> None:
        if self.base64:
            await self.ws.send_str(chr(ord("0") + channel) + base64.b64encode(data).decode())
        else:
            await self.ws.send_bytes(bytes((channel,)) + data)

    async def send_error(self, body: dict[str, Any]) -> None:
        """The error channel: a Status (v4 and later) or its message (earlier versions)."""
        if self.version >= 4:
            await self.send(ERROR, json.dumps(body).encode())
        elif body.get("status") != "Success":
            await self.send(ERROR, str(body.get("message", "")).encode())

    async def receive(self) -> tuple[int, bytes] | None:
        """The next (channel, data) from the client; None once it has closed."""
        while True:
            message = await self.ws.receive()
            if message.type == WSMsgType.BINARY:
                raw: bytes = message.data
            elif message.type == WSMsgType.TEXT:
                raw = message.data.encode()
            elif message.type in _ENDED:
                return None
            else:
                continue
            if not raw:
                continue
            if self.base64:
                return raw[0] - ord("0"), base64.b64decode(raw[1:])
            return raw[0], raw[1:]

    async def close(self) -> None:
        if not self.ws.closed:
            await self.ws.close()
