"""ARM template evaluation for the fake's deployments (deployments.py): pure, no server.

The subset of ARM's template language that Ray's `azure-config-template.json` and
`azure-vm-template.json` use, as Azure documents it: `parameters` (types string,
securestring, int, bool, object, array; `defaultValue`; a value given for a parameter the
template lacks, or none for one without a default, is refused), `variables`, `resources`
with `copy` loops (`copyIndex()`), `condition` and `dependsOn` (a resource name, id or copy
loop name), `outputs` (with `condition` and `copy` of `count`/`input`). Expressions are
strings in brackets (`"[concat('a', parameters('b'))]"`; `"[[x]"` is the literal `[x]`),
with string literals in single quotes (`''` for a quote), integers, function calls,
property access (`.name`) and indexing (`[0]`).

Functions: parameters, variables, concat, if, not, and, or, equals, greater, greaterOrEquals,
less, lessOrEquals, add, sub, mul, div, mod, length, empty, createArray, createObject,
string, int, bool, json, toLower, toUpper, format, replace, substring, contains, first,
last, union, true, false, resourceId, subscriptionResourceId, resourceGroup,
subscription, reference, guid, uniqueString, copyIndex. Where ARM's own algorithm is not
published (`guid`, `uniqueString`), the fake's values are deterministic but its own.

Errors are `TemplateError`s whose message follows ARM's `InvalidTemplate` wording
("Deployment template validation failed: ..." / "Unable to process template language
expressions ..."); deployments.py answers them with 400 InvalidTemplate.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# ARM's guid() is a name-based UUID; this namespace is the fake's own.
_GUID_NAMESPACE = uuid.UUID("5f0c4b2e-0000-4000-8000-00000000fa4e")
_TYPES = ("string", "securestring", "int", "bool", "object", "secureobject", "array")
# What a resource declaration holds that is not sent to the resource provider.
_TEMPLATE_ONLY = ("type", "apiVersion", "name", "copy", "condition", "dependsOn", "comments")


class TemplateError(Exception):
    """A template or its parameters refused (ARM's 400 InvalidTemplate)."""

    code = "InvalidTemplate"


@dataclass
class Scope:
    """Where expressions are evaluated: the deployment's subscription and resource group,
    the parameter values, variables (evaluated on first use), the copy index, and
    `reference(id_or_name)` (the deployment answers it: a resource's `properties`)."""

    subscription: str
    group: dict[str, Any]  # resourceGroup(): id, name, location, tags
    params: dict[str, Any]
    variables_raw: Mapping[str, Any] = field(default_factory=dict)
    lookup: Callable[[str, bool], Any] | None = None  # (id or name, full) -> body
    names: Mapping[str, str] = field(default_factory=dict)  # template name -> resource id
    index: int | None = None
    _variables: dict[str, Any] = field(default_factory=dict)
    _evaluating: set[str] = field(default_factory=set)

    def at(self, index: int | None) -> Scope:
        other = Scope(
            self.subscription,
            self.group,
            self.params,
            self.variables_raw,
            self.lookup,
            self.names,
            index,
        )
        other._variables = self._variables
        return other

    def variable(self, name: str) -> Any:
        key = _key(self.variables_raw, name)
        if key is None:
            raise TemplateError(
                f"Unable to process template language expressions: the template variable "
                f"'{name}' is not found. Please see https://aka.ms/arm-functions-deployment."
            )
        if key not in self._variables:
            if key in self._evaluating:
                raise TemplateError(f"The template variable '{key}' refers to itself.")
            self._evaluating.add(key)
            try:
                self._variables[key] = evaluate(self.variables_raw[key], self.at(None))
            finally:
                self._evaluating.discard(key)
        return self._variables[key]

    def parameter(self, name: str) -> Any:
        key = _key(self.params, name)
        if key is None:
            raise TemplateError(
                f"Unable to process template language expressions: the template parameter "
                f"'{name}' is not found. Please see https://aka.ms/arm-functions-deployment."
            )
        return self.params[key]


def _key(mapping: Mapping[str, Any], name: str) -> str | None:
    """ARM's names of parameters and variables are compared without case."""
    for key in mapping:
        if key.lower() == name.lower():
            return key
    return None


# -- parameters ------------------------------------------------------------------------------


def bind_parameters(template: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter values of a deployment: `given` (`{"name": {"value": ...}}`) checked
    against the template's declarations, defaults filled in."""
    declared = template.get("parameters") or {}
    if not isinstance(declared, dict):
        raise TemplateError(
            "Deployment template validation failed: 'parameters' must be an object."
        )
    unknown = [name for name in given if _key(declared, name) is None]
    if unknown:
        raise TemplateError(
            "Deployment template validation failed: 'The template parameters "
            f"'{', '.join(unknown)}' in the parameters file are not valid; they are not "
            "present in the original template and can therefore not be provided at "
            "deployment time. The only supported parameters for this template are "
            f"'{', '.join(declared)}'.'"
        )
    out: dict[str, Any] = {}
    for name, decl in declared.items():
        kind = str((decl or {}).get("type", "")).lower()
        if kind not in _TYPES:
            raise TemplateError(
                f"Deployment template validation failed: 'The template parameter '{name}' "
                f"has an invalid type '{decl.get('type')}'.'"
            )
        key = _key(given, name)
        if key is not None:
            entry = given[key]
            if not isinstance(entry, dict) or "value" not in entry:
                raise TemplateError(
                    f"Deployment template validation failed: 'The value for the template "
                    f"parameter '{name}' must be given as an object with a 'value'.'"
                )
            value = entry["value"]
        elif "defaultValue" in decl:
            value = decl["defaultValue"]
        else:
            raise TemplateError(
                f"Deployment template validation failed: 'The value for the template "
                f"parameter '{name}' at line '1' and column '1' is not provided. Please see "
                "https://aka.ms/arm-create-parameter-file for usage details.'"
            )
        out[name] = _as_type(name, kind, value)
        allowed = decl.get("allowedValues")
        if allowed is not None and out[name] not in allowed:
            raise TemplateError(
                f"Deployment template validation failed: 'The provided value '{out[name]}' "
                f"for the template parameter '{name}' is not valid. The parameter value is "
                f"not part of the allowed value(s): '{','.join(map(str, allowed))}'.'"
            )
    return out


def _as_type(name: str, kind: str, value: Any) -> Any:
    """ARM converts a parameter's value to its declared type where it can (a string
    "true" for a bool, "3" for an int); other mismatches are refused."""
    if isinstance(value, str) and value.startswith("[") and not value.startswith("[["):
        return value  # a default that is an expression: evaluated when used
    ok: bool
    if kind in ("string", "securestring"):
        ok = isinstance(value, str)
    elif kind == "int":
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        ok = isinstance(value, bool)
    elif kind in ("object", "secureobject"):
        ok = isinstance(value, dict)
    else:
        ok = isinstance(value, list)
    if not ok:
        raise TemplateError(
            f"Deployment template validation failed: 'Template parameter JToken type is not "
            f"valid. Expected '{kind.capitalize()}'. Actual '{_type_name(value)}'. Please see "
            f"https://aka.ms/arm-create-parameter-file for usage details.' (parameter '{name}')"
        )
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, int):
        return "Integer"
    if isinstance(value, str):
        return "String"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, dict):
        return "Object"
    return "Null"


# -- evaluation ------------------------------------------------------------------------------


def evaluate(value: Any, scope: Scope) -> Any:
    """`value` (any JSON) with every expression string evaluated, object keys included."""
    if isinstance(value, str):
        return expression(value, scope)
    if isinstance(value, list):
        return [evaluate(v, scope) for v in value]
    if isinstance(value, dict):
        return {str(expression(k, scope)): evaluate(v, scope) for k, v in value.items()}
    return value


def expression(text: str, scope: Scope) -> Any:
    """One string: an expression in brackets evaluated, `[[` unescaped, else as is."""
    if not (text.startswith("[") and text.endswith("]")):
        return text
    if text.startswith("[["):
        return text[1:]
    parser = _Parser(text[1:-1], scope)
    result = parser.expr()
    parser.skip()
    if parser.pos != len(parser.text):
        raise parser.error("unexpected text")
    return result


_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<str>')|(?P<p>[(),.\[\]]))"
)


class _Parser:
    def __init__(self, text: str, scope: Scope) -> None:
        self.text = text
        self.scope = scope
        self.pos = 0
        self.skipping = 0  # inside an if() branch not taken: parsed, not evaluated

    def error(self, what: str) -> TemplateError:
        return TemplateError(
            f"Unable to process template language expressions: '[{self.text}]': {what} at "
            f"position {self.pos}. Please see https://aka.ms/arm-functions for usage details."
        )

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, char: str) -> bool:
        self.skip()
        return self.text.startswith(char, self.pos)

    def take(self, char: str) -> None:
        if not self.peek(char):
            raise self.error(f"expected '{char}'")
        self.pos += len(char)

    def expr(self) -> Any:
        value = self.primary()
        while True:
            if self.peek("."):
                self.pos += 1
                self.skip()
                match = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*").match(self.text, self.pos)
                if match is None:
                    raise self.error("expected a property name")
                self.pos = match.end()
                value = _member(value, match.group(0), self)
            elif self.peek("["):
                self.pos += 1
                index = self.expr()
                self.take("]")
                value = _member(value, index, self)
            else:
                return value

    def primary(self) -> Any:
        match = _TOKEN.match(self.text, self.pos)
        if match is None:
            raise self.error("unexpected character")
        self.pos = match.end()
        if match.group("num") is not None:
            return int(match.group("num"))
        if match.group("str") is not None:
            return self.string()
        if match.group("name") is not None:
            name = match.group("name")
            self.take("(")
            if name.lower() == "if":
                return self.lazy_if()
            args: list[Any] = []
            if not self.peek(")"):
                args.append(self.expr())
                while self.peek(","):
                    self.pos += 1
                    args.append(self.expr())
            self.take(")")
            return None if self.skipping else call(name, args, self.scope)
        raise self.error(f"unexpected '{match.group('p')}'")

    def lazy_if(self) -> Any:
        """if(condition, then, else): only the branch taken is evaluated, as ARM does (Ray's
        VM template indexes an empty zones array in the branch not taken)."""
        condition = self.expr()
        values = []
        for taken in (bool(condition), not condition):
            self.take(",")
            self.skipping += 0 if taken else 1
            try:
                values.append(self.expr())
            finally:
                self.skipping -= 0 if taken else 1
        self.take(")")
        return None if self.skipping else (values[0] if condition else values[1])

    def string(self) -> str:
        out = []
        while True:
            end = self.text.find("'", self.pos)
            if end < 0:
                raise self.error("unterminated string")
            out.append(self.text[self.pos : end])
            self.pos = end + 1
            if self.text.startswith("'", self.pos):
                out.append("'")
                self.pos += 1
                continue
            return "".join(out)


def _member(value: Any, key: Any, parser: _Parser) -> Any:
    if parser.skipping:
        return None
    if isinstance(value, list) and isinstance(key, int) and not isinstance(key, bool):
        if not 0 <= key < len(value):
            raise parser.error(f"the index {key} is out of the array's range 0-{len(value) - 1}")
        return value[key]
    if isinstance(value, dict) and isinstance(key, str):
        found = _key(value, key)
        if found is None:
            raise parser.error(f"the language expression property '{key}' doesn't exist")
        return value[found]
    raise parser.error(f"cannot take '{key}' of a {_type_name(value)}")


# -- functions -------------------------------------------------------------------------------


def _arity(name: str, args: Sequence[Any], low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(args) <= high:
        raise TemplateError(
            f"Unable to process template language expressions: the template language "
            f"function '{name}' takes {low if low == high else f'{low} to {high}'} "
            f"argument(s), given {len(args)}."
        )


def _number(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TemplateError(
            f"Unable to process template language expressions: the template language "
            f"function '{name}' expects integers, given a {_type_name(value)}."
        )
    return value


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()  # ARM's equals() ignores the case of strings
    return bool(a == b and type(a) is type(b))


def _resource_id(sub: str, rg: str | None, args: Sequence[Any], what: str) -> str:
    args = [_string(a) for a in args]
    kinds = [i for i, a in enumerate(args) if "/" in a and "." in a.split("/", 1)[0]]
    if not kinds:
        raise TemplateError(
            f"Unable to process template language expressions: the template function "
            f"'{what}' expects a resource type such as 'Microsoft.Network/virtualNetworks'."
        )
    at = kinds[0]
    before, kind, names = args[:at], args[at].strip("/"), args[at + 1 :]
    if len(before) == 2:
        sub, rg = before
    elif len(before) == 1:
        if rg is None or re.fullmatch(r"[0-9a-fA-F-]{36}", before[0]):
            sub = before[0]
        else:
            rg = before[0]
    namespace, *types = kind.split("/")
    if len(types) != len(names) or not names:
        raise TemplateError(
            f"Unable to evaluate template language function '{what}': function requires "
            f"exactly one multi-segmented argument which must be resource type including "
            f"resource provider namespace. Current function arguments '{','.join(args)}'."
        )
    path = "/".join(f"{t}/{n}" for t, n in zip(types, names, strict=True))
    prefix = f"/subscriptions/{sub}" + (f"/resourceGroups/{rg}" if rg is not None else "")
    return f"{prefix}/providers/{namespace}/{path}"


def call(name: str, args: list[Any], scope: Scope) -> Any:
    """The template function `name` on evaluated `args`."""
    fn = _FUNCTIONS.get(name.lower())
    if fn is None:
        raise TemplateError(
            f"Unable to process template language expressions: the template function "
            f"'{name}' is not valid. Please see https://aka.ms/arm-functions for usage details."
        )
    try:
        return fn(name, args, scope)
    except TemplateError:
        raise
    except (ArithmeticError, TypeError, ValueError, IndexError, KeyError) as exc:
        raise TemplateError(
            f"Unable to evaluate template language function '{name}': {exc}. Please see "
            "https://aka.ms/arm-functions for usage details."
        ) from exc


def _f(low: int, high: int | None, body: Callable[[list[Any], Scope], Any]) -> Any:
    def fn(name: str, args: list[Any], scope: Scope) -> Any:
        _arity(name, args, low, 10_000 if high is None else high)
        return body(args, scope)

    return fn


def _concat(args: list[Any], _: Scope) -> Any:
    if args and all(isinstance(a, list) for a in args):
        return [item for a in args for item in a]
    return "".join(_string(a) for a in args)


def _copy_index(args: list[Any], scope: Scope) -> int:
    if scope.index is None:
        raise TemplateError(
            "The template function 'copyIndex' is not expected at this location. The "
            "function can only be used in a resource with copy specified."
        )
    offset = args[-1] if args and isinstance(args[-1], int) else 0
    return scope.index + offset


def _reference(args: list[Any], scope: Scope) -> Any:
    target = _string(args[0])
    full = len(args) > 2 and str(args[2]).lower() == "full"
    if "/" not in target:
        resolved = _key(scope.names, target)
        if resolved is None:
            raise TemplateError(
                f"The template reference '{target}' is not valid: could not find template "
                "resource or resource copy with this name. Please see "
                "https://aka.ms/arm-function-reference for usage details."
            )
        target = scope.names[resolved]
    if scope.lookup is None:
        raise TemplateError("The template function 'reference' is not expected here.")
    return scope.lookup(target, full)


def _unique_string(args: list[Any], _: Scope) -> str:
    digest = hashlib.sha256("-".join(_string(a) for a in args).encode()).digest()
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    number = int.from_bytes(digest[:8], "big")
    return "".join(alphabet[(number >> (5 * i)) & 31] for i in range(13))


def _format(args: list[Any], _: Scope) -> str:
    text = _string(args[0])
    return re.sub(r"\{(\d+)\}", lambda m: _string(args[1 + int(m.group(1))]), text)


def _json(args: list[Any], _: Scope) -> Any:
    try:
        return json.loads(_string(args[0]))
    except ValueError as exc:
        raise TemplateError(
            f"Unable to process template language expressions: the template function 'json' "
            f"was given text that is not JSON: {exc}."
        ) from exc


def _union(args: list[Any], _: Scope) -> Any:
    if all(isinstance(a, dict) for a in args):
        out: dict[str, Any] = {}
        for a in args:
            out.update(a)
        return out
    seen: list[Any] = []
    for a in args:
        for item in a:
            if item not in seen:
                seen.append(item)
    return seen


_FUNCTIONS: dict[str, Callable[[str, list[Any], Scope], Any]] = {
    "parameters": _f(1, 1, lambda a, s: s.parameter(_string(a[0]))),
    "variables": _f(1, 1, lambda a, s: s.variable(_string(a[0]))),
    "concat": _f(1, None, _concat),
    "not": _f(1, 1, lambda a, s: not a[0]),
    "and": _f(2, None, lambda a, s: all(a)),
    "or": _f(2, None, lambda a, s: any(a)),
    "true": _f(0, 0, lambda a, s: True),
    "false": _f(0, 0, lambda a, s: False),
    "equals": _f(2, 2, lambda a, s: _equal(a[0], a[1])),
    "greater": _f(2, 2, lambda a, s: a[0] > a[1]),
    "greaterorequals": _f(2, 2, lambda a, s: a[0] >= a[1]),
    "less": _f(2, 2, lambda a, s: a[0] < a[1]),
    "lessorequals": _f(2, 2, lambda a, s: a[0] <= a[1]),
    "add": _f(2, 2, lambda a, s: _number("add", a[0]) + _number("add", a[1])),
    "sub": _f(2, 2, lambda a, s: _number("sub", a[0]) - _number("sub", a[1])),
    "mul": _f(2, 2, lambda a, s: _number("mul", a[0]) * _number("mul", a[1])),
    "div": _f(2, 2, lambda a, s: int(_number("div", a[0]) / _number("div", a[1]))),
    "mod": _f(2, 2, lambda a, s: _number("mod", a[0]) % _number("mod", a[1])),
    "length": _f(1, 1, lambda a, s: len(a[0])),
    "empty": _f(1, 1, lambda a, s: a[0] is None or len(a[0]) == 0),
    "createarray": _f(0, None, lambda a, s: list(a)),
    "createobject": _f(
        0, None, lambda a, s: {_string(k): v for k, v in zip(a[::2], a[1::2], strict=False)}
    ),
    "string": _f(1, 1, lambda a, s: _string(a[0])),
    "int": _f(1, 1, lambda a, s: int(a[0])),
    "bool": _f(1, 1, lambda a, s: a[0] if isinstance(a[0], bool) else str(a[0]).lower() == "true"),
    "json": _f(1, 1, _json),
    "tolower": _f(1, 1, lambda a, s: _string(a[0]).lower()),
    "toupper": _f(1, 1, lambda a, s: _string(a[0]).upper()),
    "format": _f(1, None, _format),
    "replace": _f(3, 3, lambda a, s: _string(a[0]).replace(_string(a[1]), _string(a[2]))),
    "substring": _f(
        1,
        3,
        lambda a, s: _string(a[0])[a[1] if len(a) > 1 else 0 :][: a[2] if len(a) > 2 else None],
    ),
    "contains": _f(2, 2, lambda a, s: a[1] in a[0]),
    "first": _f(1, 1, lambda a, s: a[0][0]),
    "last": _f(1, 1, lambda a, s: a[0][-1]),
    "union": _f(1, None, _union),
    "resourceid": _f(
        2, None, lambda a, s: _resource_id(s.subscription, s.group["name"], a, "resourceId")
    ),
    "subscriptionresourceid": _f(
        2, None, lambda a, s: _resource_id(s.subscription, None, a, "subscriptionResourceId")
    ),
    "resourcegroup": _f(0, 0, lambda a, s: dict(s.group)),
    "subscription": _f(
        0,
        0,
        lambda a, s: {"id": f"/subscriptions/{s.subscription}", "subscriptionId": s.subscription},
    ),
    "reference": _f(1, 3, _reference),
    "guid": _f(1, None, lambda a, s: str(uuid.uuid5(_GUID_NAMESPACE, "-".join(map(_string, a))))),
    "uniquestring": _f(1, None, _unique_string),
    "copyindex": _f(0, 2, _copy_index),
}


# -- resources -------------------------------------------------------------------------------


@dataclass
class Instance:
    """One resource a deployment makes (a copy loop gives one per index)."""

    key: int  # its position in the plan
    kind: str  # `Namespace/type`
    name: str
    id: str
    api_version: str
    raw: dict[str, Any]  # the declaration, unevaluated
    index: int | None  # the copy index
    loop: str | None  # the copy loop's name
    enabled: bool  # its condition
    depends: list[str] = field(default_factory=list)  # evaluated dependsOn entries

    def body(self, scope: Scope) -> dict[str, Any]:
        """What is sent to the resource provider: the declaration less the template's own
        keys, evaluated, nulls dropped."""
        here = scope.at(self.index)
        out = {k: v for k, v in self.raw.items() if k not in _TEMPLATE_ONLY}
        body: dict[str, Any] = _drop_nulls(evaluate(out, here))
        return body


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def plan(template: Mapping[str, Any], scope: Scope) -> list[Instance]:
    """The template's resources, copy loops expanded, names, ids, conditions and dependsOn
    evaluated (properties are evaluated when each is made, so `reference` sees its
    dependencies)."""
    resources = template.get("resources")
    if not isinstance(resources, list):
        raise TemplateError(
            "Deployment template validation failed: 'The template resources must be an array.'"
        )
    out: list[Instance] = []
    for position, raw in enumerate(resources):
        if not isinstance(raw, dict) or not raw.get("type") or not raw.get("name"):
            raise TemplateError(
                f"Deployment template validation failed: 'The template resource at position "
                f"{position} must have a type and a name.'"
            )
        if not raw.get("apiVersion"):
            raise TemplateError(
                f"Deployment template validation failed: 'The template resource "
                f"'{raw['name']}' at position {position} is missing the apiVersion. Please "
                "see https://aka.ms/arm-syntax-resources for usage details.'"
            )
        copy = raw.get("copy")
        if copy is None:
            indexes: list[int | None] = [None]
            loop = None
        else:
            count = evaluate(copy.get("count"), scope.at(None))
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise TemplateError(
                    f"Deployment template validation failed: 'The copy count of the "
                    f"template resource '{raw['name']}' must be a non-negative integer; "
                    f"it is '{count}'.'"
                )
            if count > 800:
                raise TemplateError(
                    "Deployment template validation failed: 'The copy count must not exceed 800.'"
                )
            indexes = list(range(count))
            loop = str(copy.get("name") or "")
        kind = str(raw["type"]).strip("/")
        for index in indexes:
            here = scope.at(index)
            name = _string(evaluate(raw["name"], here))
            condition = evaluate(raw.get("condition", True), here)
            arm_id = _instance_id(scope, kind, name)
            depends = [_string(evaluate(d, here)) for d in raw.get("dependsOn") or []]
            out.append(
                Instance(
                    len(out),
                    kind,
                    name,
                    arm_id,
                    str(raw["apiVersion"]),
                    raw,
                    index,
                    loop,
                    bool(condition),
                    depends,
                )
            )
    _check_unique(out)
    return out


def _instance_id(scope: Scope, kind: str, name: str) -> str:
    namespace, *types = kind.split("/")
    names = name.split("/")
    if len(names) != len(types):
        raise TemplateError(
            f"Deployment template validation failed: 'The template resource '{name}' for "
            f"type '{kind}' has incorrect segment lengths. A nested resource type must have "
            "identical number of segments as its resource name.'"
        )
    path = "/".join(f"{t}/{n}" for t, n in zip(types, names, strict=True))
    return (
        f"/subscriptions/{scope.subscription}/resourceGroups/{scope.group['name']}"
        f"/providers/{namespace}/{path}"
    )


def _check_unique(instances: Sequence[Instance]) -> None:
    seen: set[str] = set()
    for inst in instances:
        if not inst.enabled:
            continue
        if inst.id.lower() in seen:
            raise TemplateError(
                f"Deployment template validation failed: 'The resource '{inst.id}' is "
                "defined multiple times in a template. Please see "
                "https://aka.ms/arm-template/#resources for usage details.'"
            )
        seen.add(inst.id.lower())


def dependencies(instances: Sequence[Instance]) -> dict[int, set[int]]:
    """Each instance's dependencies (instance keys) from its dependsOn: a resource id, a
    resource name, or a copy loop's name (every instance of it). Dependencies on resources
    whose condition is false are dropped, as ARM drops them."""
    out: dict[int, set[int]] = {}
    for inst in instances:
        needs: set[int] = set()
        for ref in inst.depends:
            low = ref.lower().replace("//", "/").rstrip("/")
            found = [
                o.key
                for o in instances
                if o.id.lower() == low
                or o.name.lower() == low
                or (o.loop and o.loop.lower() == low)
                or (low.startswith("microsoft.") and o.id.lower().endswith("/providers/" + low))
            ]
            if not found:
                raise TemplateError(
                    f"Deployment template validation failed: 'The resource '{ref}' is not "
                    f"defined in the template.' (in the dependsOn of '{inst.name}')"
                )
            needs.update(k for k in found if instances[k].enabled and k != inst.key)
        out[inst.key] = needs
    _check_cycles(instances, out)
    return out


def _check_cycles(instances: Sequence[Instance], needs: Mapping[int, set[int]]) -> None:
    state: dict[int, int] = {}

    def visit(key: int) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            raise TemplateError(
                f"Deployment template validation failed: 'Circular dependency detected on "
                f"resource: '{instances[key].id}'.'"
            )
        state[key] = 1
        for other in needs[key]:
            visit(other)
        state[key] = 2

    for inst in instances:
        visit(inst.key)


def outputs(template: Mapping[str, Any], scope: Scope) -> dict[str, Any]:
    """The template's outputs (`{"name": {"type": ..., "value": ...}}`)."""
    out: dict[str, Any] = {}
    for name, decl in (template.get("outputs") or {}).items():
        if not evaluate(decl.get("condition", True), scope.at(None)):
            continue
        copy = decl.get("copy")
        if copy is not None:
            count = evaluate(copy.get("count"), scope.at(None))
            value: Any = [evaluate(copy.get("input"), scope.at(i)) for i in range(int(count))]
        else:
            value = evaluate(decl.get("value"), scope.at(None))
        out[name] = {"type": str(decl.get("type", "object")).capitalize(), "value": value}
    return out
