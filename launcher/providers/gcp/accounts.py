"""The head's service account: what the autoscaler on the head acts as (through the head
instance's metadata server), allowed to manage the project's instances and nothing else.

`launcher-CLUSTER` (shortened to GCE's 30-character limit), created if missing and given the
project role `roles/compute.instanceAdmin.v1`; reused if present. Removed, with its binding,
by `down --purge`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.gcp.clients import GcpClients, api_errors, error_message, http_status

ROLES = ("roles/compute.instanceAdmin.v1",)
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
POLICY_RETRIES = 5


def account_id(cluster: str) -> str:
    """A valid account id (6-30 characters, [a-z][a-z0-9-]*[a-z0-9]) for the cluster."""
    stem = re.sub(r"[^a-z0-9-]+", "-", cluster.lower()).strip("-")
    name = f"launcher-{stem}"
    if len(name) > 30 or not stem:
        name = f"launcher-{stem[:12].strip('-')}-{hashlib.sha256(cluster.encode()).hexdigest()[:8]}"
    return name.strip("-")


def email(clients: GcpClients, cluster: str) -> str:
    return f"{account_id(cluster)}@{clients.project}.iam.gserviceaccount.com"


def _path(clients: GcpClients, cluster: str) -> str:
    return f"projects/{clients.project}/serviceAccounts/{email(clients, cluster)}"


def exists(clients: GcpClients, cluster: str) -> bool:
    accounts = clients.iam.projects().serviceAccounts()
    try:
        accounts.get(name=_path(clients, cluster)).execute()
    except api_errors() as exc:
        if http_status(exc) == 404:
            return False
        raise ProviderError(
            f"cannot read service account {email(clients, cluster)}: {error_message(exc)}"
        ) from exc
    return True


def ensure(clients: GcpClients, cluster: str) -> list[str]:
    """Create the head's account when missing and bind its roles. Returns what it did."""
    done = []
    address = email(clients, cluster)
    if not exists(clients, cluster):
        body = {
            "accountId": account_id(cluster),
            "serviceAccount": {"displayName": f"launcher head of cluster {cluster}"},
        }
        try:
            clients.iam.projects().serviceAccounts().create(
                name=f"projects/{clients.project}", body=body
            ).execute()
            done.append(f"created service account {address} for the head")
        except api_errors() as exc:
            if http_status(exc) != 409:
                raise ProviderError(
                    f"cannot create service account {address}: {error_message(exc)}"
                ) from exc
    if _bind(clients, f"serviceAccount:{address}", add=True):
        done.append(f"granted {', '.join(ROLES)} on project {clients.project} to {address}")
    return done


def remove(clients: GcpClients, cluster: str) -> list[str]:
    """Unbind and delete the head's account (`down --purge`)."""
    address = email(clients, cluster)
    if not exists(clients, cluster):
        return []
    _bind(clients, f"serviceAccount:{address}", add=False)
    try:
        clients.iam.projects().serviceAccounts().delete(name=_path(clients, cluster)).execute()
    except api_errors() as exc:
        if http_status(exc) != 404:
            raise ProviderError(
                f"cannot delete service account {address}: {error_message(exc)}"
            ) from exc
    return [f"service account {address}"]


def _bind(clients: GcpClients, member: str, *, add: bool) -> bool:
    """Add (or remove) `member` to the project's ROLES; read-modify-write with the policy's
    etag, again when another writer changed it meanwhile (409). Returns whether it changed."""
    projects = clients.crm.projects()
    for attempt in range(POLICY_RETRIES + 1):
        try:
            policy: dict[str, Any] = projects.getIamPolicy(
                resource=clients.project, body={}
            ).execute()
            bindings = policy.setdefault("bindings", [])
            changed = False
            for role in ROLES:
                binding = next((b for b in bindings if b.get("role") == role), None)
                members = binding.setdefault("members", []) if binding else None
                if add and binding is None:
                    bindings.append({"role": role, "members": [member]})
                    changed = True
                elif add and members is not None and member not in members:
                    members.append(member)
                    changed = True
                elif not add and members is not None and member in members:
                    members.remove(member)
                    changed = True
            if changed:
                projects.setIamPolicy(resource=clients.project, body={"policy": policy}).execute()
            return changed
        except api_errors() as exc:
            if http_status(exc) == 409 and attempt < POLICY_RETRIES:
                continue
            raise ProviderError(
                f"cannot change the IAM policy of project {clients.project}: {error_message(exc)}"
            ) from exc
    return False
