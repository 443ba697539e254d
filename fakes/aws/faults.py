"""Wire-level fault injection for fakes/aws/server.py's MotoServer: the calls it sees, the
faults a test arms (which calls they match, how often they fire, what they answer), and the
error documents AWS sends (EC2's and the query protocol's), with EC2's HTTP status per code."""

from __future__ import annotations

import contextlib
import threading
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# HTTP status EC2 gives each error code (client errors are 400); the capacity codes are
# server errors on EC2, so SDKs retry them.
ERROR_STATUS = {
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "InsufficientHostCapacity": 500,
    "InsufficientAddressCapacity": 500,
    "InsufficientReservedInstanceCapacity": 500,
    "InternalError": 500,
    "ServiceFailure": 500,
    "Unavailable": 503,
    "ServiceUnavailable": 503,
    "RequestLimitExceeded": 503,
}


def status_for(code: str) -> int:
    return ERROR_STATUS.get(code, 400)


# -- calls and faults -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One API request as the server saw it: `params` is the flat form (`SubnetId`,
    `InstanceMarketOptions.MarketType`, `TagSpecification.1.Tag.1.Key`, ...); `zone` is
    Placement.AvailabilityZone or the zone of the request's subnet; `origin` is the
    `sdk_ua_app_id` of the caller (InstanceHosts sets it to the instance id on each host)."""

    seq: int
    service: str | None
    region: str | None
    action: str | None
    params: Mapping[str, str]
    zone: str | None = None
    origin: str | None = None

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.params.get(key, default)

    def __getitem__(self, key: str) -> str:
        return self.params[key]

    def __contains__(self, key: object) -> bool:
        return key in self.params

    @property
    def market(self) -> str:
        if self.action == "RequestSpotInstances":
            return "spot"
        return self.params.get("InstanceMarketOptions.MarketType") or "on-demand"

    @property
    def subnet(self) -> str | None:
        return self.params.get("SubnetId") or self.params.get("NetworkInterface.1.SubnetId")

    @property
    def instance_type(self) -> str | None:
        return self.params.get("InstanceType")


@dataclass(frozen=True)
class Logged:
    """A finished call: its HTTP status, the error code it got (None on success) and
    whether a fault made that error."""

    call: Call
    status: int
    error: str | None
    injected: bool

    @property
    def action(self) -> str | None:
        return self.call.action


@dataclass(eq=False)
class Fault:
    """What happens to calls that match: `action` ("*": any) and `service`, the optional
    `zone`/`market`/`instance_type`/`subnet` of the call, and `when(call)`.

    The first `skip` matching calls pass untouched; then the fault fires `times` times
    (None: until removed). Firing waits `delay` seconds, runs `effect(call)` (e.g. send a
    signal to the process under test), and, if `error` is set, answers with that AWS error:
    before the call reaches moto, or after it took effect when `after` is true (a lost
    answer). `seen` counts matching calls, `fired` the calls it acted on."""

    action: str = "*"
    error: str | None = None
    status: int | None = None
    message: str | None = None
    service: str | None = None
    zone: str | None = None
    market: str | None = None
    instance_type: str | None = None
    subnet: str | None = None
    when: Callable[[Call], bool] | None = None
    times: int | None = None
    skip: int = 0
    delay: float = 0.0
    after: bool = False
    effect: Callable[[Call], None] | None = None
    seen: int = 0
    fired: int = 0

    def matches(self, call: Call) -> bool:
        wanted = (
            (self.action, call.action),
            (self.service, call.service),
            (self.zone, call.zone),
            (self.market, call.market),
            (self.instance_type, call.instance_type),
            (self.subnet, call.subnet),
        )
        if any(want not in (None, "*") and want != got for want, got in wanted):
            return False
        return self.when is None or self.when(call)

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times

    def error_status(self) -> int:
        assert self.error is not None
        return self.status or status_for(self.error)

    def error_message(self, call: Call) -> str:
        if self.message:
            return self.message
        if self.error and self.error.startswith("Insufficient"):
            kind = f"{call.market} {call.instance_type or ''}".strip()
            return f"Not enough {kind} capacity in {call.zone or 'the region'} (test fault)."
        return f"{self.error} (test fault)"


class Faults:
    """The faults a server applies, in the order added; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, action: str = "*", error: str | None = None, **options: Any) -> Fault:
        fault = Fault(action, error, **options)
        with self._lock:
            self._faults.append(fault)
        return fault

    def no_capacity(self, **options: Any) -> Fault:
        """RunInstances fails with InsufficientInstanceCapacity (as EC2 says for on-demand
        and spot alike) for the calls matching `options` (zone=, market=, instance_type=,
        subnet=, when=, times=...), until removed."""
        return self.add("RunInstances", "InsufficientInstanceCapacity", **options)

    def remove(self, fault: Fault) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def __iter__(self) -> Iterator[Fault]:
        with self._lock:
            return iter(list(self._faults))

    def pick(self, call: Call) -> list[Fault]:
        """The faults that fire for `call`: every matching one without an error, and the
        first matching one with an error (last in the list)."""
        firing: list[Fault] = []
        failing: Fault | None = None
        with self._lock:
            for fault in self._faults:
                if fault.exhausted or (fault.error and failing) or not fault.matches(call):
                    continue
                fault.seen += 1
                if fault.seen <= fault.skip:
                    continue
                fault.fired += 1
                if fault.error:
                    failing = fault
                else:
                    firing.append(fault)
        return [*firing, failing] if failing else firing


def error_body(call: Call, code: str, message: str, status: int) -> bytes:
    """AWS's error document: EC2's `<Response><Errors>` form, or the query protocol's
    `<ErrorResponse>` (IAM, STS)."""
    request_id = str(uuid.uuid4())
    if call.service == "ec2":
        root = ET.Element("Response")
        error = ET.SubElement(ET.SubElement(root, "Errors"), "Error")
        ET.SubElement(root, "RequestID").text = request_id
    else:
        version = call.params.get("Version", "2010-05-08")
        root = ET.Element(
            "ErrorResponse", xmlns=f"https://{call.service}.amazonaws.com/doc/{version}/"
        )
        error = ET.SubElement(root, "Error")
        ET.SubElement(error, "Type").text = "Receiver" if status >= 500 else "Sender"
        ET.SubElement(root, "RequestId").text = request_id
    ET.SubElement(error, "Code").text = code
    ET.SubElement(error, "Message").text = message
    return bytes(ET.tostring(root, xml_declaration=True, encoding="UTF-8"))
