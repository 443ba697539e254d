"""Google's API clients, as the user's gcloud setup says: credentials, project and endpoints.

Credentials: `provider.gcp_credentials` when the config gives them (Ray's two forms: a
service account key as JSON text or a file path, or an OAuth access token), else Application
Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, `gcloud auth application-default
login`, or the metadata server on GCE, which is how the autoscaler on the head gets the
head's service account). The project is `provider.project_id`, else the credentials'.

Endpoints honour gcloud's overrides (`CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`, `_IAM`,
`_CLOUDRESOURCEMANAGER`), for private endpoints, on this machine and on the head alike.

googleapiclient's HTTP transport is not thread-safe, and the autoscaler launches from
threads: each thread builds its own services (`GcpClients.compute` and friends).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import ProviderError, UsageError
from launcher.providers.gcp.spec import GcpProviderConfig

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# api -> (discovery name, version, gcloud's override variable, default endpoint)
APIS: Mapping[str, tuple[str, str, str, str]] = {
    "compute": (
        "compute",
        "v1",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE",
        "https://compute.googleapis.com/compute/v1/",
    ),
    "iam": ("iam", "v1", "CLOUDSDK_API_ENDPOINT_OVERRIDES_IAM", "https://iam.googleapis.com/"),
    "crm": (
        "cloudresourcemanager",
        "v1",
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDRESOURCEMANAGER",
        "https://cloudresourcemanager.googleapis.com/",
    ),
}
CREDENTIALS_HINT = (
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to "
    "a service account key file, or give provider.gcp_credentials"
)


def endpoint(api: str, environ: Mapping[str, str] | None = None) -> str:
    _, _, variable, default = APIS[api]
    return (environ if environ is not None else os.environ).get(variable) or default


def credentials_and_project(settings: GcpProviderConfig) -> tuple[Any, str]:
    """The credentials to call Google with, and the project. Raises UsageError with what to
    do when there are none."""
    import google.auth
    from google.auth import exceptions as auth_errors

    project = settings.project_id
    try:
        if settings.credentials_type == "service_account" and settings.credentials:
            from google.oauth2 import service_account

            info = _service_account_info(settings.credentials)
            make = service_account.Credentials.from_service_account_info
            credentials = make(info, scopes=SCOPES)  # type: ignore[no-untyped-call]
            project = project or info.get("project_id")
        elif settings.credentials_type == "credentials_token" and settings.credentials:
            from google.oauth2.credentials import Credentials

            credentials = Credentials(settings.credentials)  # type: ignore[no-untyped-call]
        else:
            credentials, found = google.auth.default(scopes=SCOPES)
            project = project or found
    except auth_errors.DefaultCredentialsError as exc:
        raise UsageError(f"no Google credentials found ({exc}); {CREDENTIALS_HINT}") from exc
    except (ValueError, OSError) as exc:
        raise UsageError(
            f"provider.gcp_credentials cannot be read ({exc}); give a service account key "
            "(its JSON text or a file path) or an access token"
        ) from exc
    if not project:
        raise UsageError(
            "no GCP project: set provider.project_id, or `gcloud config set project ...` "
            "(or GOOGLE_CLOUD_PROJECT)"
        )
    return credentials, str(project)


def _service_account_info(text: str) -> dict[str, Any]:
    stripped = text.strip()
    raw = stripped if stripped.startswith("{") else Path(stripped).expanduser().read_text()
    info = json.loads(raw)
    if not isinstance(info, dict):
        raise ValueError("not a JSON object")
    return info


@dataclass
class GcpClients:
    """Compute, IAM and Resource Manager services for one project (one set per thread)."""

    credentials: Any
    project: str
    _local: threading.local = field(default_factory=threading.local)

    def _service(self, api: str) -> Any:
        service = getattr(self._local, api, None)
        if service is None:
            from googleapiclient import discovery

            name, version, _, _ = APIS[api]
            service = discovery.build(
                name,
                version,
                credentials=self.credentials,
                static_discovery=True,
                cache_discovery=False,
                client_options={"api_endpoint": endpoint(api)},
                num_retries=0,
            )
            setattr(self._local, api, service)
        return service

    @property
    def compute(self) -> Any:
        return self._service("compute")

    @property
    def iam(self) -> Any:
        return self._service("iam")

    @property
    def crm(self) -> Any:
        return self._service("crm")


def make_clients(settings: GcpProviderConfig) -> GcpClients:
    credentials, project = credentials_and_project(settings)
    return GcpClients(credentials, project)


# -- errors ---------------------------------------------------------------------------------
def http_status(exc: BaseException) -> int:
    response = getattr(exc, "resp", None)
    return int(getattr(response, "status", 0) or 0)


def error_reason(exc: BaseException) -> str:
    """Google's reason for an HttpError (`notFound`, `alreadyExists`, `conditionNotMet`...)."""
    content = getattr(exc, "content", b"")
    try:
        body = json.loads(content.decode() if isinstance(content, bytes) else content)
        errors = body.get("error", {}).get("errors") or [{}]
        return str(errors[0].get("reason") or body["error"].get("status") or "")
    except (ValueError, AttributeError, KeyError, TypeError):
        return ""


def error_message(exc: BaseException) -> str:
    content = getattr(exc, "content", b"")
    try:
        body = json.loads(content.decode() if isinstance(content, bytes) else content)
        message = str(body["error"]["message"])
    except (ValueError, AttributeError, KeyError, TypeError):
        message = str(exc)
    status = http_status(exc)
    if status == 401:
        return f"{message} (the credentials were refused; {CREDENTIALS_HINT})"
    if status == 403:
        return f"{message} (the credentials lack a permission this needs)"
    return message


def api_errors() -> tuple[type[BaseException], ...]:
    """What a call may raise: Google's HTTP errors and transport failures."""
    from google.auth import exceptions as auth_errors
    from googleapiclient import errors

    return (errors.HttpError, auth_errors.GoogleAuthError, OSError)


def call(request: Any, what: str) -> Any:
    """Execute a request, turning Google's errors into one ProviderError naming `what`."""
    try:
        return request.execute()
    except api_errors() as exc:
        raise ProviderError(f"cannot {what}: {error_message(exc)}") from exc
