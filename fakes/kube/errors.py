"""Kubernetes `Status` error bodies, as the API server sends them with every failure.

The official Python client turns them into `ApiException` (with `.status` the HTTP code
and `.body` this JSON); kubectl prints `Error from server (Reason): message`.
"""

from __future__ import annotations

from typing import Any

# HTTP code of each `reason` the fake uses (metav1.StatusReason values).
REASON_CODES = {
    "BadRequest": 400,
    "Unauthorized": 401,
    "Forbidden": 403,
    "NotFound": 404,
    "MethodNotAllowed": 405,
    "NotAcceptable": 406,
    "AlreadyExists": 409,
    "Conflict": 409,
    "Gone": 410,
    "Expired": 410,
    "UnsupportedMediaType": 415,
    "Invalid": 422,
    "TooManyRequests": 429,
    "InternalError": 500,
    "ServiceUnavailable": 503,
    "Timeout": 504,
}
# The reason the server gives for a bare HTTP code (a fault naming only a code).
CODE_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answer: `code` the HTTP status, `reason` a StatusReason, `details` the
    Status `details` (name, group, kind, causes)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(group: str, plural: str, name: str) -> dict[str, Any]:
    details = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(group, plural)} "{name}" not found',
        _details(group, plural, name),
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        _details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        _details(group, plural, name),
    )


def invalid(kind: str, group: str, name: str, field: str, problem: str) -> ApiError:
    """422 Invalid, one cause: `field` (a path such as metadata.name) is wrong: `problem`."""
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": problem, "field": field}],
    }
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {problem}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def expired(message: str) -> ApiError:
    """410: the resourceVersion asked for is older than the server's history."""
    return ApiError(410, "Expired", message)


def from_code(code: int, message: str | None = None, reason: str | None = None) -> ApiError:
    """An error with HTTP `code` (a fault's), its usual reason unless `reason` is given."""
    reason = reason or CODE_REASONS.get(code, "InternalError")
    return ApiError(code, reason, message or f"{reason} (injected by a test fault)")
