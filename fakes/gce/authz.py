"""Who may do what on fakes/gce/server.py: every API call is checked against the project's IAM
policy for the account its token was issued to (`Iam.tokens`: the key file's account, or an
instance's service account through its metadata server), with conditions.

Modelled:
- permissions: `compute.COLLECTION.VERB` (insert is `create`, aggregatedList `list`, wait
  `get`, patch `update`), `iam.serviceAccounts.VERB` and `resourcemanager.projects.VERB`;
  an insert also needs `compute.disks.create` on its boot disk (named as the instance unless
  `initializeParams.diskName` says otherwise) and `compute.images.useReadOnly` on a source
  image of the project (other projects' images are public here, as debian-cloud's are);
- the roles in ROLES (a subset of each real role's permissions, enough for what is called
  here), granted by project bindings only;
- conditions (policy version 3) in the part of CEL that IAM resource conditions use:
  `resource.type`, `resource.name`, `resource.service`, string literals, `==`, `!=`, `!`,
  `&&`, `||`, parentheses, and the methods `startsWith`, `endsWith` and `extract`. An
  expression outside it is refused (400) when the policy is set. Resource types are
  `compute.googleapis.com/Instance`, `/Disk`, `/Image` and `/Firewall`; other calls (lists,
  operations, zones...) have no type and the project as their name, as conditions on a
  resource type leave them alone on GCP.
Calls naming another project than the fake's are not checked (their handlers answer 404).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from fakes.gce.faults import Call, GoogleError

if TYPE_CHECKING:
    from fakes.gce.server import GceServer

ROLES: Mapping[str, tuple[str, ...]] = {
    "roles/owner": ("*",),
    "roles/editor": (
        "compute.*",
        "iam.serviceAccounts.get",
        "iam.serviceAccounts.list",
        "iam.serviceAccounts.actAs",
        "resourcemanager.projects.get",
        "resourcemanager.projects.getIamPolicy",
    ),
    "roles/compute.instanceAdmin.v1": (
        "compute.instances.*",
        "compute.disks.*",
        "compute.images.*",
        "compute.snapshots.*",
        "compute.instanceTemplates.*",
        "compute.instanceGroups.*",
        "compute.zoneOperations.*",
        "compute.globalOperations.get",
        "compute.globalOperations.list",
        "compute.zones.*",
        "compute.regions.*",
        "compute.machineTypes.*",
        "compute.acceleratorTypes.*",
        "compute.projects.get",
        "compute.networks.get",
        "compute.networks.list",
        "compute.subnetworks.get",
        "compute.subnetworks.list",
        "compute.firewalls.get",
        "compute.firewalls.list",
    ),
    "roles/compute.imageUser": (
        "compute.images.get",
        "compute.images.getFromFamily",
        "compute.images.list",
        "compute.images.useReadOnly",
    ),
    "roles/iam.serviceAccountUser": ("iam.serviceAccounts.actAs", "iam.serviceAccounts.get"),
}
_VERBS = {"insert": "create", "aggregatedList": "list", "wait": "get", "patch": "update"}
_TYPE = "compute.googleapis.com/"
# path parameter -> (resource type, collection in resource names)
_NAMED = {
    "instance": ("Instance", "instances"),
    "disk": ("Disk", "disks"),
    "image": ("Image", "images"),
    "firewall": ("Firewall", "firewalls"),
}


# -- what a call needs -------------------------------------------------------------------


def needs(server: GceServer, call: Call) -> Iterator[tuple[str, str, str]]:
    """(permission, resource type, resource name) for each permission `call` needs."""
    api, _, rest = call.method.partition(".")
    project = server.project
    if api == "compute":
        collection, _, verb = rest.rpartition(".")
        permission = f"compute.{collection}.{_VERBS.get(verb, verb)}"
        yield (permission, *_resource(call, project))
        if call.method == "compute.instances.insert":
            yield from _insert_needs(call, project)
    elif api == "iam":
        verb = rest.rpartition(".")[2]
        yield f"iam.serviceAccounts.{verb}", "", f"projects/{project}"
    else:
        verb = rest.rpartition(".")[2]
        yield f"resourcemanager.projects.{verb}", "", f"projects/{project}"


def _resource(call: Call, project: str) -> tuple[str, str]:
    where = f"zones/{call.zone}" if call.zone else "global"
    for param, (kind, collection) in _NAMED.items():
        if call.params.get(param):
            return f"{_TYPE}{kind}", f"projects/{project}/{where}/{collection}/{call.params[param]}"
    if call.method == "compute.instances.insert":
        name = (call.body or {}).get("name", "")
        return f"{_TYPE}Instance", f"projects/{project}/{where}/instances/{name}"
    return "", f"projects/{project}"


def _insert_needs(call: Call, project: str) -> Iterator[tuple[str, str, str]]:
    body = call.body if isinstance(call.body, dict) else {}
    for disk in body.get("disks") or ():
        params = disk.get("initializeParams") or {}
        if not disk.get("boot"):
            continue
        name = params.get("diskName") or body.get("name", "")
        yield (
            "compute.disks.create",
            f"{_TYPE}Disk",
            f"projects/{project}/zones/{call.zone}/disks/{name}",
        )
        image = str(params.get("sourceImage", ""))
        own = re.match(rf"^(?:.*/)?(?:projects/{re.escape(project)}/)?global/images/(.+)$", image)
        if own and (image.startswith("global/") or f"projects/{project}/" in image):
            yield (
                "compute.images.useReadOnly",
                f"{_TYPE}Image",
                f"projects/{project}/global/images/{own.group(1)}",
            )


# -- the decision ------------------------------------------------------------------------


def refusal(server: GceServer, email: str, call: Call) -> GoogleError | None:
    """The 403 `call` gets from `email`, or None when the project's policy allows it."""
    if call.method.endswith(".testIamPermissions"):
        return None  # asking what one may do needs no permission
    project = call.params.get("project") or call.params.get("resource") or server.project
    if call.method.startswith("compute.") and project != server.project:
        return None
    bindings = server.iam.policy.get("bindings") or []
    member = f"serviceAccount:{email}"
    for permission, kind, name in needs(server, call):
        if not any(_grants(b, member, permission, kind, name) for b in bindings):
            if call.method.startswith("compute."):
                message = f"Required '{permission}' permission for '{name}'"
            else:
                message = (
                    f"Permission '{permission}' denied on resource '{name}' (or it may not exist)."
                )
            return GoogleError(403, "forbidden", message)
    return None


def held(server: GceServer, email: str, permissions: list[str]) -> list[str]:
    """The `permissions` that `email` holds on the project itself (testIamPermissions)."""
    bindings = server.iam.policy.get("bindings") or []
    member = f"serviceAccount:{email}"
    name = f"projects/{server.project}"
    return [p for p in permissions if any(_grants(b, member, p, "", name) for b in bindings)]


def _grants(binding: Mapping[str, Any], member: str, permission: str, kind: str, name: str) -> bool:
    if member not in (binding.get("members") or ()):
        return False
    patterns = ROLES.get(str(binding.get("role")), ())
    if not any(fnmatch.fnmatchcase(permission, p) for p in patterns):
        return False
    condition = binding.get("condition")
    if not condition:
        return True
    service = {"compute": "compute.googleapis.com", "iam": "iam.googleapis.com"}.get(
        permission.split(".", maxsplit=1)[0], "cloudresourcemanager.googleapis.com"
    )
    attributes = {"resource.type": kind, "resource.name": name, "resource.service": service}
    return bool(compile_condition(str(condition.get("expression", "")))(attributes))


# -- conditions --------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<op>==|!=|&&|\|\||[!().,])"""
    r"""|(?P<ident>[A-Za-z_][A-Za-z0-9_]*))"""
)
Evaluate = Callable[[Mapping[str, str]], Any]


def _tokens(text: str) -> list[tuple[str, str]]:
    found, index = [], 0
    while index < len(text):
        if not text[index:].strip():
            break
        match = _TOKEN.match(text, index)
        if match is None:
            raise ValueError(f"unexpected text at {index}: {text[index : index + 20]!r}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        index = match.end()
    return found


def compile_condition(text: str) -> Evaluate:
    """The condition as a function of the request's attributes. ValueError for text outside
    the modelled part of CEL."""
    parser = _Parser(_tokens(text))
    evaluate = parser.expression()
    if parser.index != len(parser.tokens):
        raise ValueError(f"unexpected {parser.tokens[parser.index][1]!r}")
    return evaluate


def _extract(value: str, template: str) -> str:
    before, _, rest = template.partition("{")
    _, _, after = rest.partition("}")
    start = value.find(before)
    if start < 0 or "{" not in template:
        return ""
    tail = value[start + len(before) :]
    if not after:
        return tail
    end = tail.find(after)
    return tail[:end] if end >= 0 else ""


_METHODS: Mapping[str, Callable[[str, str], Any]] = {
    "startsWith": lambda value, arg: value.startswith(arg),
    "endsWith": lambda value, arg: value.endswith(arg),
    "extract": _extract,
}
_ATTRIBUTES = ("resource.type", "resource.name", "resource.service")


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.index = 0

    def _peek(self) -> str | None:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.index >= len(self.tokens):
            raise ValueError("the expression ends too soon")
        token = self.tokens[self.index]
        if expected is not None and token[1] != expected:
            raise ValueError(f"expected {expected!r}, found {token[1]!r}")
        self.index += 1
        return token

    def expression(self) -> Evaluate:
        parts = [self._all()]
        while self._peek() == "||":
            self._take()
            parts.append(self._all())
        return parts[0] if len(parts) == 1 else lambda a: any(p(a) for p in parts)

    def _all(self) -> Evaluate:
        parts = [self._unary()]
        while self._peek() == "&&":
            self._take()
            parts.append(self._unary())
        return parts[0] if len(parts) == 1 else lambda a: all(p(a) for p in parts)

    def _unary(self) -> Evaluate:
        if self._peek() == "!":
            self._take()
            inner = self._unary()
            return lambda a: not inner(a)
        left = self._postfix()
        if self._peek() in ("==", "!="):
            op = self._take()[1]
            right = self._postfix()
            if op == "==":
                return lambda a: left(a) == right(a)
            return lambda a: left(a) != right(a)
        return left

    def _postfix(self) -> Evaluate:
        value = self._primary()
        while self._peek() == ".":
            self._take()
            name = self._take()[1]
            if name not in _METHODS:
                raise ValueError(f"the function {name!r} is not modelled")
            self._take("(")
            argument = self._primary()
            self._take(")")
            value = self._call(_METHODS[name], value, argument)
        return value

    @staticmethod
    def _call(method: Callable[[str, str], Any], value: Evaluate, argument: Evaluate) -> Evaluate:
        return lambda a: method(str(value(a)), str(argument(a)))

    def _primary(self) -> Evaluate:
        kind, text = self._take()
        if text == "(":
            inner = self.expression()
            self._take(")")
            return inner
        if kind == "string":
            literal = re.sub(r"\\(.)", r"\1", text[1:-1])
            return lambda a: literal
        if text in ("true", "false"):
            return lambda a: text == "true"
        if kind == "ident" and self._peek() == ".":
            self._take()
            attribute = f"{text}.{self._take()[1]}"
            if attribute not in _ATTRIBUTES:
                raise ValueError(f"the attribute {attribute!r} is not modelled")
            return lambda a: a.get(attribute, "")
        raise ValueError(f"unexpected {text!r}")
