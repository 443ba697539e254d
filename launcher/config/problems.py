"""A problem found in a cluster config: where it is, what is wrong, and how to fix it."""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
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
    # For an unknown key that looks like a typo: the key it probably meant.
    meant: str | None = None
    # Other paths whose values this problem depends on (a default, say).
    uses: tuple[YamlPath, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def at(self, path: YamlPath, line: int | None, column: int | None) -> Problem:
        return Problem(
            path, self.message, self.hint, self.severity, line, column, self.meant, self.uses
        )

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
            out += "[" + json.dumps(part) + "]"  # escapes newlines and hidden characters
    return out or "(top level)"


def hidden_characters(word: str) -> list[str]:
    """Invisible or look-alike characters in a name (no-break spaces, zero-width joiners)."""
    return [
        f"U+{ord(c):04X}"
        for c in word
        if not c.isascii() and (c.isspace() or unicodedata.category(c) in ("Cf", "Zs"))
    ]


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest known name to a likely typo, or None when nothing is close."""
    options = [c for c in choices if c != word]
    cleaned = "".join(
        c
        for c in unicodedata.normalize("NFKC", word)
        if not (c.isspace() or unicodedata.category(c) == "Cf")
    )
    if cleaned != word and cleaned in options:
        return cleaned
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered:
        return lowered[word.lower()]
    allowed = 1 if len(word) <= 4 else 2
    near = sorted((_edit_distance(word.lower(), c.lower()), c) for c in options)
    if near and near[0][0] <= allowed:
        return near[0][1]
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.75)
    return match[0] if match else None


def _edit_distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap of neighbours) turning `a` into `b`."""
    if abs(len(a) - len(b)) > 2:
        return 3
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            cost = 0 if char_a == char_b else 1
            best = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and char_a == b[j - 2] and a[i - 2] == char_b:
                best = min(best, previous2[j - 2] + 1)
            current.append(best)
        previous2, previous = previous, current
    return previous[-1]


def number_text(value: float) -> str:
    """A number as a message shows it: 1e+15, not sixteen digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**12:
        return f"{float(value):.4g}"
    return str(value)


def describe_value(value: object) -> str:
    """A short, typed description of a YAML value for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {number_text(value)}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
