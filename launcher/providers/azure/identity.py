"""The head's user-assigned managed identity, and its one role assignment: Contributor on
the cluster's resource group (Ray's Azure launcher grants Contributor on the whole
subscription; the head's autoscaler needs only the group its nodes live in).

The identity is the user's own when `provider.msi_name` names one (in `msi_resource_group`,
else the cluster's group): it is used as it is, given no role, and never removed. Else it is
created, tagged as the cluster's, and removed by `down --purge` with its assignment.

A role assignment for a principal made seconds ago can be refused with `PrincipalNotFound`
while Entra replicates it; it is tried again for up to `wait_s`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from launcher.errors import ProviderError
from launcher.providers.azure import names
from launcher.providers.azure.clients import AzureClients, arm_code, arm_message, get_or_none
from launcher.providers.azure.model import AzureProviderConfig
from launcher.providers.azure.network import OWNER_TAG

REPLICATION_CODES = frozenset({"PrincipalNotFound"})


@dataclass(frozen=True)
class HeadIdentity:
    id: str  # the identity's resource id, as a VM's `userAssignedIdentities` names it
    client_id: str
    principal_id: str


def group_scope(clients: AzureClients, group: str) -> str:
    return f"/subscriptions/{clients.subscription}/resourceGroups/{group}"


def ensure_identity(
    clients: AzureClients,
    settings: AzureProviderConfig,
    cluster: str,
    *,
    wait_s: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[HeadIdentity, list[str]]:
    """The head's identity, made and granted where it is the cluster's own."""
    identities = clients.identities.user_assigned_identities
    done: list[str] = []
    if settings.msi_name:
        group = settings.msi_resource_group or settings.resource_group
        found = get_or_none(lambda: identities.get(group, settings.msi_name))
        if found is None:
            raise ProviderError(
                f"provider.msi_name: no managed identity {settings.msi_name} in resource "
                f"group {group}; create it, or remove msi_name to let the launcher make one"
            )
        return HeadIdentity(found.id, found.client_id, found.principal_id), done
    group, name = settings.resource_group, names.identity(cluster, settings.unique_id)
    found = get_or_none(lambda: identities.get(group, name))
    if found is None:
        try:
            found = identities.create_or_update(
                group, name, {"location": settings.location, "tags": {OWNER_TAG: cluster}}
            )
        except Exception as exc:
            raise ProviderError(
                f"cannot create managed identity {name}: {arm_message(exc)}"
            ) from exc
        done.append(f"created managed identity {name} (the head's)")
    head = HeadIdentity(found.id, found.client_id, found.principal_id)
    if _grant(clients, group, head, wait_s, sleep):
        done.append(f"granted {name} Contributor on resource group {group} only")
    return head, done


def _grant(
    clients: AzureClients,
    group: str,
    head: HeadIdentity,
    wait_s: float,
    sleep: Callable[[float], None],
) -> bool:
    """Assign Contributor on the group to the identity; False when it already was."""
    assignments = clients.authorization.role_assignments
    scope = group_scope(clients, group)
    assignment = names.role_assignment(scope, head.principal_id)
    if get_or_none(lambda: assignments.get(scope, assignment)) is not None:
        return False
    role = (
        f"/subscriptions/{clients.subscription}/providers/Microsoft.Authorization/"
        f"roleDefinitions/{names.CONTRIBUTOR_ROLE}"
    )
    body = {
        "properties": {
            "roleDefinitionId": role,
            "principalId": head.principal_id,
            "principalType": "ServicePrincipal",
        }
    }
    deadline = time.monotonic() + wait_s
    delay = 1.0
    while True:
        try:
            assignments.create(scope, assignment, body)
            return True
        except Exception as exc:
            if arm_code(exc) == "RoleAssignmentExists":
                return False
            if arm_code(exc) not in REPLICATION_CODES or time.monotonic() >= deadline:
                raise ProviderError(
                    f"cannot grant the head's identity Contributor on {group}: {arm_message(exc)}"
                ) from exc
        sleep(delay)
        delay = min(delay * 2, 10.0)


def remove_identity(
    clients: AzureClients, settings: AzureProviderConfig, cluster: str
) -> list[str]:
    """Remove the identity the cluster created and its role assignment (never the user's
    own, named by msi_name)."""
    if settings.msi_name:
        return []
    identities = clients.identities.user_assigned_identities
    group, name = settings.resource_group, names.identity(cluster, settings.unique_id)
    found = get_or_none(lambda: identities.get(group, name))
    if found is None or (found.tags or {}).get(OWNER_TAG) != cluster:
        return []
    removed = []
    scope = group_scope(clients, group)
    assignment = names.role_assignment(scope, found.principal_id)
    assignments = clients.authorization.role_assignments
    if get_or_none(lambda: assignments.get(scope, assignment)) is not None:
        try:
            assignments.delete(scope, assignment)
        except Exception as exc:
            raise ProviderError(f"cannot remove the head's role: {arm_message(exc)}") from exc
        removed.append(f"role assignment of {name} on {group}")
    try:
        identities.delete(group, name)
    except Exception as exc:
        raise ProviderError(f"cannot delete managed identity {name}: {arm_message(exc)}") from exc
    removed.append(f"managed identity {name}")
    return removed
