"""Calls, faults and Google's error documents for fakes/gce/server.py's GceServer.

A `Call` is one API request as the fake saw it, named by its discovery method id
(`compute.instances.insert`, `iam.projects.serviceAccounts.get`,
`cloudresourcemanager.projects.setIamPolicy`, `oauth2.token`). A `Fault` matches calls and
answers them with an error: an HTTP error with Google's JSON error body, or (for GCE's
operation error codes, upper case: ZONE_RESOURCE_POOL_EXHAUSTED, QUOTA_EXCEEDED...) an
accepted call whose operation ends DONE with that error, as GCE reports capacity failures.
fakes/faults.py counts faults and fires them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakes import faults

# Google's canonical status name per HTTP code (the `status` field of an error body).
CANONICAL = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}
# HTTP status of the `reason` codes GCE puts in error bodies.
REASON_STATUS = {
    "invalid": 400,
    "badRequest": 400,
    "required": 400,
    "resourceNotReady": 400,
    "authError": 401,
    "forbidden": 403,
    "quotaExceeded": 403,
    "notFound": 404,
    "alreadyExists": 409,
    "resourceInUseByAnotherResource": 400,
    "conditionNotMet": 412,
    "rateLimitExceeded": 429,
    "userRateLimitExceeded": 429,
    "internalError": 500,
    "backendError": 503,
    "serviceUnavailable": 503,
    "ZONE_RESOURCE_POOL_EXHAUSTED": 503,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": 503,
}
# Codes GCE reports inside a DONE operation (with this httpErrorStatusCode), not as an
# HTTP error of the call: the call itself was accepted.
OPERATION_ERRORS = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": 503,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": 503,
    "QUOTA_EXCEEDED": 403,
    "RESOURCE_OPERATION_RATE_EXCEEDED": 503,
}
HTTP_MESSAGES = {403: "FORBIDDEN", 503: "SERVICE UNAVAILABLE", 400: "BAD REQUEST"}


class GoogleError(Exception):
    """An HTTP error answer: `reason` as in GCE's errors[].reason."""

    def __init__(self, status: int, reason: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.extra = extra

    def body(self, with_errors: bool = True) -> dict[str, Any]:
        """Google's error document. Compute (and OAuth-style v1 APIs) list `errors`; IAM and
        Resource Manager (One Platform APIs) give only code, message and status."""
        error: dict[str, Any] = {
            "code": self.status,
            "message": self.message,
            "status": CANONICAL.get(self.status, "UNKNOWN"),
        }
        if with_errors:
            error["errors"] = [
                {"message": self.message, "domain": "global", "reason": self.reason, **self.extra}
            ]
        return {"error": error}


def not_found(what: str) -> GoogleError:
    return GoogleError(404, "notFound", f"The resource '{what}' was not found")


def invalid(message: str) -> GoogleError:
    return GoogleError(400, "invalid", message)


def operation_error(code: str, message: str, zone: str | None, call: Call) -> dict[str, Any]:
    """The `error` of an operation that failed with GCE's `code`, with the errorDetails GCE
    sends for stockouts and quota (see the module docstring of fakes/gce/server.py)."""
    entry: dict[str, Any] = {"code": code, "message": message}
    if code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
        machine = str((call.body or {}).get("machineType", "")).rpartition("/")[2]
        entry["errorDetails"] = [
            {
                "help": {
                    "links": [
                        {
                            "description": "Troubleshooting documentation",
                            "url": "https://cloud.google.com/compute/docs/resource-error",
                        }
                    ]
                }
            },
            {
                "localizedMessage": {
                    "locale": "en-US",
                    "message": f"A {machine} VM instance is currently unavailable in the "
                    f"{zone} zone (test fault).",
                }
            },
            {
                "errorInfo": {
                    "domain": "compute.googleapis.com",
                    "reason": "resource_availability",
                    "metadatas": {"vmType": machine, "zone": zone or ""},
                }
            },
        ]
    elif code == "QUOTA_EXCEEDED":
        entry["errorDetails"] = [
            {
                "quotaInfo": {
                    "metricName": "compute.googleapis.com/cpus",
                    "limitName": "CPUS-per-project-region",
                    "dimensions": {"region": (zone or "")[:-2]},
                    "limit": 24,
                }
            }
        ]
    return {"errors": [entry]}


def default_message(code: str, zone: str | None, project: str) -> str:
    if code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
        return (
            f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
            "available to fulfill the request.  Try a different zone, or try again later."
        )
    if code == "QUOTA_EXCEEDED":
        return f"Quota 'CPUS' exceeded.  Limit: 24.0 in region {(zone or '')[:-2]}."
    if code == "rateLimitExceeded":
        return "Rate Limit Exceeded"
    return f"{code} (test fault)"


# -- calls and faults -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request: `method` is the discovery id (`compute.instances.insert`), `params`
    the path parameters and the query (`project`, `zone`, `instance`, `filter`,
    `requestId`...), `body` the JSON body (None without one), `zone` the zone named in the
    path (or the query's). `origin` is the instance a call came from (GceHosts' hosts set it
    in their user agent: `launcher-origin/NAME`). `caller` is the account the call's token
    was issued to (None before authentication)."""

    seq: int
    method: str
    http_method: str
    path: str
    params: Mapping[str, str]
    body: Any
    zone: str | None = None
    origin: str | None = None
    caller: str | None = None

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.params.get(key, default)

    @property
    def request_id(self) -> str | None:
        return self.params.get("requestId")


@dataclass(frozen=True)
class Logged:
    """A finished call: HTTP status, the error reason it got (None on success; for an
    operation that a fault failed, the operation's error code) and whether a fault made it."""

    call: Call
    status: int
    error: str | None
    injected: bool

    @property
    def method(self) -> str:
        return self.call.method


@dataclass(eq=False)
class Fault(faults.Fault[Call]):
    """What happens to calls that match `method` ("*": any; "instances.insert" matches
    "compute.instances.insert"), `zone` and `when(call)`.

    Counting, `delay`, `effect` and `after` are fakes/faults.py's; given `error`, firing
    answers:
    - a GCE operation code (OPERATION_ERRORS, e.g. ZONE_RESOURCE_POOL_EXHAUSTED) on a call
      that returns an operation: the call is accepted (200, an operation) but has no effect,
      and its operation ends DONE with that error (httpErrorStatusCode `status` or GCE's);
      (`in_operation=False` answers such a code as an HTTP error instead, e.g. a 503 stockout);
    - any other reason: an HTTP error (`status`, else REASON_STATUS, else 400) with Google's
      error body, before the call acts, or after it acted when `after` (a lost answer)."""

    method: str = "*"
    error: str | None = None
    status: int | None = None
    message: str | None = None
    zone: str | None = None
    in_operation: bool | None = None  # None: for GCE's operation codes (OPERATION_ERRORS)

    @property
    def fails(self) -> bool:
        return self.error is not None

    def selects(self, call: Call) -> bool:
        if self.method not in ("*", call.method) and not call.method.endswith("." + self.method):
            return False
        return self.zone in (None, call.zone)

    @property
    def through_operation(self) -> bool:
        if self.in_operation is not None:
            return self.in_operation
        return self.error in OPERATION_ERRORS

    def http_status(self) -> int:
        assert self.error is not None
        if self.status:
            return self.status
        return OPERATION_ERRORS.get(self.error) or REASON_STATUS.get(self.error, 400)


class Faults(faults.Faults[Fault]):
    """The faults a server applies (`add(method, error_reason, http_status, **options)`), in
    the order added."""

    def __init__(self) -> None:
        super().__init__(Fault)

    def no_capacity(self, zone: str | None = None, **options: Any) -> Fault:
        """instances.insert in `zone` (None: any) ends with ZONE_RESOURCE_POOL_EXHAUSTED in its
        operation, until removed (or `times`)."""
        return self.add(
            "compute.instances.insert", "ZONE_RESOURCE_POOL_EXHAUSTED", zone=zone, **options
        )
