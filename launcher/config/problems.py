"""A problem found in a cluster config: where it is, what is wrong, and how to fix it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

PathPart = str | int
YamlPath = tuple[PathPart, ...]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """One finding. `line` is 1-based in the source file, or None when it has no place there."""

    path: YamlPath
    message: str
    hint: str | None = None
    severity: Severity = Severity.ERROR
    line: int | None = None
    column: int | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def located(self, line: int | None, column: int | None) -> Problem:
        return Problem(self.path, self.message, self.hint, self.severity, line, column)

    def render(self, source: str) -> str:
        """One line: `file:line: path: what is wrong; how to fix it`."""
        where = source if self.line is None else f"{source}:{self.line}"
        text = self.message if not self.path else f"{format_path(self.path)}: {self.message}"
        if self.hint:
            text = f"{text}; {self.hint}"
        return f"{where}: {self.severity.value}: {text}"

    def to_json(self) -> dict[str, object]:
        return {
            "severity": self.severity.value,
            "path": format_path(self.path),
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
        }


def format_path(path: Iterable[PathPart]) -> str:
    """Render a path the way a user points at it: `available_node_types["ray.head"].resources`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out or "(top level)"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest known name to a likely typo, or None when nothing is close."""
    options = [c for c in choices if c != word]
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    return match[0] if match else None


def describe_value(value: object) -> str:
    """A short, typed description of a YAML value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
