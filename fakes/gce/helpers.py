"""Shared fixtures and helpers of the fake GCE's self-tests (tests/test_gce_fake.py,
tests/test_gce_fake_clients.py): one GceServer per test module, reset before each test, an
audit of every address the test process connects to or looks up (all must be loopback), and
short forms of the calls the tests make through the real google-api-python-client."""

from __future__ import annotations

import ipaddress
import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from fakes.gce.server import PROJECT, GceServer

P = PROJECT
ZONE = "us-west1-b"  # its addresses: 127.17.9.y
OTHER = "us-central1-a"  # 127.17.16.y

# Every address this process connects to or looks up while these tests run.
_connected: list[Any] = []
_looked_up: list[Any] = []
_recording = threading.Event()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _recording.is_set():
        return
    if event == "socket.connect":
        _connected.append(args[1])
    elif event == "socket.getaddrinfo":
        _looked_up.append(args[0])


sys.addaudithook(_audit)


def serve() -> Iterator[GceServer]:
    """The body of each test module's `server` fixture: a GceServer, and afterwards the
    check that every connection and lookup of the module went to loopback."""
    _connected.clear()
    _looked_up.clear()
    _recording.set()
    try:
        with GceServer() as server:
            yield server
    finally:
        _recording.clear()
    inet = [a for a in _connected if isinstance(a, tuple)]
    assert inet, "the audit hook saw no connection at all"
    outside = [a for a in inet if not ipaddress.ip_address(a[0]).is_loopback]
    assert outside == [], f"connections left this machine: {outside}"
    names = {str(h) for h in _looked_up if h is not None}
    assert all(ipaddress.ip_address(h).is_loopback for h in names), names


def fresh_server(server: GceServer) -> Iterator[None]:
    """The body of each module's autouse `fresh` fixture."""
    server.reset()
    yield
    assert server.errors == []  # no handler of the fake failed


def body_of(name: str, zone: str = ZONE, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/n1-standard-2",
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "initializeParams": {
                    "sourceImage": "projects/deeplearning-platform-release/global/images/family/common-cpu"
                },
            }
        ],
        "networkInterfaces": [{"subnetwork": f"regions/{zone[:-2]}/subnetworks/default"}],
    }
    body.update(extra)
    return body


def insert(compute: Any, name: str, zone: str = ZONE, **extra: Any) -> dict[str, Any]:
    request_id = extra.pop("requestId", None)
    op: dict[str, Any] = (
        compute.instances()
        .insert(project=P, zone=zone, body=body_of(name, zone, **extra), requestId=request_id)
        .execute()
    )
    return op


def wait(compute: Any, op: dict[str, Any]) -> dict[str, Any]:
    zone = op.get("zone", "").rpartition("/")[2]
    if zone:
        done = compute.zoneOperations().wait(project=P, zone=zone, operation=op["name"])
    else:
        done = compute.globalOperations().wait(project=P, operation=op["name"])
    result: dict[str, Any] = done.execute()
    assert result["status"] == "DONE"
    return result


def get(compute: Any, name: str, zone: str = ZONE) -> dict[str, Any]:
    found: dict[str, Any] = compute.instances().get(project=P, zone=zone, instance=name).execute()
    return found


def error_of(raised: pytest.ExceptionInfo[HttpError]) -> tuple[int, str, dict[str, Any]]:
    body = json.loads(raised.value.content)["error"]
    reason = body["errors"][0]["reason"] if "errors" in body else body["status"]
    return raised.value.resp.status, reason, body


def running(server: GceServer, *names: str) -> None:
    assert server.wait_until(
        lambda: all((v := server.instance(n)) is not None and v.status == "RUNNING" for n in names)
    )
