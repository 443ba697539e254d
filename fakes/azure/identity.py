"""Microsoft.ManagedIdentity (user-assigned identities) and Microsoft.Authorization (role
assignments, built-in role definitions) for fakes/azure/server.py, and the authorization
of calls made with managed-identity tokens.

The fake's client-secret service principal owns the subscription: its calls are always
allowed. Any other principal's call (a managed identity's, or a service principal's made
with `AzureServer.add_service_principal`) is allowed only where a role assignment of the
principal, at the call's scope or above it, grants the action: Owner everything, Contributor everything but
Microsoft.Authorization writes and deletes, Reader only reads; otherwise 403
AuthorizationFailed. Operation polls (operations / operationResults) are not checked.
A role assignment PUT for a principal made less than `principal_delay` seconds ago answers
400 PrincipalNotFound (Azure's directory replication delay).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fakes.azure.common import location_of, new_resource, tags_of
from fakes.azure.faults import ArmError, Call
from fakes.azure.routes import Ctx, Reply, Target, handles
from fakes.azure.store import Resource, id_key, now_text
from fakes.azure.tokens import Principal

if TYPE_CHECKING:
    from fakes.azure.server import AzureServer

MI = "Microsoft.ManagedIdentity/userAssignedIdentities"
RA = "Microsoft.Authorization/roleAssignments"
RD = "Microsoft.Authorization/roleDefinitions"
OWNER = "8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
CONTRIBUTOR = "b24988ac-6180-42a0-ab88-20f7382dd24c"
READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
ROLES = {
    OWNER: (
        "Owner",
        "Grants full access to manage all resources, including the ability to assign roles in Azure RBAC.",
        ["*"],
        [],
    ),
    CONTRIBUTOR: (
        "Contributor",
        "Grants full access to manage all resources, but does not allow you to assign roles in Azure RBAC, manage assignments in Azure Blueprints, or share image galleries.",
        ["*"],
        [
            "Microsoft.Authorization/*/Delete",
            "Microsoft.Authorization/*/Write",
            "Microsoft.Authorization/elevateAccess/Action",
            "Microsoft.Blueprint/blueprintAssignments/write",
            "Microsoft.Blueprint/blueprintAssignments/delete",
            "Microsoft.Compute/galleries/share/action",
        ],
    ),
    READER: (
        "Reader",
        "View all resources, but does not allow you to make any changes.",
        ["*/read"],
        [],
    ),
}


@dataclass
class Assignment:
    name: str
    scope: str
    role: str  # role definition guid
    role_definition_id: str  # as given
    principal: str
    principal_type: str
    created: str

    @property
    def id(self) -> str:
        return f"{self.scope.rstrip('/')}/providers/{RA}/{self.name}"

    def answer(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "type": RA,
            "properties": {
                "roleDefinitionId": self.role_definition_id,
                "principalId": self.principal,
                "principalType": self.principal_type,
                "scope": self.scope,
                "createdOn": self.created,
                "updatedOn": self.created,
                "condition": None,
                "conditionVersion": None,
            },
        }


class Identity:
    def __init__(self, server: AzureServer) -> None:
        self.server = server
        self.assignments: dict[str, Assignment] = {}  # lower(name) -> assignment

    def reset(self) -> None:
        self.assignments.clear()

    def assignment(self, name: str) -> Assignment | None:
        return self.assignments.get(name.lower())

    def drop_scope(self, scope: str) -> None:
        """Role assignments at or under `scope` (its deletion)."""
        prefix = id_key(scope)
        for key, a in list(self.assignments.items()):
            if id_key(a.scope) == prefix or id_key(a.scope).startswith(prefix + "/"):
                del self.assignments[key]

    def drop_identity(self, mi: Resource) -> None:
        self.server.store.remove(mi)
        principal = self.server.tokens.principal(mi.props["principalId"])
        if principal is not None:
            del self.server.tokens.principals[principal.object_id.lower()]

    # -- authorization --

    def refusal(self, call: Call, target: Target) -> ArmError | None:
        if call.principal is None or target.short in ("operations", "operationResults"):
            return None
        principal = self.server.tokens.principal(call.principal)
        if principal is None:
            return ArmError(
                401, "InvalidAuthenticationToken", "The access token's principal no longer exists."
            )
        if principal.owner:
            return None
        scope = _scope_of(call, target)
        action = _action_of(call, target)
        for a in self.assignments.values():
            if a.principal.lower() != principal.object_id.lower():
                continue
            if not (
                id_key(scope) == id_key(a.scope) or id_key(scope).startswith(id_key(a.scope) + "/")
            ):
                continue
            if _grants(a.role, action):
                return None
        return ArmError(
            403,
            "AuthorizationFailed",
            f"The client '{principal.client_id}' with object id '{principal.object_id}' does not "
            f"have authorization to perform action '{action}' over scope '{scope}' or the scope "
            "is invalid. If access was recently granted, please refresh your credentials.",
        )


def _scope_of(call: Call, target: Target) -> str:
    if target.scope is not None:
        return target.scope
    path = call.path.rstrip("/")
    if target.action is not None:
        path = path.rsplit("/", 1)[0]
    return path


def _action_of(call: Call, target: Target) -> str:
    kind = target.kind or "Microsoft.Resources/subscriptions"
    if target.short == "resources":
        kind = "Microsoft.Resources/subscriptions/resourceGroups/resources"
    elif target.short == "resourceGroups":
        kind = "Microsoft.Resources/subscriptions/resourceGroups"
    if target.action is not None:
        return f"{kind}/{target.action}/action"
    verb = {
        "GET": "read",
        "HEAD": "read",
        "PUT": "write",
        "PATCH": "write",
        "DELETE": "delete",
    }.get(call.method, "action")
    return f"{kind}/{verb}"


def _grants(role: str, action: str) -> bool:
    import fnmatch

    entry = ROLES.get(role.lower())
    if entry is None:
        return False
    _, _, actions, not_actions = entry
    low = action.lower()
    allowed = any(fnmatch.fnmatch(low, a.lower()) for a in actions)
    return allowed and not any(fnmatch.fnmatch(low, n.lower()) for n in not_actions)


# -- user-assigned identities ---------------------------------------------------------------


@handles(MI, "put")
def put_identity(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    server.store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    location = location_of(ctx, body)
    existing = server.store.maybe(t.sub, t.rg, MI, t.name)
    if existing is not None:
        existing.body["tags"] = tags_of(body)
        return Reply(200, existing.answer())
    res = new_resource(ctx, {})
    principal = server.tokens.add(
        Principal(
            str(uuid.uuid4()), str(uuid.uuid4()), "ManagedIdentity", t.name, identity_id=res.id
        )
    )
    res.body.update(
        {
            "location": location,
            "tags": tags_of(body),
            "properties": {
                "tenantId": server.tenant,
                "principalId": principal.object_id,
                "clientId": principal.client_id,
                "isolationScope": "None",
            },
        }
    )
    server.store.add(res)
    return Reply(201, res.answer())


@handles(MI, "get")
def get_identity(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    return Reply(200, ctx.server.store.get(t.sub, t.rg, MI, t.name).answer())


@handles(MI, "list:get")
def list_identities(ctx: Ctx) -> Reply:
    t = ctx.target
    if t.sub is not None and t.rg is not None:
        ctx.server.store.group(t.sub, t.rg)
    return Reply(200, {"value": [r.answer() for r in ctx.server.store.of_kind(MI, t.sub, t.rg)]})


@handles(MI, "delete")
def delete_identity(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg and t.name
    server = ctx.server
    server.store.group(t.sub, t.rg)
    res = server.store.maybe(t.sub, t.rg, MI, t.name)
    if res is None:
        return Reply(204)
    server.identity.drop_identity(res)
    return Reply(200)


# -- role assignments and definitions -----------------------------------------------------


def _role_guid(role_definition_id: str) -> str:
    return role_definition_id.rstrip("/").rpartition("/")[2].lower()


def _check_scope(ctx: Ctx, scope: str) -> None:
    parts = [p for p in scope.split("/") if p]
    if (
        len(parts) < 2
        or parts[0].lower() != "subscriptions"
        or parts[1].lower() != ctx.server.subscription.lower()
    ):
        raise ArmError(
            400,
            "InvalidScope",
            f"The scope '{scope}' is not valid (fake ARM: only this subscription and what is in it).",
        )
    if len(parts) >= 4:
        ctx.server.store.group(parts[1], parts[3])
    if len(parts) >= 8 and ctx.server.store.find(scope) is None:
        raise ArmError(
            404,
            "ResourceNotFound",
            f"The Resource '{parts[5]}/{parts[6]}/{parts[7]}' under resource group '{parts[3]}' was not found.",
        )


@handles(RA, "put")
def put_assignment(ctx: Ctx) -> Reply:
    t = ctx.target
    server = ctx.server
    ident = server.identity
    scope = t.scope or ""
    _check_scope(ctx, scope)
    name = t.name or ""
    try:
        uuid.UUID(name)
    except ValueError as error:
        raise ArmError(
            400,
            "InvalidRoleAssignmentId",
            f"The role assignment ID '{name}' is not valid. The role assignment ID must be a GUID.",
        ) from error
    props = (ctx.body or {}).get("properties") or {}
    role_id = str(props.get("roleDefinitionId") or "")
    principal_id = str(props.get("principalId") or "")
    role = _role_guid(role_id)
    if role not in ROLES:
        raise ArmError(
            400,
            "RoleDefinitionDoesNotExist",
            f"The specified role definition with ID '{role}' does not exist.",
        )
    principal = server.tokens.principal(principal_id)
    delayed = (
        principal is not None and time.monotonic() - principal.created < server.principal_delay
    )
    if delayed and server.principal_type_skips_delay and props.get("principalType"):
        delayed = False
    if principal is None or delayed:
        raise ArmError(
            400,
            "PrincipalNotFound",
            f"Principal {principal_id.replace('-', '')} does not exist in the directory {server.tenant}. "
            "Check that you have the correct principal ID. If you are creating this principal and "
            "then immediately assigning a role, this error might be related to a replication "
            "delay. In this case, set the role assignment principalType property to a value, such "
            "as ServicePrincipal, User, or Group.  See https://aka.ms/docs-principaltype",
        )
    existing = ident.assignment(name)
    for other in ident.assignments.values():
        if other is existing:
            continue
        if (id_key(other.scope), other.role, other.principal.lower()) == (
            id_key(scope),
            role,
            principal_id.lower(),
        ):
            raise ArmError(409, "RoleAssignmentExists", "The role assignment already exists.")
    if existing is not None:
        if (existing.role, existing.principal.lower()) != (role, principal_id.lower()):
            raise ArmError(
                400,
                "RoleAssignmentUpdateNotPermitted",
                "Tenant ID, application ID, principal ID, and scope are not allowed to be updated.",
            )
        return Reply(200, existing.answer())
    kind = {"ManagedIdentity": "ServicePrincipal"}.get(principal.kind, principal.kind)
    assignment = Assignment(
        name,
        scope,
        role,
        role_id,
        principal.object_id,
        props.get("principalType") or kind,
        now_text(),
    )
    ident.assignments[name.lower()] = assignment
    return Reply(201, assignment.answer())


@handles(RA, "get")
def get_assignment(ctx: Ctx) -> Reply:
    found = ctx.server.identity.assignment(ctx.target.name or "")
    if found is None or id_key(found.scope) != id_key(ctx.target.scope or ""):
        raise ArmError(
            404, "RoleAssignmentNotFound", f"The role assignment '{ctx.target.name}' is not found."
        )
    return Reply(200, found.answer())


@handles(RA, "delete")
def delete_assignment(ctx: Ctx) -> Reply:
    ident = ctx.server.identity
    found = ident.assignment(ctx.target.name or "")
    if found is None:
        return Reply(204)
    del ident.assignments[found.name.lower()]
    return Reply(200, found.answer())


@handles(RA, "list:get")
def list_assignments(ctx: Ctx) -> Reply:
    """For a scope: those at it, above it and (without `atScope()`) below it; `$filter`
    `atScope()`, `principalId eq 'ID'`, `assignedTo('ID')`, joined by `and`."""
    import re

    scope = id_key(ctx.target.scope or "")
    text = ctx.query.get("$filter") or ""
    at_scope = "atscope()" in text.lower()
    principal = None
    match = re.search(r"(?:principalId\s+eq\s+|assignedTo\()'([^']+)'", text, re.I)
    if match:
        principal = match.group(1).lower()
    out = []
    for a in ctx.server.identity.assignments.values():
        own = id_key(a.scope)
        above = scope == own or scope.startswith(own + "/")
        below = own.startswith(scope + "/")
        if not (above or (below and not at_scope)):
            continue
        if principal and a.principal.lower() != principal:
            continue
        out.append(a.answer())
    return Reply(200, {"value": out})


def _definition(scope: str, guid: str) -> dict[str, Any]:
    name, description, actions, not_actions = ROLES[guid]
    return {
        "id": f"{scope.rstrip('/')}/providers/{RD}/{guid}",
        "name": guid,
        "type": RD,
        "properties": {
            "roleName": name,
            "type": "BuiltInRole",
            "description": description,
            "assignableScopes": ["/"],
            "permissions": [
                {
                    "actions": actions,
                    "notActions": not_actions,
                    "dataActions": [],
                    "notDataActions": [],
                }
            ],
            "createdOn": "2015-02-02T21:55:09.8806423Z",
            "updatedOn": "2024-01-01T00:00:00.0000000Z",
        },
    }


@handles(RD, "get")
def get_definition(ctx: Ctx) -> Reply:
    guid = (ctx.target.name or "").lower()
    if guid not in ROLES:
        raise ArmError(
            404,
            "RoleDefinitionDoesNotExist",
            f"The specified role definition with ID '{guid}' does not exist.",
        )
    return Reply(200, _definition(ctx.target.scope or "", guid))


@handles(RD, "list:get")
def list_definitions(ctx: Ctx) -> Reply:
    import re

    text = ctx.query.get("$filter") or ""
    match = re.search(r"roleName\s+eq\s+'([^']+)'", text, re.I)
    out = [
        _definition(ctx.target.scope or "", g)
        for g, row in ROLES.items()
        if match is None or row[0].lower() == match.group(1).lower()
    ]
    return Reply(200, {"value": out})
