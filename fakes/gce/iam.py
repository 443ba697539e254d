"""IAM v1 (service accounts and their policies), Cloud Resource Manager v1 (the project and
its IAM policy) and the OAuth2 token endpoint of fakes/gce/server.py.

IAM and Resource Manager answer errors without GCE's `errors` list (`GoogleError.body(False)`).
Policies carry an `etag`; a setIamPolicy with a stale etag is 409 ABORTED, as Resource
Manager answers concurrent read-modify-write cycles.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from fakes.gce.faults import Call, GoogleError

if TYPE_CHECKING:
    from fakes.gce.server import GceServer

# google-auth 2.63 puts Google's token URI in `aud` whatever the key file's token_uri is.
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_ACCOUNT_ID = re.compile(r"[a-z](?:[-a-z0-9]{4,28}[a-z0-9])")
_MEMBER = re.compile(
    r"(user|serviceAccount|group|domain|principal|principalSet):.+|allUsers|allAuthenticatedUsers"
)


_WITHCOND = "_withcond_"


def _check_condition(condition: Any, version: int) -> None:
    """A binding's condition: version 3, a title, and an expression the fake can evaluate."""
    from fakes.gce.authz import compile_condition

    if version < 3:
        raise GoogleError(
            400,
            "badRequest",
            "Invalid policy: conditional role bindings require policy version 3.",
        )
    if not isinstance(condition, dict) or not condition.get("title"):
        raise GoogleError(400, "badRequest", "Condition title must be specified.")
    try:
        compile_condition(str(condition.get("expression", "")))
    except ValueError as error:
        raise GoogleError(
            400, "badRequest", f"Condition expression is not valid: {error}"
        ) from error


def _etag(policy: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(policy.get("bindings", []), sort_keys=True).encode())
    return base64.b64encode(digest.digest()[:8]).decode()


_PERMISSION = re.compile(r"[a-z][a-zA-Z0-9]*(\.[a-zA-Z][a-zA-Z0-9]*){2}")


class Iam:
    def __init__(self, server: GceServer) -> None:
        self.server = server
        self.tokens: dict[str, str] = {}  # access token -> service account email
        self.token_origins: dict[str, str] = {}  # metadata server token -> instance name
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.accounts: dict[str, dict[str, Any]] = {}
        self.account_policies: dict[str, dict[str, Any]] = {}
        self.add_account(self.server.account_email.split("@")[0], "launcher tests")
        owner = f"serviceAccount:{self.server.account_email}"
        editor = f"serviceAccount:{self.server.default_compute_account}"
        self.policy: dict[str, Any] = {
            "version": 1,
            "bindings": [
                {"role": "roles/editor", "members": [editor]},
                {"role": "roles/owner", "members": [owner]},
            ],
        }
        self.policy["etag"] = _etag(self.policy)

    # -- accounts --

    def add_account(self, account_id: str, display_name: str = "") -> dict[str, Any]:
        project = self.server.project
        email = f"{account_id}@{project}.iam.gserviceaccount.com"
        unique = str(random.randrange(10**20, 10**21))
        account = {
            "name": f"projects/{project}/serviceAccounts/{email}",
            "projectId": project,
            "uniqueId": unique,
            "email": email,
            "displayName": display_name,
            "etag": "MDEwMjE5MjA=",
            "oauth2ClientId": unique,
        }
        self.accounts[email] = account
        return account

    def has_account(self, email: str) -> bool:
        return email in self.accounts or email == self.server.default_compute_account

    def _account(self, name: str) -> dict[str, Any]:
        found = re.fullmatch(r"projects/([^/]+)/serviceAccounts/([^/]+)", name)
        key = found.group(2) if found else ""
        for account in self.accounts.values():
            if (
                key in (account["email"], account["uniqueId"])
                and found
                and found.group(1) in ("-", self.server.project)
            ):
                return account
        raise GoogleError(
            404,
            "notFound",
            f"Unknown service account: {name}" if found else "Unknown service account",
        )

    def create_account(self, call: Call) -> dict[str, Any]:
        if call.params.get("name") != f"projects/{self.server.project}":
            raise GoogleError(404, "notFound", f"Project {call.params.get('name')} not found")
        body = call.body if isinstance(call.body, dict) else {}
        account_id = str(body.get("accountId", ""))
        if not _ACCOUNT_ID.fullmatch(account_id):
            raise GoogleError(
                400,
                "badRequest",
                f"Invalid value for field 'accountId': '{account_id}'. The account ID must be 6 to "
                "30 characters, lowercase letters, digits and hyphens, starting with a letter.",
            )
        email = f"{account_id}@{self.server.project}.iam.gserviceaccount.com"
        if email in self.accounts:
            raise GoogleError(
                409,
                "alreadyExists",
                f"Service account {account_id} already exists within project projects/{self.server.project}.",
            )
        details = body.get("serviceAccount") or {}
        account = self.add_account(account_id, details.get("displayName", ""))
        if details.get("description"):
            account["description"] = details["description"]
        return account

    def get_account(self, call: Call) -> dict[str, Any]:
        return self._account(call.params.get("name", ""))

    def delete_account(self, call: Call) -> dict[str, Any]:
        account = self._account(call.params.get("name", ""))
        del self.accounts[account["email"]]
        self.account_policies.pop(account["email"], None)
        return {}

    def list_accounts(self, call: Call) -> dict[str, Any]:
        from fakes.gce.filter import page

        if call.params.get("name") != f"projects/{self.server.project}":
            raise GoogleError(404, "notFound", f"Project {call.params.get('name')} not found")
        params = dict(call.params)
        params["maxResults"] = params.pop("pageSize", "100")
        chunk, token = page(sorted(self.accounts.values(), key=lambda a: a["email"]), params)
        answer: dict[str, Any] = {"accounts": chunk}
        if token:
            answer["nextPageToken"] = token
        return answer

    def get_account_policy(self, call: Call) -> dict[str, Any]:
        email = self._account(call.params.get("resource", ""))["email"]
        policy = self.account_policies.setdefault(email, {"version": 1, "etag": "ACAB"})
        return policy

    def set_account_policy(self, call: Call) -> dict[str, Any]:
        email = self._account(call.params.get("resource", ""))["email"]
        current = self.account_policies.setdefault(email, {"version": 1, "etag": "ACAB"})
        policy = self._new_policy(call, current)
        self.account_policies[email] = policy
        return policy

    def _new_policy(self, call: Call, current: dict[str, Any]) -> dict[str, Any]:
        body = call.body if isinstance(call.body, dict) else {}
        given = body.get("policy")
        if not isinstance(given, dict):
            raise GoogleError(400, "badRequest", "Request contains an invalid argument.")
        if given.get("etag") and given["etag"] != current.get("etag"):
            raise GoogleError(
                409,
                "aborted",
                "There were concurrent policy changes. Please retry the whole read-modify-write "
                "with exponential backoff. The request's ETag does not match the current policy.",
            )
        bindings = []
        version = int(given.get("version") or 1)
        for binding in given.get("bindings") or []:
            role = str(binding.get("role", ""))
            if not role.startswith(("roles/", "projects/", "organizations/")) or _WITHCOND in role:
                raise GoogleError(
                    400, "badRequest", f"Role ({role}) does not exist in the resource's hierarchy."
                )
            condition = binding.get("condition")
            if condition:
                _check_condition(condition, version)
            for member in binding.get("members") or []:
                if not _MEMBER.fullmatch(str(member)):
                    raise GoogleError(400, "badRequest", f"Invalid member: {member}")
                kind, _, who = str(member).partition(":")
                if (
                    kind == "serviceAccount"
                    and who.endswith(".iam.gserviceaccount.com")
                    and not self.has_account(who)
                ):
                    raise GoogleError(400, "badRequest", f"Service account {who} does not exist.")
            kept = {"role": role, "members": sorted(set(binding.get("members") or []))}
            if condition:
                kept["condition"] = dict(condition)
            bindings.append(kept)
        policy: dict[str, Any] = {"version": version, "bindings": bindings}
        policy["etag"] = _etag(policy)
        return policy

    # -- Resource Manager --

    def _crm_project(self, project: str | None) -> None:
        if project != self.server.project:
            raise GoogleError(
                403,
                "forbidden",
                "The caller does not have permission",  # as CRM answers for unknown projects
            )

    def get_project(self, call: Call) -> dict[str, Any]:
        self._crm_project(call.params.get("projectId"))
        return {
            "projectNumber": self.server.project_number,
            "projectId": self.server.project,
            "lifecycleState": "ACTIVE",
            "name": self.server.project,
            "createTime": "2024-01-01T00:00:00.000Z",
            "parent": {"type": "organization", "id": "100000000001"},
        }

    def test_project_permissions(self, call: Call) -> dict[str, Any]:
        """projects.testIamPermissions: which of the permissions asked about the caller
        holds on the project (by the policy's bindings; a conditional binding counts where
        its condition holds for the project itself). Any caller may ask; the answer omits
        `permissions` when it holds none, and a name that is no permission is a 400."""
        from fakes.gce.authz import held

        self._crm_project(call.params.get("resource"))
        body = call.body if isinstance(call.body, dict) else {}
        asked = body.get("permissions") or []
        for permission in asked:
            if not isinstance(permission, str) or not _PERMISSION.fullmatch(permission):
                raise GoogleError(
                    400, "badRequest", f"Permission {permission} is not valid for this resource."
                )
        granted = held(self.server, call.caller or "", list(asked))
        return {"permissions": granted} if granted else {}

    def get_project_policy(self, call: Call) -> dict[str, Any]:
        """The policy; as version 1 unless the request asks for 3, in which a conditional
        binding's role is shown as `ROLE_withcond_HASH` without its condition (as IAM does:
        such a policy cannot be set back)."""
        self._crm_project(call.params.get("resource"))
        body = call.body if isinstance(call.body, dict) else {}
        asked = int((body.get("options") or {}).get("requestedPolicyVersion") or 1)
        if asked >= 3 or not any(b.get("condition") for b in self.policy["bindings"]):
            return self.policy
        shown: list[dict[str, Any]] = []
        for binding in self.policy["bindings"]:
            if binding.get("condition"):
                digest = hashlib.sha256(json.dumps(binding["condition"], sort_keys=True).encode())
                role = f"{binding['role']}{_WITHCOND}{digest.hexdigest()[:20]}"
                shown.append({"role": role, "members": binding["members"]})
            else:
                shown.append(binding)
        return {"version": 1, "bindings": shown, "etag": self.policy["etag"]}

    def set_project_policy(self, call: Call) -> dict[str, Any]:
        self._crm_project(call.params.get("resource"))
        self.policy = self._new_policy(call, self.policy)
        return self.policy

    # -- OAuth2 --

    def token(self, form_body: bytes) -> tuple[int, dict[str, Any]]:
        """The token endpoint: a JWT-bearer grant whose assertion is a JWT (header, claims,
        signature; the signature is not checked) issued by a service account of this
        project for this endpoint. Returns (HTTP status, JSON)."""
        form = dict(parse_qsl(form_body.decode(errors="replace")))
        if form.get("grant_type") != JWT_BEARER:
            return 400, {
                "error": "unsupported_grant_type",
                "error_description": "Invalid grant_type.",
            }
        parts = form.get("assertion", "").split(".")
        try:
            if len(parts) != 3 or not parts[2]:
                raise ValueError("not a signed JWT")
            header, claims = (
                json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2]
            )
            if header.get("alg") != "RS256" or not isinstance(claims, dict):
                raise ValueError("not RS256")
            now = time.time()
            if not (claims["iat"] - 300 <= now <= claims["exp"] + 300):
                raise ValueError("expired or not yet valid")
        except (ValueError, KeyError, TypeError) as error:
            return 400, {"error": "invalid_grant", "error_description": f"Invalid JWT: {error}"}
        if claims.get("aud") not in (self.server.token_uri, GOOGLE_TOKEN_URI):
            return 400, {
                "error": "invalid_grant",
                "error_description": "Invalid JWT: audience is not this token endpoint.",
            }
        if claims.get("iss") not in self.accounts:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        access = f"ya29.fake-{secrets.token_urlsafe(24)}"
        with self._lock:
            self.tokens[access] = str(claims["iss"])
        return 200, {"access_token": access, "expires_in": 3599, "token_type": "Bearer"}

    def token_origin(self, authorization: str) -> str | None:
        """The instance whose metadata server issued the request's token, if one did."""
        with self._lock:
            return self.token_origins.get(authorization.partition(" ")[2].strip())

    def token_owner(self, authorization: str) -> str | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        with self._lock:
            return self.tokens.get(token.strip())
