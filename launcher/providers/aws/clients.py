"""boto3 clients for one region, with throttling retried, and what AWS error codes mean.

boto3 is imported here only, and only when a cluster on AWS is used. Throttling
(`RequestLimitExceeded` and kin) is retried by botocore's "standard" retry mode, which backs
off exponentially with full jitter; we raise the attempt count because a cluster launch makes
bursts of calls. Launch calls are the exception: EC2 answers "no capacity" with HTTP 500,
which botocore would retry in place for up to a minute, so they go through `ec2_launch`
(no botocore retries) and `retry_throttled`, which retries only throttling and transient
server errors and lets capacity errors through at once, to be answered in another zone.

The endpoint comes from boto3's usual sources (`AWS_ENDPOINT_URL`, the
shared config file), so the same code talks to AWS or to a local stand-in.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from launcher.errors import ProviderError

MAX_ATTEMPTS = 10  # per call, throttling and transient errors included

# RunInstances failures that mean "no room for this offering here": try elsewhere.
# Limits of the account or region: no other zone lifts them.
QUOTA_CODES = frozenset(
    {"MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded"}
)
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "SpotMaxPriceTooLow",
        "Unsupported",  # the type is not offered in this zone
        "InsufficientFreeAddressesInSubnet",
        *QUOTA_CODES,
    }
)
THROTTLING_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
TRANSIENT_CODES = frozenset(
    {"InternalError", "ServiceFailure", "Unavailable", "ServiceUnavailable"}
)
T = TypeVar("T")
NOT_FOUND_SUFFIXES = (".NotFound", ".Malformed", "NoSuchEntity")


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ("" for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


# What to do about errors that are the caller's setup, not the request's.
_SSO_LOGIN = "run `aws sso login` for this profile"
_EXPIRED = "the session credentials expired; refresh them (e.g. `aws sso login`)"
_POLICY = "the credentials' IAM policy does not allow this call; see the README's AWS permissions"
_FIXES = {
    "NoCredentialsError": "give boto3 credentials: `aws configure`, AWS_PROFILE, or "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "PartialCredentialsError": "the credentials found are incomplete; check `aws configure "
    "list` and the AWS_* environment variables",
    "ProfileNotFound": "name a profile from ~/.aws/config in AWS_PROFILE, or unset it",
    "SSOTokenLoadError": _SSO_LOGIN,
    "UnauthorizedSSOTokenError": _SSO_LOGIN,
    "TokenRetrievalError": _SSO_LOGIN,
    "EndpointConnectionError": "check this machine's network access to AWS and the region name",
    "ExpiredToken": _EXPIRED,
    "ExpiredTokenException": _EXPIRED,
    "RequestExpired": "the session credentials expired or this machine's clock is wrong",
    "AuthFailure": "AWS did not accept the credentials; check `aws sts get-caller-identity`",
    "InvalidClientTokenId": "AWS did not accept the access key; check `aws configure list`",
    "UnauthorizedOperation": _POLICY,
    "AccessDenied": _POLICY,
}


def error_message(exc: BaseException) -> str:
    """What went wrong, in AWS's words, and what to do when it is the caller's setup."""
    response = getattr(exc, "response", None)
    text = str(exc)
    fix = _FIXES.get(type(exc).__name__)
    if isinstance(response, dict):
        message = response.get("Error", {}).get("Message")
        if message:
            text = f"{error_code(exc)}: {message}"
        fix = _FIXES.get(error_code(exc), fix)
    return f"{text} ({fix})" if fix else text


def is_capacity(exc: BaseException) -> bool:
    return error_code(exc) in CAPACITY_CODES


def capacity_scope(exc: BaseException) -> str:
    """ "quota" for the account's or region's limits (no other zone lifts them), else "zone"."""
    return "quota" if error_code(exc) in QUOTA_CODES else "zone"


def is_not_found(exc: BaseException) -> bool:
    return error_code(exc).endswith(NOT_FOUND_SUFFIXES)


def is_duplicate(exc: BaseException) -> bool:
    code = error_code(exc)
    return code.endswith(".Duplicate") or code in {
        "EntityAlreadyExists",
        "InvalidPermission.Duplicate",
    }


def retry_throttled(
    call: Callable[[], T],
    attempts: int = MAX_ATTEMPTS,
    base_s: float = 0.5,
    cap_s: float = 20.0,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> T:
    """`call()`, retried on throttling and transient server errors with exponential backoff
    and full jitter; any other error (capacity ones included) is raised at once."""
    for attempt in range(attempts):
        try:
            return call()
        except boto_errors() as exc:
            code = error_code(exc)
            if attempt + 1 >= attempts or code not in THROTTLING_CODES | TRANSIENT_CODES:
                raise
            sleep(jitter() * min(cap_s, base_s * 2**attempt))
    raise AssertionError("unreachable")


def boto_errors() -> tuple[type[BaseException], ...]:
    """The exceptions botocore raises for refused calls and unreachable endpoints."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


@dataclass
class AwsClients:
    """Lazily made clients for `region` (each made once; clients are thread-safe)."""

    region: str
    _made: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _session: Any = None

    def _client(self, service: str, attempts: int = MAX_ATTEMPTS) -> Any:
        with self._lock:
            client = self._made.get(f"{service}/{attempts}")
            if client is None:
                import boto3

                config = self._config(attempts)
                try:
                    # One session: its clients share the service models it has read (EC2's
                    # takes ~0.15 s to load, and two EC2 clients are made).
                    self._session = self._session or boto3.session.Session()
                    client = self._session.client(service, config=config)
                except Exception as exc:  # no region, broken profile, ...
                    raise ProviderError(f"cannot use AWS {service}: {exc}") from exc
                self._made[f"{service}/{attempts}"] = client
            return client

    def _config(self, attempts: int) -> Any:
        from botocore.config import Config

        return Config(
            region_name=self.region,
            retries={"mode": "standard", "total_max_attempts": attempts},
            connect_timeout=10,
            read_timeout=60,
        )

    @property
    def ec2_listing(self) -> Any:
        """EC2 for describe_instances: the full client once made, else one that has only
        that operation (listing.py: made in ~0.02 s, not ~0.1 s; a no-op `up` lists once
        and calls EC2 for nothing else)."""
        full = f"ec2/{MAX_ATTEMPTS}"
        with self._lock:
            client = self._made.get(full) or self._made.get("ec2-listing")
        if client is not None:
            return client
        from launcher.providers.aws.listing import listing_client

        try:
            client = listing_client(self._config(MAX_ATTEMPTS))
        except Exception as exc:  # no region, broken profile, ...
            raise ProviderError(f"cannot use AWS ec2: {exc}") from exc
        if client is None:  # the user's own botocore models: the full client has them
            return self.ec2
        with self._lock:
            return self._made.setdefault("ec2-listing", client)

    @property
    def ec2_launch(self) -> Any:
        """EC2 without botocore's retries: for launches, through `retry_throttled`."""
        return self._client("ec2", attempts=1)

    @property
    def ec2(self) -> Any:
        return self._client("ec2")

    @property
    def iam(self) -> Any:
        return self._client("iam")

    @property
    def sts(self) -> Any:
        return self._client("sts")
