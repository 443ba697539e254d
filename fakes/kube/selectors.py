"""Label and field selectors, parsed as the API server parses them.

Label selectors: comma-separated requirements, all of which must hold:
`key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`
(exists), `!key` (does not exist). `!=` and `notin` also match objects without the key.
Field selectors: `path=value`, `path==value`, `path!=value`, comma = AND, on the fields a
resource supports (metadata.name, metadata.namespace, and for pods status.phase,
spec.nodeName...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

# A label key: optional DNS-subdomain prefix and '/', then a name of at most 63 chars.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")
_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|[^\s=!(),]+)")
_WORDS = {"in", "notin"}


@dataclass(frozen=True)
class Requirement:
    """One requirement: `op` is one of '=', '!=', 'in', 'notin', 'exists', '!'."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # '!=' and 'notin'


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise _invalid(text, f"unexpected character at {pos}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def _invalid(text: str, why: str) -> ApiError:
    return bad_request(f'unable to parse requirement: invalid label selector "{text}": {why}')


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _invalid(self.text, "unexpected end")
        self.pos += 1
        return token

    def key(self) -> str:
        key = self.take()
        if not _KEY.match(key) or key in _WORDS:
            raise _invalid(self.text, f"invalid label key {key!r}")
        return key

    def value(self) -> str:
        token = self.peek()
        if token in (None, ",", ")"):
            return ""  # an empty value: `key=` matches the label with value ""
        value = self.take()
        if not _VALUE.match(value):
            raise _invalid(self.text, f"invalid label value {value!r}")
        return value

    def value_set(self) -> frozenset[str]:
        if self.take() != "(":
            raise _invalid(self.text, "expected '(' after in/notin")
        values: set[str] = set()
        while True:
            values.add(self.value())
            token = self.take()
            if token == ")":
                return frozenset(values)
            if token != ",":
                raise _invalid(self.text, "expected ',' or ')' in a set of values")

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self.key(), "!")
        key = self.key()
        op = self.peek()
        if op in (None, ","):
            return Requirement(key, "exists")
        self.take()
        if op in ("=", "=="):
            return Requirement(key, "=", frozenset({self.value()}))
        if op == "!=":
            return Requirement(key, "!=", frozenset({self.value()}))
        if op in _WORDS:
            return Requirement(key, op, self.value_set())
        raise _invalid(self.text, f"unexpected {op!r} after key {key!r}")

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        while self.peek() is not None:
            requirements.append(self.requirement())
            token = self.peek()
            if token is None:
                break
            if self.take() != "," or self.peek() is None:
                raise _invalid(self.text, "expected ',' between requirements")
        return LabelSelector(tuple(requirements))


def parse_labels(text: str | None) -> LabelSelector:
    """Parse a labelSelector query value; raises ApiError 400 when it is malformed."""
    if not text or not text.strip():
        return LabelSelector(())
    return _Parser(text).parse()


def selector_from_map(labels: Mapping[str, str]) -> LabelSelector:
    """The selector a Service's or matchLabels' map of labels means."""
    return LabelSelector(tuple(Requirement(k, "=", frozenset({v})) for k, v in labels.items()))


# -- field selectors --------------------------------------------------------------------------

FieldGetter = Callable[[dict[str, Any]], str | None]


def _path_getter(path: str) -> FieldGetter:
    parts = path.split(".")

    def get(obj: dict[str, Any]) -> str | None:
        node: Any = obj
        for part in parts:
            if not isinstance(node, dict):
                return None
            node = node.get(part)
        return None if node is None else str(node)

    return get


COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str

    def matches(self, obj: dict[str, Any]) -> bool:
        actual = _path_getter(self.field)(obj) or ""
        return (actual == self.value) == self.equal


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...]

    def matches(self, obj: dict[str, Any]) -> bool:
        return all(req.matches(obj) for req in self.requirements)

    def name(self) -> str | None:
        """The one name this selector asks for (metadata.name=NAME), if it does."""
        for req in self.requirements:
            if req.field == "metadata.name" and req.equal:
                return req.value
        return None


def parse_fields(text: str | None, supported: tuple[str, ...] = ()) -> FieldSelector:
    """Parse a fieldSelector for a resource that supports `supported` fields beyond
    metadata.name and metadata.namespace."""
    requirements: list[FieldRequirement] = []
    for raw in (text or "").split(","):
        part = raw.strip()
        if not part:
            continue
        match = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", part)
        if not match:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = match.groups()
        if field not in COMMON_FIELDS + supported:
            raise bad_request(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, op != "!=", value.strip()))
    return FieldSelector(tuple(requirements))
