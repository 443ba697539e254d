"""The head's service account: what the autoscaler on the head acts as (through the head
instance's metadata server), allowed to manage its cluster's instances and nothing else.

`launcher-CLUSTER` (launcher/providers/gcp/names.py), created if missing and granted what
launcher/providers/gcp/grants.py says on the project (the instance admin role under a
condition naming the cluster's instances); reused if present. Workers whose node_config
names a service account of their own run as it, and GCE lets the head create them only if
it may act as that account: the head's account gets `roles/iam.serviceAccountUser` on each
such account (not on the project). Removed, with its bindings, by `down --purge`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.gcp import grants
from launcher.providers.gcp.clients import GcpClients, api_errors, error_message, http_status
from launcher.providers.gcp.names import account_id, instance_prefix

ACT_AS = ("roles/iam.serviceAccountUser",)
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
POLICY_RETRIES = 5


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


def worker_accounts(node_configs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The service accounts (emails) the given workers' node_configs run as."""
    found: list[str] = []
    for node_config in node_configs:
        for entry in node_config.get("serviceAccounts") or ():
            address = str(entry.get("email", "")) if isinstance(entry, Mapping) else ""
            if "@" in address and address not in found:
                found.append(address)
    return found


def ensure(clients: GcpClients, cluster: str, workers_run_as: Sequence[str] = ()) -> list[str]:
    """Create the head's account when missing and bind its roles (on the project, and to
    act as each account of `workers_run_as`). Returns what it did."""
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
    member = f"serviceAccount:{address}"
    if _edit(_ProjectPolicy(clients), lambda p: grants.grant(p, cluster, member)):
        roles = " and ".join(w["role"] for w in grants.wanted(cluster))
        done.append(
            f"granted {roles} on project {clients.project} to {address}, "
            f"instances and disks limited to {instance_prefix(cluster)}-*"
        )
    for worker in workers_run_as:
        if worker != address and _bind(_AccountPolicy(clients, worker), ACT_AS, member, add=True):
            done.append(f"granted {', '.join(ACT_AS)} on {worker} to {address}")
    return done


def remove(clients: GcpClients, cluster: str, workers_run_as: Sequence[str] = ()) -> list[str]:
    """Unbind and delete the head's account (`down --purge`)."""
    address = email(clients, cluster)
    if not exists(clients, cluster):
        return []
    member = f"serviceAccount:{address}"
    for worker in workers_run_as:
        if worker != address:
            _bind(_AccountPolicy(clients, worker), ACT_AS, member, add=False, missing_ok=True)
    _edit(_ProjectPolicy(clients), lambda p: grants.revoke(p, member))
    try:
        clients.iam.projects().serviceAccounts().delete(name=_path(clients, cluster)).execute()
    except api_errors() as exc:
        if http_status(exc) != 404:
            raise ProviderError(
                f"cannot delete service account {address}: {error_message(exc)}"
            ) from exc
    return [f"service account {address}"]


class _ProjectPolicy:
    """The project's IAM policy (Resource Manager)."""

    def __init__(self, clients: GcpClients) -> None:
        self.clients = clients
        self.what = f"project {clients.project}"

    def read(self) -> dict[str, Any]:
        projects = self.clients.crm.projects()
        options = {"options": {"requestedPolicyVersion": grants.POLICY_VERSION}}
        policy: dict[str, Any] = projects.getIamPolicy(
            resource=self.clients.project, body=options
        ).execute()
        return policy

    def write(self, policy: dict[str, Any]) -> None:
        projects = self.clients.crm.projects()
        projects.setIamPolicy(resource=self.clients.project, body={"policy": policy}).execute()


class _AccountPolicy:
    """A service account's own IAM policy (who may act as it)."""

    def __init__(self, clients: GcpClients, address: str) -> None:
        self.clients = clients
        self.resource = f"projects/{clients.project}/serviceAccounts/{address}"
        self.what = f"service account {address}"

    def read(self) -> dict[str, Any]:
        accounts = self.clients.iam.projects().serviceAccounts()
        policy: dict[str, Any] = accounts.getIamPolicy(resource=self.resource).execute()
        return policy

    def write(self, policy: dict[str, Any]) -> None:
        accounts = self.clients.iam.projects().serviceAccounts()
        accounts.setIamPolicy(resource=self.resource, body={"policy": policy}).execute()


def _bind(
    target: _ProjectPolicy | _AccountPolicy,
    roles: Sequence[str],
    member: str,
    *,
    add: bool,
    missing_ok: bool = False,
) -> bool:
    """Add (or remove) `member` to `roles` in `target`'s policy. Whether it changed."""
    return _edit(target, lambda p: _changed(p, roles, member, add), missing_ok=missing_ok)


def _edit(
    target: _ProjectPolicy | _AccountPolicy,
    change: Callable[[dict[str, Any]], bool],
    *,
    missing_ok: bool = False,
) -> bool:
    """Apply `change` to `target`'s policy: read-modify-write with the policy's etag, again
    when another writer changed it meanwhile (409). Returns whether it changed."""
    for attempt in range(POLICY_RETRIES + 1):
        try:
            policy = target.read()
            if change(policy):
                target.write(policy)
                return True
            return False
        except api_errors() as exc:
            if http_status(exc) == 409 and attempt < POLICY_RETRIES:
                continue
            if http_status(exc) == 404 and missing_ok:
                return False
            raise ProviderError(
                f"cannot change the IAM policy of {target.what}: {error_message(exc)}"
            ) from exc
    return False


def _changed(policy: dict[str, Any], roles: Sequence[str], member: str, add: bool) -> bool:
    """Put `member` in (or out of) each of `roles` in `policy`; whether anything changed."""
    bindings = policy.setdefault("bindings", [])
    changed = False
    for role in roles:
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
    return changed
