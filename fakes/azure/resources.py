"""Subscriptions, resource groups and the generic resource list of a group
(Microsoft.Resources) for fakes/azure/server.py."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fakes.azure.faults import ArmError
from fakes.azure.lro import Operation
from fakes.azure.routes import Ctx, Reply, handles
from fakes.azure.store import Group, Resource, rg_id

RG = "Microsoft.Resources/resourceGroups"
SUBS = "Microsoft.Resources/subscriptions"
# Deletion order inside a resource group: what uses a resource goes before it.
DELETE_ORDER = (
    "Microsoft.Compute/virtualMachines",
    "Microsoft.Compute/disks",
    "Microsoft.Network/networkInterfaces",
    "Microsoft.Network/publicIPAddresses",
    "Microsoft.Network/virtualNetworks",
    "Microsoft.Network/networkSecurityGroups",
    "Microsoft.ManagedIdentity/userAssignedIdentities",
)


def _subscription(ctx: Ctx) -> dict[str, Any]:
    server = ctx.server
    return {
        "id": f"/subscriptions/{server.subscription}",
        "subscriptionId": server.subscription,
        "tenantId": server.tenant,
        "displayName": "launcher fake subscription",
        "state": "Enabled",
        "subscriptionPolicies": {
            "locationPlacementId": "Public_2014-09-01",
            "quotaId": "PayAsYouGo_2014-09-01",
            "spendingLimit": "Off",
        },
        "authorizationSource": "RoleBased",
    }


def check_sub(ctx: Ctx) -> None:
    sub = ctx.target.sub
    if sub is not None and sub.lower() != ctx.server.subscription.lower():
        raise ArmError(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")


@handles(SUBS, "list:get")
def list_subscriptions(ctx: Ctx) -> Reply:
    return Reply(200, {"value": [_subscription(ctx)], "count": {"type": "Total", "value": 1}})


@handles(SUBS, "get")
def get_subscription(ctx: Ctx) -> Reply:
    check_sub(ctx)
    return Reply(200, _subscription(ctx))


@handles(RG, "list:get")
def list_groups(ctx: Ctx) -> Reply:
    check_sub(ctx)
    groups = [
        g for g in ctx.server.store.groups.values() if g.sub.lower() == ctx.target.sub.lower()
    ]  # type: ignore[union-attr]
    return Reply(200, {"value": [g.answer() for g in groups]})


@handles(RG, "get")
def get_group(ctx: Ctx) -> Reply:
    check_sub(ctx)
    t = ctx.target
    assert t.sub and t.rg
    return Reply(200, ctx.server.store.group(t.sub, t.rg).answer())


@handles(RG, "head")
def head_group(ctx: Ctx) -> Reply:
    check_sub(ctx)
    t = ctx.target
    assert t.sub and t.rg
    found = f"{t.sub}/{t.rg}".lower() in ctx.server.store.groups
    return Reply(204 if found else 404)


@handles(RG, "put")
def put_group(ctx: Ctx) -> Reply:
    check_sub(ctx)
    t = ctx.target
    assert t.sub and t.rg
    body = ctx.body or {}
    location = body.get("location")
    if not location:
        raise ArmError(
            400, "LocationRequired", "The location property is required for this definition."
        )
    store = ctx.server.store
    key = f"{t.sub}/{t.rg}".lower()
    group = store.groups.get(key)
    if group is not None:
        if group.state == "Deleting":
            store.live_group(t.sub, t.rg)
        if group.location.lower() != str(location).replace(" ", "").lower():
            raise ArmError(
                409,
                "InvalidResourceGroupLocation",
                f"Invalid resource group location '{location}'. The Resource group already "
                f"exists in location '{group.location}'.",
            )
        group.tags = dict(body.get("tags") or {})
        group.managed_by = body.get("managedBy")
        return Reply(200, group.answer())
    if not re.fullmatch(r"[-\w._()]{1,90}", t.rg) or t.rg.endswith("."):
        raise ArmError(
            400,
            "InvalidResourceGroup",
            f"The provided resource group name '{t.rg}' has these invalid characters.",
        )
    group = Group(
        rg_id(t.sub, t.rg),
        t.sub,
        t.rg,
        str(location).replace(" ", "").lower(),
        dict(body.get("tags") or {}),
        managed_by=body.get("managedBy"),
    )
    store.groups[key] = group
    return Reply(201, group.answer())


@handles(RG, "patch")
def patch_group(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg
    group = ctx.server.store.live_group(t.sub, t.rg)
    body = ctx.body or {}
    if "tags" in body:
        group.tags = dict(body["tags"] or {})
    return Reply(200, group.answer())


@handles(RG, "delete")
def delete_group(ctx: Ctx) -> Reply:
    check_sub(ctx)
    t = ctx.target
    assert t.sub and t.rg
    server = ctx.server
    group = server.store.group(t.sub, t.rg)
    op = server.begin(ctx, group.id, "global", location_only=True)
    op.namespace = "Microsoft.Resources"
    if group.state != "Deleting":
        group.state = "Deleting"
        if ctx.op_fault is not None:

            def failed(_: ArmError) -> None:
                group.state = "Succeeded"

            server.run_op(ctx, op, lambda _: None, failed)
        else:
            server.later(server.lro_s, lambda: _delete_step(ctx, group, op))
    return Reply(202, None, _rg_headers(ctx, op))


def _rg_headers(ctx: Ctx, op: Operation) -> dict[str, str]:
    server = ctx.server
    out = {"Location": server.ops.result_url(op, ctx.api_version)}
    out.update(server.retry_after_header())
    return out


def _delete_step(ctx: Ctx, group: Group, op: Operation) -> None:
    """Delete what the group holds, in DELETE_ORDER (VMs once their machines are off), then
    the group; re-run every 50 ms until done."""
    server = ctx.server
    store = server.store
    if store.groups.get(f"{group.sub}/{group.name}".lower()) is not group:
        server.ops.succeed(op)
        return
    held = store.in_group(group.sub, group.name)
    vms = [r for r in held if r.kind == DELETE_ORDER[0]]
    for vm in vms:
        server.compute.delete_for_group(vm)
    if not vms:
        for kind in DELETE_ORDER[1:]:
            for res in [r for r in held if r.kind == kind]:
                _drop(server, res)
        for res in store.in_group(group.sub, group.name):
            store.remove(res)
        server.identity.drop_scope(group.id)
        del store.groups[f"{group.sub}/{group.name}".lower()]
        server.ops.succeed(op)
        return
    server.later(0.05, lambda: _delete_step(ctx, group, op))


def _drop(server: Any, res: Resource) -> None:
    drop: Callable[[Resource], None] | None = {
        "Microsoft.Compute/disks": server.compute.drop_disk,
        "Microsoft.Network/networkInterfaces": server.network.drop_nic,
        "Microsoft.Network/publicIPAddresses": server.network.drop_public_ip,
        "Microsoft.ManagedIdentity/userAssignedIdentities": server.identity.drop_identity,
    }.get(res.kind)
    if drop is not None:
        drop(res)
    else:
        server.store.remove(res)


@handles("operationResults", "get")
def operation_result(ctx: Ctx) -> Reply:
    """A Location URL: 202 while the operation runs, then 200 (no body), or its error."""
    t = ctx.target
    op = ctx.server.ops.poll_status(t.op_id or "")
    if not op.done:
        headers = {"Location": ctx.server.ops.result_url(op, ctx.api_version)}
        headers.update(ctx.server.retry_after_header())
        return Reply(202, None, headers)
    if op.error is not None:
        raise op.error
    return Reply(200, None)


@handles("operations", "get")
def operation_status(ctx: Ctx) -> Reply:
    """An Azure-AsyncOperation URL: the operation status document."""
    op = ctx.server.ops.poll_status(ctx.target.op_id or "")
    headers = ctx.server.retry_after_header() if not op.done else {}
    return Reply(200, op.status_document(), headers)


# -- generic resources --------------------------------------------------------------------

_CLAUSE = re.compile(
    r"^\s*(tagname|tagvalue|resourcetype|name|location)\s+eq\s+'((?:[^']|'')*)'\s*$", re.I
)
_SUBSTRING = re.compile(r"^\s*substringof\(\s*'((?:[^']|'')*)'\s*,\s*name\s*\)\s*$", re.I)


def parse_filter(text: str | None) -> list[tuple[str, str]]:
    """ARM's `$filter` on resource lists: clauses `FIELD eq 'VALUE'` joined by `and`
    (tagName, tagValue, resourceType, name, location) and `substringof('TEXT', name)`. Others: 400 InvalidFilterInQueryString."""
    if not text:
        return []
    clauses = []
    for part in re.split(r"\s+and\s+", text.strip(), flags=re.I):
        contains = _SUBSTRING.match(part)
        if contains is not None:
            clauses.append(("substringof", contains.group(1).replace("''", "'")))
            continue
        match = _CLAUSE.match(part)
        if match is None:
            raise ArmError(
                400,
                "InvalidFilterInQueryString",
                f"The $filter '{text}' is not supported by the fake ARM.",
            )
        clauses.append((match.group(1).lower(), match.group(2).replace("''", "'")))
    return clauses


def matches(body: dict[str, Any], clauses: list[tuple[str, str]]) -> bool:
    tags = {k.lower(): v for k, v in (body.get("tags") or {}).items()}
    tag_name = next((v for f, v in clauses if f == "tagname"), None)
    for field, value in clauses:
        if field == "tagname" and value.lower() not in tags:
            return False
        if field == "tagvalue" and (tag_name is None or tags.get(tag_name.lower()) != value):
            return False
        if field == "resourcetype" and str(body.get("type", "")).lower() != value.lower():
            return False
        if field == "name" and str(body.get("name", "")).lower() != value.lower():
            return False
        if field == "substringof" and value.lower() not in str(body.get("name", "")).lower():
            return False
        if field == "location" and str(body.get("location", "")).lower() != value.lower():
            return False
    return True


def generic(res: Resource) -> dict[str, Any]:
    body = res.body
    out: dict[str, Any] = {
        "id": res.id,
        "name": res.name,
        "type": res.kind,
        "location": body.get("location"),
        "tags": dict(body.get("tags") or {}),
    }
    for key in ("sku", "zones", "identity", "managedBy", "kind"):
        if body.get(key):
            out[key] = body[key]
    out["createdTime"] = res.extra.get("created_text")
    return {k: v for k, v in out.items() if v is not None}


@handles("Microsoft.Resources/resources", "list:get")
def list_resources(ctx: Ctx) -> Reply:
    t = ctx.target
    assert t.sub and t.rg
    ctx.server.store.group(t.sub, t.rg)
    clauses = parse_filter(ctx.query.get("$filter"))
    expand = (ctx.query.get("$expand") or "").lower()
    out = []
    for res in ctx.server.store.in_group(t.sub, t.rg):
        if matches(res.body, clauses):
            item = generic(res)
            if "provisioningstate" in expand:
                item["provisioningState"] = res.state
            out.append(item)
    top = ctx.query.get("$top")
    if top and top.isdigit():
        out = out[: int(top)]
    return Reply(200, {"value": out})
