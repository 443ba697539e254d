"""Port-forward over a channel websocket (the protocol of the official Python client's
`kubernetes.stream.portforward`): `?ports=A,B` gives port i the data channel 2i and the
error channel 2i+1, each opened by a message carrying the port number (2 bytes, little
endian). The kubelet connects to the pod's address and port at once; what the client
sends on 2i goes to that connection, what comes back is sent on 2i. A connection that
fails or ends is reported on the error channel or ends that port; when every port has
ended the websocket closes, and a client that closes ends every connection.

A real kubelet dials localhost in the pod's network namespace. Pods here share this box's
network: the connection goes to the pod's IP, and to 127.0.0.1 if nothing listens there
(a server bound to localhost in the pod, such as Ray's dashboard by default; with
several pods this address is shared, so bind the pod IP or 0.0.0.0).
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from fakes.kube.channels import (
    PORTFORWARD_PROTOCOLS,
    Channels,
    new_websocket,
    status_response,
)

CHUNK = 64 * 1024


def parse_ports(text: str) -> list[int]:
    ports = []
    for part in text.split(","):
        port = int(part)
        if not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
        ports.append(port)
    return ports


async def dial(ip: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.open_connection(ip, port)
    except ConnectionRefusedError:
        return await asyncio.open_connection("127.0.0.1", port)


async def serve(request: web.Request, ip: str, pod_name: str) -> web.StreamResponse:
    try:
        ports = parse_ports(request.query.get("ports", ""))
    except ValueError as error:
        return status_response(400, "BadRequest", f"invalid port: {error}")
    if not ports:
        return status_response(400, "BadRequest", "at least one port must be specified")
    ws = new_websocket(PORTFORWARD_PROTOCOLS)
    if not ws.can_prepare(request).ok:
        return status_response(400, "BadRequest", "port-forward needs a websocket upgrade")
    await ws.prepare(request)
    channels = Channels(ws)
    writers: dict[int, asyncio.StreamWriter] = {}
    pumps = []
    for index, port in enumerate(ports):
        number = port.to_bytes(2, "little")
        await channels.send(2 * index, number)
        await channels.send(2 * index + 1, number)
        try:
            reader, writer = await dial(ip, port)
        except OSError as error:
            message = f"error forwarding port {port} to pod {pod_name}: {error}"
            await channels.send(2 * index + 1, message.encode())
            continue
        writers[index] = writer
        pumps.append(asyncio.ensure_future(_pump(reader, channels, 2 * index)))
    inbound = asyncio.ensure_future(_inbound(channels, writers))
    try:
        if pumps:
            every = asyncio.ensure_future(_all(pumps))
            await asyncio.wait([inbound, every], return_when=asyncio.FIRST_COMPLETED)
            every.cancel()
    finally:
        for task in [inbound, *pumps]:
            task.cancel()
        for writer in writers.values():
            writer.close()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await channels.close()
    return ws


async def _all(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.gather(*tasks)


async def _pump(reader: asyncio.StreamReader, channels: Channels, channel: int) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(CHUNK):
            await channels.send(channel, data)


async def _inbound(channels: Channels, writers: dict[int, asyncio.StreamWriter]) -> None:
    while (message := await channels.receive()) is not None:
        channel, data = message
        writer = writers.get(channel // 2)
        if channel % 2 or writer is None or writer.is_closing():
            continue
        try:
            writer.write(data)
            await writer.drain()
        except ConnectionError:
            writer.close()
