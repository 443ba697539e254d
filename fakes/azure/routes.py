"""Which ARM operation a request names: the path parsed into a `Target` (subscription,
resource group, resource type and name, child resource, action; or an authorization scope),
the operation's name for the call log and faults, and the handler table the resource
modules (resources.py, network.py, compute.py, identity.py) fill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fakes.azure.faults import ArmError, Call

if TYPE_CHECKING:
    from fakes.azure.server import AzureServer

# Resource types the fake models, by lower-case `Namespace/type`, in ARM's casing.
KINDS = {
    k.lower(): k
    for k in (
        "Microsoft.Compute/virtualMachines",
        "Microsoft.Compute/disks",
        "Microsoft.Network/virtualNetworks",
        "Microsoft.Network/networkSecurityGroups",
        "Microsoft.Network/publicIPAddresses",
        "Microsoft.Network/networkInterfaces",
        "Microsoft.ManagedIdentity/userAssignedIdentities",
        "Microsoft.Resources/deployments",
        "Microsoft.Compute/skus",
    )
}
CHILD_KINDS = {
    k.lower(): k
    for k in (
        "Microsoft.Network/virtualNetworks/subnets",
        "Microsoft.Network/networkSecurityGroups/securityRules",
        "Microsoft.Network/networkInterfaces/ipConfigurations",
    )
}
# A location's compute usages and limits (quota), a list that is no resource type.
USAGES = "Microsoft.Compute/locations/usages"
SPECIAL = {
    "subscriptions": "Microsoft.Resources/subscriptions",
    "resourceGroups": "Microsoft.Resources/resourceGroups",
    "resources": "Microsoft.Resources/resources",
    "roleAssignments": "Microsoft.Authorization/roleAssignments",
    "roleDefinitions": "Microsoft.Authorization/roleDefinitions",
    "operations": None,
    "operationResults": None,
}


@dataclass(frozen=True)
class Target:
    """What a path names. `kind` is ARM's `Namespace/type` (a child's: `.../subnets`),
    `short` the type's last segment (the operation's prefix)."""

    kind: str | None
    short: str
    sub: str | None = None
    rg: str | None = None
    name: str | None = None  # the top-level resource's name
    child: str | None = None  # a child resource's name (subnets/NAME)
    action: str | None = None  # a POST action or a GET view (instanceView)
    collection: bool = False  # the path names a list, not one resource
    scope: str | None = None  # the scope an authorization path (or a usage list) names
    namespace: str | None = None
    location: str | None = None
    op_id: str | None = None

    @property
    def parent_kind(self) -> str | None:
        """A child's parent type (`Microsoft.Network/virtualNetworks`)."""
        if self.kind is None or self.kind.count("/") < 2:
            return self.kind
        return self.kind.rsplit("/", 1)[0]


def parse(path: str) -> Target:
    segs = [unquote(s) for s in path.split("/") if s]
    low = [s.lower() for s in segs]
    for i in range(len(low) - 2, -1, -1):
        if low[i] == "providers" and low[i + 1] == "microsoft.authorization":
            rest = segs[i + 2 :]
            scope = "/" + "/".join(segs[:i])
            sub = segs[1] if len(low) > 1 and low[0] == "subscriptions" else None
            rg = segs[3] if len(low) > 3 and low[2] == "resourcegroups" and i > 3 else None
            if rest and rest[0].lower() in ("roleassignments", "roledefinitions"):
                short = (
                    "roleAssignments" if rest[0].lower() == "roleassignments" else "roleDefinitions"
                )
                return Target(
                    SPECIAL[short],
                    short,
                    sub,
                    rg,
                    rest[1] if len(rest) > 1 else None,
                    collection=len(rest) == 1,
                    scope=scope,
                )
            raise _unknown("Microsoft.Authorization", "/".join(rest[:1]))
    if not low or low[0] != "subscriptions":
        raise ArmError(404, "NotFound", f"The requested path '{path}' was not found (fake ARM).")
    if len(low) == 1:
        return Target(SPECIAL["subscriptions"], "subscriptions", collection=True)
    sub = segs[1]
    if len(low) == 2:
        return Target(SPECIAL["subscriptions"], "subscriptions", sub)
    if low[2] == "resourcegroups":
        if len(low) == 3:
            return Target(SPECIAL["resourceGroups"], "resourceGroups", sub, collection=True)
        rg = segs[3]
        if len(low) == 4:
            return Target(SPECIAL["resourceGroups"], "resourceGroups", sub, rg, rg)
        if len(low) == 5 and low[4] == "resources":
            return Target(SPECIAL["resources"], "resources", sub, rg, collection=True)
        if low[4] == "providers" and len(low) >= 7:
            return _typed(segs, low, sub, rg, 5)
    elif low[2] == "providers" and len(low) >= 5:
        if low[4] == "locations" and len(low) == 8 and low[6] in ("operations", "operationresults"):
            short = "operations" if low[6] == "operations" else "operationResults"
            return Target(None, short, sub, namespace=segs[3], location=segs[5], op_id=segs[7])
        if low[3:5] == ["microsoft.compute", "locations"] and low[6:] == ["usages"]:
            # Authorized as Microsoft.Compute/locations/usages/read at the subscription.
            return Target(
                USAGES,
                "usages",
                sub,
                collection=True,
                scope=f"/subscriptions/{sub}",
                namespace=segs[3],
                location=segs[5],
            )
        kind = KINDS.get(f"{low[3]}/{low[4]}")
        if kind is None:
            raise _unknown(segs[3], segs[4])
        if len(low) == 5:
            return Target(kind, kind.rsplit("/", 1)[1], sub, collection=True)
    raise ArmError(404, "NotFound", f"The requested path '{path}' was not found (fake ARM).")


def _typed(segs: list[str], low: list[str], sub: str, rg: str, at: int) -> Target:
    kind = KINDS.get(f"{low[at]}/{low[at + 1]}")
    if kind is None:
        raise _unknown(segs[at], segs[at + 1])
    short = kind.rsplit("/", 1)[1]
    rest = segs[at + 2 :]
    if not rest:
        return Target(kind, short, sub, rg, collection=True)
    name = rest[0]
    if len(rest) == 1:
        return Target(kind, short, sub, rg, name)
    child_kind = CHILD_KINDS.get(f"{kind}/{rest[1]}".lower())
    if child_kind is not None:
        child_short = child_kind.rsplit("/", 1)[1]
        if len(rest) == 2:
            return Target(child_kind, child_short, sub, rg, name, collection=True)
        if len(rest) == 3:
            return Target(child_kind, child_short, sub, rg, name, child=rest[2])
    if len(rest) == 2:
        return Target(kind, short, sub, rg, name, action=rest[1])
    raise _unknown(segs[at], "/".join(segs[at + 1 :]))


def _unknown(namespace: str, rtype: str) -> ArmError:
    return ArmError(
        404,
        "InvalidResourceType",
        f"The resource type '{rtype}' could not be found in the namespace '{namespace}' "
        "(not modelled by the fake ARM).",
    )


def operation_name(target: Target, verb: str, exists: bool) -> str:
    """The call's operation (see fakes/azure/faults.py)."""
    short = target.short
    if short in ("operations", "operationResults"):
        return f"{short}.get"
    if target.action is not None:
        return f"{short}.{target.action[0].lower()}{target.action[1:]}"
    if target.collection:
        if verb == "GET":
            return (
                f"{short}.listAll"
                if target.rg is None and target.kind in KINDS.values()
                else f"{short}.list"
            )
        return f"{short}.{verb.lower()}"
    return {
        "GET": f"{short}.get",
        "HEAD": f"{short}.head",
        "PUT": f"{short}.update" if exists else f"{short}.create",
        "PATCH": f"{short}.patch",
        "DELETE": f"{short}.delete",
        "POST": f"{short}.post",
    }.get(verb, f"{short}.{verb.lower()}")


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Ctx:
    """What a handler gets: the server (its lock is held), the call, its target, its JSON
    body, the api-version, and `op_fault`: the error a fault wants the call's long-running
    operation to end with (None: none)."""

    server: AzureServer
    call: Call
    target: Target
    body: Any
    api_version: str
    op_fault: ArmError | None = None

    @property
    def query(self) -> Any:
        return self.call.query


Handler = Callable[[Ctx], Reply]
# (kind or special short name, lower case; verb or action) -> handler
HANDLERS: dict[tuple[str, str], Handler] = {}


def handles(kind: str, *verbs: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for verb in verbs:
            HANDLERS[(kind.lower(), verb.lower())] = fn
        return fn

    return register


def find_handler(target: Target, verb: str) -> Handler | None:
    key = (target.kind or target.short).lower()
    if target.action is not None:
        return HANDLERS.get((key, f"{verb}:{target.action}".lower()))
    if target.collection:
        return HANDLERS.get((key, f"list:{verb}".lower()))
    return HANDLERS.get((key, verb.lower()))
