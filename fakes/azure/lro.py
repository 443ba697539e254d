"""Long-running operations as ARM runs them and azure-mgmt-core's ARMPolling polls them.

A call that starts one answers (PUT: 201 new / 200 update, with the resource in
provisioningState Creating/Updating; DELETE and POST actions: 202 without a body) with
`Azure-AsyncOperation` (an operation status URL:
`/subscriptions/S/providers/NS/locations/L/operations/ID`) and, for 202s, `Location`
(`.../operationResults/ID`), plus `Retry-After` when the server's `retry_after` is set.
ARMPolling prefers Azure-AsyncOperation: it GETs it until `status` is Succeeded / Failed /
Canceled (sleeping Retry-After, else its polling_interval: 30 s by default), then, for a
PUT or PATCH, GETs the resource's own URL, and for a POST, the Location URL (which answers
200 once the operation is over, 202 before). A Failed operation's `error` is what
`HttpResponseError.error` reads (`.code`, `.message`). Resource group deletion answers 202
with Location only (as ARM does); polling it gives 202 while in progress, then 200, or
the operation's error with its status if it failed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fakes.azure.faults import ArmError
from fakes.azure.store import now_text


@dataclass
class Operation:
    id: str
    sub: str
    namespace: str
    location: str
    kind: str | None
    target: str | None  # the resource id it acts on
    status: str = "InProgress"
    error: ArmError | None = None
    start_time: str = field(default_factory=now_text)
    end_time: str | None = None
    location_only: bool = False  # answered with Location only (resource group deletion)
    on_done: list[Callable[[Operation], None]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status != "InProgress"

    def status_document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.id, "status": self.status, "startTime": self.start_time}
        if self.end_time:
            out["endTime"] = self.end_time
        if self.error is not None:
            out["error"] = self.error.error()
        return out


class Operations:
    """The operations a server started (the server's lock guards them)."""

    def __init__(self, base_url: Callable[[], str], notify: Callable[[], None]) -> None:
        self._base_url = base_url
        self._notify = notify
        self.by_id: dict[str, Operation] = {}

    def clear(self) -> None:
        self.by_id.clear()

    def start(
        self,
        sub: str,
        namespace: str,
        location: str,
        kind: str | None = None,
        target: str | None = None,
        location_only: bool = False,
    ) -> Operation:
        op = Operation(
            str(uuid.uuid4()),
            sub,
            namespace,
            location or "eastus",
            kind,
            target,
            location_only=location_only,
        )
        self.by_id[op.id.lower()] = op
        return op

    def succeed(self, op: Operation) -> None:
        self._end(op, "Succeeded", None)

    def fail(self, op: Operation, error: ArmError) -> None:
        self._end(op, "Failed", error)

    def cancel(self, op: Operation) -> None:
        self._end(op, "Canceled", ArmError(409, "OperationPreempted", "Operation was canceled."))

    def _end(self, op: Operation, status: str, error: ArmError | None) -> None:
        if op.done:
            return
        op.status, op.error, op.end_time = status, error, now_text()
        callbacks, op.on_done = op.on_done, []
        for callback in callbacks:
            callback(op)
        self._notify()

    def status_url(self, op: Operation, api_version: str) -> str:
        return (
            f"{self._base_url()}/subscriptions/{op.sub}/providers/{op.namespace}/locations/"
            f"{op.location}/operations/{op.id}?api-version={api_version}"
        )

    def result_url(self, op: Operation, api_version: str) -> str:
        return (
            f"{self._base_url()}/subscriptions/{op.sub}/providers/{op.namespace}/locations/"
            f"{op.location}/operationResults/{op.id}?api-version={api_version}"
        )

    def headers(
        self, op: Operation, api_version: str, retry_after: float | None, accepted: bool
    ) -> dict[str, str]:
        """The headers of the answer that started `op` (accepted: a 202)."""
        out: dict[str, str] = {}
        if not op.location_only:
            out["Azure-AsyncOperation"] = self.status_url(op, api_version)
        if accepted or op.location_only:
            out["Location"] = self.result_url(op, api_version)
        if retry_after is not None:
            out["Retry-After"] = seconds(retry_after)
        return out

    def poll_status(self, op_id: str) -> Operation:
        op = self.by_id.get(op_id.lower())
        if op is None:
            raise ArmError(404, "NotFound", f"The operation '{op_id}' was not found.")
        return op


def seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
