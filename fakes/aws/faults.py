"""Wire-level fault injection for fakes/aws/server.py's MotoServer: the calls it sees, which
calls a fault matches and what it answers (fakes/faults.py counts and fires them), and the
error documents AWS sends (EC2's and the query protocol's), with EC2's HTTP status per code."""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakes import faults

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
class Fault(faults.Fault[Call]):
    """What happens to calls that match: `action` ("*": any) and `service`, the optional
    `zone`/`market`/`instance_type`/`subnet` of the call, and `when(call)`.

    Counting, `delay`, `effect` and `after` are fakes/faults.py's; given `error`, firing
    answers with that AWS error (its status `status`, else EC2's for the code)."""

    action: str = "*"
    error: str | None = None
    status: int | None = None
    message: str | None = None
    service: str | None = None
    zone: str | None = None
    market: str | None = None
    instance_type: str | None = None
    subnet: str | None = None

    @property
    def fails(self) -> bool:
        return self.error is not None

    def selects(self, call: Call) -> bool:
        wanted = (
            (self.action, call.action),
            (self.service, call.service),
            (self.zone, call.zone),
            (self.market, call.market),
            (self.instance_type, call.instance_type),
            (self.subnet, call.subnet),
        )
        return all(want in (None, "*") or want == got for want, got in wanted)

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


class Faults(faults.Faults[Fault]):
    """The faults a server applies (`add(action, error, **options)`), in the order added."""

    def __init__(self) -> None:
        super().__init__(Fault)

    def no_capacity(self, **options: Any) -> Fault:
        """RunInstances fails with InsufficientInstanceCapacity (as EC2 says for on-demand
        and spot alike) for the calls matching `options` (zone=, market=, instance_type=,
        subnet=, when=, times=...), until removed."""
        return self.add("RunInstances", "InsufficientInstanceCapacity", **options)


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
