"""GCE's list `filter` expressions, labels' rules and list paging, for fakes/gce/server.py.

Filter syntax accepted (as the Compute API documents it):
- comparisons `FIELD = VALUE`, `FIELD != VALUE`, `FIELD : VALUE` (has: substring for
  strings, equality otherwise), `FIELD:*` (the field or label key is set), `FIELD < VALUE`
  and friends, and the older `FIELD eq REGEX` / `FIELD ne REGEX` (RE2 full match);
- VALUE bare (`RUNNING`, `ray-head`) or quoted ("x" or 'x');
- FIELD a dotted path into the resource: `status`, `name`, `labels.ray-cluster-name`,
  `scheduling.preemptible`, `networkInterfaces.networkIP` (a repeated field matches if any
  element does); a URL-valued field (`zone`, `machineType`) also matches its last segment;
- `NOT x` and `-x`, `(x)`, `x AND y`, `x OR y`, and juxtaposition `(x) (y)` (AND). As in
  Google's filter grammar (AIP-160), OR binds tighter than AND.
A malformed filter is 400 invalid, as GCE answers.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from fakes.gce.faults import GoogleError, invalid

Predicate = Callable[[dict[str, Any]], bool]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<lp>\() | (?P<rp>\)) |
        (?P<op>!=|<=|>=|=|:|<|>) |
        "(?P<dq>(?:[^"\\]|\\.)*)" | '(?P<sq>(?:[^'\\]|\\.)*)' |
        (?P<word>[^\s()=!:<>"']+)
    )""",
    re.VERBOSE,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        found = _TOKEN.match(text, position)
        if found is None or found.end() == position:
            raise _bad(text)
        position = found.end()
        kind = found.lastgroup
        assert kind is not None
        value = found.group(kind)
        if kind in ("dq", "sq"):
            out.append(("str", re.sub(r"\\(.)", r"\1", value)))
        else:
            out.append((kind, value))
    return out


def _bad(text: str) -> GoogleError:
    return invalid(f"Invalid value for field 'filter': '{text}'. Invalid list filter expression.")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise _bad(self.text)
        self.at += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "word" and token[1] == word:
            self.at += 1
            return True
        return False

    def parse(self) -> Predicate:
        if not self.tokens:
            return lambda _: True
        predicate = self.conjunction()
        if self.peek() is not None:
            raise _bad(self.text)
        return predicate

    def conjunction(self) -> Predicate:
        parts = [self.disjunction()]
        while (token := self.peek()) is not None and token[0] != "rp":
            self.keyword("AND")
            parts.append(self.disjunction())
        return lambda r: all(p(r) for p in parts)

    def disjunction(self) -> Predicate:
        parts = [self.unary()]
        while self.keyword("OR"):
            parts.append(self.unary())
        return lambda r: any(p(r) for p in parts)

    def unary(self) -> Predicate:
        if self.keyword("NOT"):
            inner = self.unary()
            return lambda r: not inner(r)
        token = self.take()
        if token[0] == "lp":
            inner = self.conjunction()
            if self.take()[0] != "rp":
                raise _bad(self.text)
            return inner
        if token[0] == "word" and token[1].startswith("-") and len(token[1]) > 1:
            self.tokens[self.at - 1] = ("word", token[1][1:])
            self.at -= 1
            inner = self.unary()
            return lambda r: not inner(r)
        if token[0] != "word":
            raise _bad(self.text)
        return self.comparison(token[1])

    def comparison(self, field: str) -> Predicate:
        op_token = self.take()
        if (op_token[0] == "word" and op_token[1] in ("eq", "ne")) or op_token[0] == "op":
            op = op_token[1]
        else:
            raise _bad(self.text)
        kind, value = self.take()
        if kind not in ("word", "str"):
            raise _bad(self.text)
        path = field.split(".")
        if op == ":" and value == "*" and kind == "word":
            return lambda r: bool(_values(r, path))
        if op in ("eq", "ne"):
            try:
                pattern = re.compile(value)
            except re.error as error:
                raise _bad(self.text) from error
            found: Predicate = lambda r: any(pattern.fullmatch(v) for v in _values(r, path))  # noqa: E731
            return found if op == "eq" else (lambda r: not found(r))
        return _compare(path, op, value)


def _compare(path: list[str], op: str, value: str) -> Predicate:
    def equal(got: str) -> bool:
        return got == value or (got.startswith("http") and got.rpartition("/")[2] == value)

    def check(resource: dict[str, Any]) -> bool:
        values = _values(resource, path)
        if op == "=":
            return any(equal(v) for v in values)
        if op == "!=":
            return not any(equal(v) for v in values)
        if op == ":":
            return any(value in v or equal(v) for v in values)
        for got in values:
            left: Any = got
            right: Any = value
            with contextlib.suppress(ValueError):
                left, right = float(got), float(value)
            if (op == "<" and left < right) or (op == ">" and left > right):
                return True
            if (op == "<=" and left <= right) or (op == ">=" and left >= right):
                return True
        return False

    return check


def _values(resource: Any, path: Sequence[str]) -> list[str]:
    """The string forms of what `path` names in `resource` (several through lists)."""
    if not path:
        if resource is None or isinstance(resource, dict):
            return []
        if isinstance(resource, list):
            return [v for item in resource for v in _values(item, path)]
        if isinstance(resource, bool):
            return ["true" if resource else "false"]
        return [str(resource)]
    if isinstance(resource, list):
        return [v for item in resource for v in _values(item, path)]
    if isinstance(resource, dict) and path[0] in resource:
        return _values(resource[path[0]], path[1:])
    return []


def compile_filter(text: str | None) -> Predicate:
    """A predicate over resources (their JSON) for GCE's `filter`; 400 invalid if malformed."""
    return _Parser(text or "").parse()


# -- labels ---------------------------------------------------------------------------------

_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


def check_labels(labels: Any, field: str) -> dict[str, str]:
    """`labels` if GCE accepts them (400 invalid otherwise, naming `field`)."""
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise invalid(f"Invalid value for field '{field}': labels must be a map.")
    if len(labels) > 64:
        raise invalid(
            f"Invalid value for field '{field}': ''. Too many labels: {len(labels)} (at most 64)."
        )
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(str(key)):
            raise invalid(
                f"Invalid value for field '{field}': ''. Label key '{key}' violates format "
                "constraints. The key must start with a lowercase character, can only contain "
                "lowercase letters, numeric characters, underscores and dashes. The key can be "
                "at most 63 characters long. International characters are allowed."
            )
        if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
            raise invalid(
                f"Invalid value for field '{field}': ''. Label value '{value}' violates format "
                "constraints. The value can only contain lowercase letters, numeric characters, "
                "underscores and dashes. The value can be at most 63 characters long. "
                "International characters are allowed."
            )
    return dict(labels)


_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")


def check_name(name: Any, field: str = "resource.name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise invalid(
            f"Invalid value for field '{field}': '{name}'. Must be a match of regex "
            "'(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"
        )
    return name


# -- paging ---------------------------------------------------------------------------------


def page(items: Sequence[Any], params: dict[str, str]) -> tuple[list[Any], str | None]:
    """The page of `items` that `maxResults` (default and most 500) and `pageToken` ask for,
    and the next page's token (None on the last page)."""
    raw = params.get("maxResults", "500")
    try:
        size = int(raw)
    except ValueError:
        raise invalid(f"Invalid value for field 'maxResults': '{raw}'.") from None
    if not 0 <= size <= 500:
        raise invalid(
            f"Invalid value for field 'maxResults': '{raw}'. Must be less than or equal to 500"
        )
    size = size or 500
    start = 0
    if token := params.get("pageToken"):
        try:
            start = int(base64.urlsafe_b64decode(token.encode()).decode().removeprefix("at:"))
        except ValueError:
            raise invalid(f"Invalid value for field 'pageToken': '{token}'.") from None
    chunk = list(items[start : start + size])
    more = start + size < len(items)
    token = base64.urlsafe_b64encode(f"at:{start + size}".encode()).decode() if more else None
    return chunk, token
