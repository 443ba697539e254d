"""Calls, faults and Azure Resource Manager's error bodies for fakes/azure/server.py.

A `Call` is one request as the fake saw it, named by an `operation`: the resource type's
short name and what was asked (`virtualMachines.create`, `virtualMachines.update` for a PUT
of an existing one, `virtualMachines.patch`, `virtualMachines.get`, `virtualMachines.list`,
`virtualMachines.listAll`, `virtualMachines.delete`, `virtualMachines.start`,
`networkInterfaces.create`, `resourceGroups.delete`, `resources.list`,
`roleAssignments.create`, `operations.get` (an Azure-AsyncOperation poll),
`operationResults.get` (a Location poll), `token`, `openid`, `imds.token`,
`imds.scheduledevents`, `imds.instance`...). A `Fault` matches calls and answers them with
ARM's error body, before the call acts or after it (`after`: a lost answer), or, for calls
that start a long-running operation, through that operation (`in_operation`: the call is
accepted and its operation ends Failed with the error, as Azure reports allocation
failures). fakes/faults.py counts faults and fires them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fakes import faults

# HTTP status of ARM error codes the fake answers with (a Fault may give another).
CODE_STATUS = {
    "AuthenticationFailed": 401,
    "InvalidAuthenticationToken": 401,
    "ExpiredAuthenticationToken": 401,
    "AuthorizationFailed": 403,
    "ResourceNotFound": 404,
    "ResourceGroupNotFound": 404,
    "SubscriptionNotFound": 404,
    "NotFound": 404,
    "InvalidResourceType": 404,
    "NoRegisteredProviderFound": 404,
    "RoleAssignmentNotFound": 404,
    "RoleDefinitionDoesNotExist": 404,
    "Conflict": 409,
    "SkuNotAvailable": 409,
    "OperationNotAllowed": 409,
    "QuotaExceeded": 409,
    "RoleAssignmentExists": 409,
    "ResourceGroupBeingDeleted": 409,
    "AnotherOperationInProgress": 409,
    "OperationPreempted": 409,
    "TooManyRequests": 429,
    "SubscriptionRequestsThrottled": 429,
    "InternalServerError": 500,
    "InternalExecutionError": 500,
    "ServiceUnavailable": 503,
    "GatewayTimeout": 504,
}
# Codes Azure reports in a Failed long-running operation of an accepted call.
OPERATION_CODES = frozenset(
    {
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
        "ProvisioningTimeout",
        "OSProvisioningTimedOut",
        "InternalExecutionError",
    }
)
# Messages of Azure's allocation failures (see learn.microsoft.com's allocation-failure
# troubleshooting page: these are its codes; the wording here is the fake's own).
ALLOCATION_MESSAGES = {
    "AllocationFailed": "Allocation failed. We do not have sufficient capacity for the "
    "requested VM size in this region. Read more about improving likelihood of allocation "
    "success at http://aka.ms/allocation-guidance",
    "ZonalAllocationFailed": "Allocation failed. We do not have sufficient capacity for the "
    "requested VM size in this zone. Read more about improving likelihood of allocation "
    "success at http://aka.ms/allocation-guidance",
    "OverconstrainedAllocationRequest": "Allocation failed. VM(s) with the following "
    "constraints cannot be allocated, because the condition is too restrictive. Please "
    "remove some constraints and try again.",
    "OverconstrainedZonalAllocationRequest": "Allocation failed. VM(s) with the following "
    "constraints cannot be allocated, because the condition is too restrictive. Please "
    "remove some constraints and try again.",
}


class ArmError(Exception):
    """An error answer: ARM's `{"error": {"code", "message", "details"}}` with `status`;
    `headers` are sent along (e.g. Retry-After of a 429)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        target: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []
        self.headers = dict(headers or {})
        self.target = target

    def error(self) -> dict[str, Any]:
        """The `error` object (as in an operation status document)."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.target:
            out["target"] = self.target
        if self.details:
            out["details"] = self.details
        return out

    def body(self) -> dict[str, Any]:
        return {"error": self.error()}


def not_found(kind: str, name: str, rg: str | None) -> ArmError:
    if rg is None:
        return ArmError(404, "ResourceNotFound", f"The Resource '{kind}/{name}' was not found.")
    return ArmError(
        404,
        "ResourceNotFound",
        f"The Resource '{kind}/{name}' under resource group '{rg}' was not found. For more "
        "details please go to https://aka.ms/ARMResourceNotFoundFix",
    )


def rg_not_found(rg: str) -> ArmError:
    return ArmError(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")


def bad_request(code: str, message: str) -> ArmError:
    return ArmError(400, code, message)


def default_message(code: str) -> str:
    if code in ALLOCATION_MESSAGES:
        return ALLOCATION_MESSAGES[code]
    if code in ("TooManyRequests", "SubscriptionRequestsThrottled"):
        return (
            "Number of requests for this subscription exceeded the limit. Please try again "
            "after some time (test fault)."
        )
    return f"{code} (test fault)"


# -- calls and faults -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request. `kind` is the resource type (`Microsoft.Compute/virtualMachines`, or
    `Microsoft.Resources/resourceGroups`, None for the token and IMDS endpoints),
    `operation` as in the module docstring, `name` the resource's name from the path,
    `rg` its resource group, `principal` the object id of the token's principal (None
    without a valid token), `origin` the VM name when the token came from that VM's IMDS
    (or the call was made to its IMDS)."""

    seq: int
    method: str
    path: str
    query: Mapping[str, str]
    body: Any
    operation: str
    kind: str | None = None
    name: str | None = None
    rg: str | None = None
    principal: str | None = None
    origin: str | None = None

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.query.get(key, default)


@dataclass(frozen=True)
class Logged:
    """A finished call: HTTP status, ARM's error code (None on success; for an operation a
    fault failed, that operation's code) and whether a fault made it."""

    call: Call
    status: int
    error: str | None
    injected: bool

    @property
    def operation(self) -> str:
        return self.call.operation

    @property
    def method(self) -> str:
        return self.call.method

    @property
    def principal(self) -> str | None:
        return self.call.principal

    @property
    def origin(self) -> str | None:
        return self.call.origin

    @property
    def kind(self) -> str | None:
        return self.call.kind


@dataclass(eq=False, kw_only=True)
class Fault(faults.Fault[Call]):
    """What happens to calls whose operation matches `operation` (a glob, case-insensitive:
    "*", "virtualMachines.*", "virtualMachines.create"), whose resource name matches `name`
    (a glob, None: any) and `when(call)`.

    Counting, `delay`, `effect` and `after` are fakes/faults.py's; given `error` (an ARM
    code), firing answers it with ARM's error body and `status` (else CODE_STATUS, else
    400; a `retry_after` is sent as Retry-After), or, for an operation code
    (OPERATION_CODES: AllocationFailed...) on a call that starts a long-running operation
    (or with `in_operation=True`), accepts the call and ends its operation Failed with the
    error (for a VM create the VM stays, provisioningState Failed, as on Azure)."""

    operation: str = "*"
    name: str | None = None
    error: str | None = None
    status: int | None = None
    message: str | None = None
    retry_after: float | None = None
    in_operation: bool | None = None
    details: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fails(self) -> bool:
        return self.error is not None

    def selects(self, call: Call) -> bool:
        if not fnmatch.fnmatch(call.operation.lower(), self.operation.lower()):
            return False
        if self.name is None:
            return True
        return call.name is not None and fnmatch.fnmatch(call.name.lower(), self.name.lower())

    @property
    def through_operation(self) -> bool:
        if self.in_operation is not None:
            return self.in_operation
        return self.error in OPERATION_CODES

    def arm_error(self) -> ArmError:
        assert self.error is not None
        status = self.status or CODE_STATUS.get(self.error, 400)
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = _seconds(self.retry_after)
        return ArmError(
            status,
            self.error,
            self.message or default_message(self.error),
            self.details,
            headers,
        )


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class Faults(faults.Faults[Fault]):
    """The faults a server applies (`add(operation=..., error=..., **options)`), in the order
    added."""

    def __init__(self) -> None:
        super().__init__(Fault)

    def throttle(
        self, times: int, operation: str = "*", retry_after: float = 1, **options: Any
    ) -> Fault:
        """The next `times` calls matching `operation` answer 429 TooManyRequests with
        Retry-After (azure-core's retry policy waits that long and retries)."""
        return self.add(
            operation=operation,
            error="TooManyRequests",
            status=429,
            retry_after=retry_after,
            times=times,
            **options,
        )

    def fail_operation(self, operation: str, code: str, **options: Any) -> Fault:
        """Calls matching `operation` are accepted and their long-running operation ends
        Failed with `code`."""
        return self.add(operation=operation, error=code, in_operation=True, **options)
