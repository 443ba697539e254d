"""Microsoft Entra as msal and azure-identity use it against `authority=https://127.0.0.1:PORT`
(with instance discovery disabled, or answered here): the tenant's OpenID configuration,
instance discovery, and the v2.0 token endpoint's client-credentials grant; plus the
principals the fake knows (the client-secret service principal, managed identities) and
the access tokens it issued, each to one principal (and, through IMDS, from one VM).

Tokens are opaque random strings (msal does not read an access token). They last
`expires_in` seconds (3599 by default; `TokenBook.expire_all()` ends them all at once).
"""

from __future__ import annotations

import datetime
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl


@dataclass
class Principal:
    object_id: str
    client_id: str
    kind: str  # "ServicePrincipal" or "ManagedIdentity"
    name: str
    secret: str | None = None
    identity_id: str | None = None  # a managed identity's resource id
    created: float = field(default_factory=time.monotonic)
    owner: bool = False  # may do anything (the fake's own service principal), no role needed


@dataclass
class Issued:
    principal: str  # object id
    origin: str | None  # the VM whose IMDS issued it
    expires: float
    resource: str


class TokenBook:
    """Principals and tokens (thread-safety: the server's lock)."""

    def __init__(self, tenant: str, expires_in: int = 3599) -> None:
        self.tenant = tenant
        self.expires_in = expires_in
        self.principals: dict[str, Principal] = {}  # object id -> principal
        self.tokens: dict[str, Issued] = {}

    def clear(self) -> None:
        self.principals = {k: p for k, p in self.principals.items() if p.owner}
        self.tokens.clear()

    def add(self, principal: Principal) -> Principal:
        self.principals[principal.object_id.lower()] = principal
        return principal

    def by_client(self, client_id: str) -> Principal | None:
        return next(
            (p for p in self.principals.values() if p.client_id.lower() == client_id.lower()),
            None,
        )

    def principal(self, object_id: str) -> Principal | None:
        return self.principals.get(object_id.lower())

    def issue(self, principal: Principal, resource: str, origin: str | None = None) -> str:
        token = "fake-arm-" + secrets.token_urlsafe(32)
        self.tokens[token] = Issued(
            principal.object_id, origin, time.monotonic() + self.expires_in, resource
        )
        return token

    def lookup(self, authorization: str) -> tuple[Issued | None, str]:
        """The token of an Authorization header, or None and ARM's error code."""
        scheme, _, token = authorization.partition(" ")
        if not authorization:
            return None, "AuthenticationFailed"
        if scheme.lower() != "bearer" or not token.strip():
            return None, "InvalidAuthenticationToken"
        issued = self.tokens.get(token.strip())
        if issued is None:
            return None, "InvalidAuthenticationToken"
        if issued.expires < time.monotonic():
            return None, "ExpiredAuthenticationToken"
        return issued, ""

    def expire_all(self) -> None:
        for issued in self.tokens.values():
            issued.expires = 0.0


def openid_configuration(base: str, tenant: str) -> dict[str, Any]:
    """What msal reads from {authority}/v2.0/.well-known/openid-configuration."""
    root = f"{base}/{tenant}"
    return {
        "token_endpoint": f"{root}/oauth2/v2.0/token",
        "token_endpoint_auth_methods_supported": [
            "client_secret_post",
            "private_key_jwt",
            "client_secret_basic",
        ],
        "jwks_uri": f"{base}/{tenant}/discovery/v2.0/keys",
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": f"{root}/v2.0",
        "request_uri_parameter_supported": False,
        "userinfo_endpoint": f"{base}/oidc/userinfo",
        "authorization_endpoint": f"{root}/oauth2/v2.0/authorize",
        "device_authorization_endpoint": f"{root}/oauth2/v2.0/devicecode",
        "http_logout_supported": True,
        "frontchannel_logout_supported": True,
        "end_session_endpoint": f"{root}/oauth2/v2.0/logout",
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "nonce", "tid", "oid"],
        "kerberos_endpoint": f"{root}/kerberos",
        "tenant_region_scope": "NA",
        "cloud_instance_name": "fake.azure.local",
        "cloud_graph_host_name": "127.0.0.1",
        "msgraph_host": "127.0.0.1",
        "rbac_url": base,
    }


def instance_discovery(base: str, query: dict[str, str]) -> dict[str, Any]:
    """GET /common/discovery/instance: the authority is known (this server)."""
    authorize = query.get("authorization_endpoint", f"{base}/common/oauth2/v2.0/authorize")
    tenant = authorize.split("/")[3] if authorize.count("/") > 3 else "common"
    host = base.split("://", 1)[-1]
    return {
        "tenant_discovery_endpoint": f"{base}/{tenant}/v2.0/.well-known/openid-configuration",
        "api-version": "1.1",
        "metadata": [{"preferred_network": host, "preferred_cache": host, "aliases": [host]}],
    }


def _aadsts(status: int, error: str, number: int, description: str) -> tuple[int, dict[str, Any]]:
    trace, correlation = str(uuid.uuid4()), str(uuid.uuid4())
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return status, {
        "error": error,
        "error_description": f"AADSTS{number}: {description} Trace ID: {trace} Correlation "
        f"ID: {correlation} Timestamp: {stamp}",
        "error_codes": [number],
        "timestamp": stamp,
        "trace_id": trace,
        "correlation_id": correlation,
        "error_uri": f"https://login.microsoftonline.com/error?code={number}",
    }


def token_grant(
    book: TokenBook, tenant: str, raw: bytes
) -> tuple[int, dict[str, Any], Principal | None]:
    """POST /{tenant}/oauth2/v2.0/token (client_credentials with a client secret)."""
    form = dict(parse_qsl(raw.decode(errors="replace"), keep_blank_values=True))
    if tenant.lower() not in (book.tenant.lower(), "organizations"):
        status, body = _aadsts(
            400,
            "invalid_request",
            90002,
            f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID "
            "and are signing into the correct cloud.",
        )
        return status, body, None
    if form.get("grant_type") != "client_credentials":
        status, body = _aadsts(
            400,
            "unsupported_grant_type",
            70003,
            f"The app requested an unsupported grant type '{form.get('grant_type')}'.",
        )
        return status, body, None
    client_id = form.get("client_id", "")
    principal = book.by_client(client_id)
    if principal is None or principal.secret is None:
        status, body = _aadsts(
            400,
            "unauthorized_client",
            700016,
            f"Application with identifier '{client_id}' was not found in the directory "
            f"'{book.tenant}'.",
        )
        return status, body, None
    if form.get("client_secret") != principal.secret:
        status, body = _aadsts(
            401,
            "invalid_client",
            7000215,
            "Invalid client secret provided. Ensure the secret being sent in the request is "
            f"the client secret value, not the client secret ID, for a secret added to app "
            f"'{client_id}'.",
        )
        return status, body, None
    scope = form.get("scope", "")
    resource = next((s for s in scope.split() if s.endswith("/.default")), scope)
    token = book.issue(principal, resource.removesuffix("/.default"))
    return (
        200,
        {
            "token_type": "Bearer",
            "expires_in": book.expires_in,
            "ext_expires_in": book.expires_in,
            "access_token": token,
        },
        principal,
    )


def dumps(body: Any) -> bytes:
    return json.dumps(body).encode()
