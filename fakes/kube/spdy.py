"""Port-forward as kubectl 1.31+ does it: SPDY/3.1 carried in a websocket (subprotocol
"SPDY/3.1+portforward.k8s.io"; the websocket's binary messages are a byte stream of SPDY
frames, cut anywhere), speaking the portforward.k8s.io stream protocol.

SPDY/3.1 as far as port-forward needs it: control frames (SYN_STREAM, SYN_REPLY,
RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE) and data frames, header blocks
compressed with one zlib stream per direction (the client's with SPDY/3's dictionary;
ours without one, which a zlib reader given a dictionary accepts). No flow control, as in
the Go implementation kubectl uses.

portforward.k8s.io: for each local connection the client opens an "error" stream and a
"data" stream with the same `requestid` and the pod's `port`. Once both exist the kubelet
connects to the pod (its IP, then 127.0.0.1, as in portforward.py) and copies both ways;
the client's FIN on the data stream shuts the connection's write side; when the pod closes
it, the data stream gets a FIN, and the error stream too (with a message first if the
connection could not be made), which is what the client waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from fakes.kube.portforward import CHUNK, dial

PROTOCOL = "SPDY/3.1+portforward.k8s.io"
VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
    9,
)
FLAG_FIN = 0x01


def _dictionary() -> bytes:
    """SPDY/3's header compression dictionary (its specification, section 2.6.10.1)."""
    words = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
    ]
    words += ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive"]
    words += ["origin"]
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
        "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
        "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
        "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
        "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
        "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,"
        "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    return b"".join(struct.pack(">I", len(w)) + w.encode() for w in words) + tail.encode()


DICTIONARY = _dictionary()
assert zlib.adler32(DICTIONARY) == 0xE3C6A7C2, "SPDY/3 dictionary"


class ProtocolError(Exception):
    pass


def control_frame(kind: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(body)) + body


def data_frame(stream_id: int, data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


def encode_headers(headers: dict[str, str]) -> bytes:
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        out += [struct.pack(">I", len(name)), name.encode()]
        out += [struct.pack(">I", len(value)), value.encode()]
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, str]:
    (count,) = struct.unpack_from(">I", block)
    offset, headers = 4, {}
    for _ in range(count):
        (size,) = struct.unpack_from(">I", block, offset)
        name = block[offset + 4 : offset + 4 + size].decode()
        offset += 4 + size
        (size,) = struct.unpack_from(">I", block, offset)
        headers[name] = block[offset + 4 : offset + 4 + size].decode()
        offset += 4 + size
    return headers


@dataclass
class Stream:
    id: int
    headers: dict[str, str]
    remote_closed: bool = False
    writer: asyncio.StreamWriter | None = None
    pending: list[bytes] = field(default_factory=list)  # data before the pod connection


class SpdyPortForward:
    """One kubectl port-forward session over a prepared websocket."""

    def __init__(self, ws: web.WebSocketResponse, ip: str, pod_name: str) -> None:
        self.ws = ws
        self.ip = ip
        self.pod_name = pod_name
        self.inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.deflate = zlib.compressobj()
        self.streams: dict[int, Stream] = {}
        self.pairs: dict[str, dict[str, Stream]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        buffer = bytearray()
        try:
            while True:
                message = await self.ws.receive()
                if message.type != WSMsgType.BINARY:
                    if message.type == WSMsgType.TEXT:
                        continue
                    return
                buffer += message.data
                while len(buffer) >= 8:
                    (length,) = struct.unpack_from(">I", buffer, 4)
                    length &= 0xFFFFFF
                    if len(buffer) < 8 + length:
                        break
                    frame = bytes(buffer[: 8 + length])
                    del buffer[: 8 + length]
                    await self._frame(frame)
        except ProtocolError:
            await self._send(control_frame(GOAWAY, struct.pack(">II", 0, 1)))
        finally:
            for task in self.tasks:
                task.cancel()
            for stream in self.streams.values():
                if stream.writer is not None:
                    stream.writer.close()
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.close()

    async def _send(self, frame: bytes) -> None:
        if not self.ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_bytes(frame)

    async def _frame(self, frame: bytes) -> None:
        first, flags_length = struct.unpack_from(">II", frame)
        flags = flags_length >> 24
        body = frame[8:]
        if not first & 0x80000000:
            await self._data(first & 0x7FFFFFFF, flags, body)
            return
        kind = first & 0xFFFF
        if kind == SYN_STREAM:
            stream_id = struct.unpack_from(">I", body)[0] & 0x7FFFFFFF
            headers = decode_headers(self.inflate.decompress(body[10:]))
            await self._open(Stream(stream_id, headers, remote_closed=bool(flags & FLAG_FIN)))
        elif kind == HEADERS:
            self.inflate.decompress(body[4:])  # keep the zlib stream in step
        elif kind == RST_STREAM:
            stream = self.streams.pop(struct.unpack_from(">I", body)[0] & 0x7FFFFFFF, None)
            if stream is not None and stream.writer is not None:
                stream.writer.close()
        elif kind == PING:
            await self._send(control_frame(PING, body[:4]))
        elif kind == GOAWAY:
            raise ProtocolError("the client went away")
        elif kind not in (SETTINGS, WINDOW_UPDATE, SYN_REPLY):
            raise ProtocolError(f"unexpected SPDY control frame {kind}")

    async def _open(self, stream: Stream) -> None:
        self.streams[stream.id] = stream
        block = self.deflate.compress(encode_headers({})) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
        await self._send(control_frame(SYN_REPLY, struct.pack(">I", stream.id) + block))
        kind = stream.headers.get("streamtype", "")
        pair = self.pairs.setdefault(stream.headers.get("requestid", ""), {})
        pair[kind] = stream
        if "error" in pair and "data" in pair:
            task = asyncio.ensure_future(self._forward(pair["data"], pair["error"]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _data(self, stream_id: int, flags: int, data: bytes) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if data:
            if stream.writer is None:
                stream.pending.append(data)
            elif not stream.writer.is_closing():
                stream.writer.write(data)
                with contextlib.suppress(ConnectionError):
                    await stream.writer.drain()
        if flags & FLAG_FIN:
            stream.remote_closed = True
            if stream.writer is not None and stream.writer.can_write_eof():
                with contextlib.suppress(OSError):
                    stream.writer.write_eof()

    async def _forward(self, data: Stream, error: Stream) -> None:
        port = int(data.headers.get("port", "0") or 0)
        try:
            reader, writer = await dial(self.ip, port)
        except (OSError, ValueError) as failure:
            message = f"error forwarding port {port} to pod {self.pod_name}: {failure}"
            await self._send(data_frame(error.id, message.encode()))
            await self._finish(data, error)
            return
        data.writer = writer
        for chunk in data.pending:
            writer.write(chunk)
        data.pending.clear()
        if data.remote_closed and writer.can_write_eof():
            writer.write_eof()
        try:
            while chunk := await reader.read(CHUNK):
                await self._send(data_frame(data.id, chunk))
        except ConnectionError:
            pass
        finally:
            writer.close()
            await self._finish(data, error)

    async def _finish(self, data: Stream, error: Stream) -> None:
        await self._send(data_frame(data.id, b"", FLAG_FIN))
        await self._send(data_frame(error.id, b"", FLAG_FIN))
        self.pairs.pop(data.headers.get("requestid", ""), None)
        self.streams.pop(data.id, None)
        self.streams.pop(error.id, None)


async def serve(request: web.Request, ip: str, pod_name: str) -> web.StreamResponse:
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), max_msg_size=0, compress=False)
    await ws.prepare(request)
    await SpdyPortForward(ws, ip, pod_name).run()
    return ws
