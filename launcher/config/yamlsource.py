"""Read a YAML file into plain data plus a map from YAML paths to file positions.

Positions let every problem name the line it is on. Mapping keys are kept as the text the
user wrote (`on:` stays "on", `1:` stays "1"), since cluster configs only have text keys.
Duplicate keys, which YAML resolves silently to the last value, are reported as warnings;
recursive aliases and alias "bombs" are refused before anything walks the data, and so are
files no cluster config resembles (too many values, nesting too deep, numbers too long),
while they are read, each with a message of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from launcher.config.problems import Problem, Severity, YamlPath

Position = tuple[int, int]  # 1-based line, 1-based column

# More values than this, in the file or after expanding aliases, is refused: no cluster
# config comes close (Ray's largest examples hold a few hundred).
MAX_EXPANDED_VALUES = 200_000
# Lists and mappings nested deeper than this are refused, aliases counted: a Kubernetes pod
# in a node type is about 12 deep, and every walk of the data stays far from Python's
# recursion limit.
MAX_NESTING = 64
# A number written with more characters than this is refused (2**64 has 20 digits).
MAX_NUMBER_CHARS = 100
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(Exception):
    """The file is not like any cluster config: stop reading it, with this problem."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass
class _Open:
    """A list or mapping being read: its anchor, and how deep what is in it goes so far."""

    anchor: str | None
    height: int = 0


class _ShapeGuard:
    """Follows the parser's events as they are read and refuses, at the line it is seen,
    more values than MAX_EXPANDED_VALUES or nesting deeper than MAX_NESTING (aliases
    counted at the depth of what they stand for). No recursion: it holds a stack."""

    def __init__(self) -> None:
        self.open: list[_Open] = []
        self.heights: dict[str, int] = {}  # anchor -> levels of lists and mappings it holds
        self.values = 0

    def see(self, event: yaml.Event) -> Problem | None:
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, yaml.ScalarEvent | yaml.CollectionStartEvent):
            self.values += 1
            if self.values > MAX_EXPANDED_VALUES:
                return Problem(
                    (),
                    f"the file holds more than {MAX_EXPANDED_VALUES} values by this line; "
                    "a cluster config needs far fewer",
                    "put long lists of commands in a script and run it from one command",
                    line=line,
                )
        if isinstance(event, yaml.CollectionStartEvent):
            self.open.append(_Open(event.anchor))
            if len(self.open) > MAX_NESTING:
                return Problem(
                    (),
                    f"lists or mappings nest more than {MAX_NESTING} levels deep here",
                    "no cluster config nests that deep: check the brackets and indentation",
                    line=line,
                )
        elif isinstance(event, yaml.CollectionEndEvent) and self.open:
            done = self.open.pop()
            self._close(done.anchor, done.height + 1)
        elif isinstance(event, yaml.ScalarEvent):
            self._close(event.anchor, 0)
        elif isinstance(event, yaml.AliasEvent):
            height = self.heights.get(str(event.anchor), 0)
            if len(self.open) + height > MAX_NESTING:
                return Problem(
                    (),
                    f"aliases here nest the data more than {MAX_NESTING} levels deep",
                    "use fewer aliases of parts that themselves hold aliases",
                    line=line,
                )
            self._close(None, height)
        return None

    def _close(self, anchor: str | None, height: int) -> None:
        if anchor is not None:
            self.heights[anchor] = height
        if self.open:
            self.open[-1].height = max(self.open[-1].height, height)


class _TextKeyLoader(yaml.SafeLoader):
    """SafeLoader that keeps every mapping key as the text written in the file, and refuses
    what no cluster config holds (see _ShapeGuard and _number) as it reads."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.guard = _ShapeGuard()

    def get_event(self) -> yaml.Event:
        event: yaml.Event = super().get_event()  # type: ignore[no-untyped-call]
        problem = self.guard.see(event)
        if problem is not None:
            raise _Refused(problem)
        return event

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    "a key must be plain text, not a list or mapping",
                    key_node.start_mark,
                )
            mapping[str(key_node.value)] = self.construct_object(value_node, deep=deep)
        return mapping


def _number(
    base: Callable[[yaml.SafeLoader, yaml.ScalarNode], object],
) -> Callable[[yaml.SafeLoader, yaml.ScalarNode], object]:
    """`base` (YAML's int or float constructor), refusing numbers written absurdly long:
    Python will not even turn an integer of more than 4300 digits into text."""

    def construct(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> object:
        text = str(node.value)
        if len(text) > MAX_NUMBER_CHARS:
            line, column = node.start_mark.line + 1, node.start_mark.column + 1
            digits = sum(c.isdigit() for c in text)
            raise _Refused(
                Problem(
                    (),
                    f"a number of {digits} digits; no setting takes a number that long",
                    "check the value, and quote it if it is text such as an ID",
                    line=line,
                    column=column,
                )
            )
        return base(loader, node)

    return construct


_TextKeyLoader.add_constructor("tag:yaml.org,2002:int", _number(yaml.SafeLoader.construct_yaml_int))
_TextKeyLoader.add_constructor(
    "tag:yaml.org,2002:float", _number(yaml.SafeLoader.construct_yaml_float)
)


@dataclass(frozen=True)
class YamlDocument:
    """Parsed data and where each part of it sits in the file."""

    data: object
    positions: Mapping[YamlPath, Position] = field(default_factory=dict)
    key_positions: Mapping[YamlPath, Position] = field(default_factory=dict)

    def contains(self, path: YamlPath) -> bool:
        return path in self.positions

    def locate(self, path: YamlPath, *, prefer_key: bool = False) -> Position | None:
        """The position of `path`, or of its nearest ancestor that is in the file."""
        probe = path
        while True:
            if prefer_key and probe in self.key_positions:
                return self.key_positions[probe]
            if probe in self.positions:
                return self.positions[probe]
            if not probe:
                return None
            probe = probe[:-1]
            prefer_key = False


def parse_yaml(text: str) -> tuple[YamlDocument | None, list[Problem]]:
    """Parse one YAML document. On an error, return no document and one problem."""
    try:
        loader = _TextKeyLoader(text)
    except yaml.reader.ReaderError as exc:
        return None, [_reader_problem(text, exc)]
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(data=None), []
        refused = _check_expansion(node)
        if refused is not None:
            return None, [refused]
        problems = _duplicate_keys(node, (), set())
        data = loader.construct_document(node)
    except _Refused as exc:
        return None, [exc.problem]
    except yaml.MarkedYAMLError as exc:
        return None, [_syntax_problem(exc)]
    except yaml.YAMLError as exc:
        return None, [Problem((), f"cannot read the file as YAML: {exc}")]
    finally:
        loader.dispose()
    positions: dict[YamlPath, Position] = {}
    key_positions: dict[YamlPath, Position] = {}
    _record_positions(node, (), positions, key_positions, set())
    return YamlDocument(data, positions, key_positions), problems


def _reader_problem(text: str, exc: yaml.reader.ReaderError) -> Problem:
    line = text.count("\n", 0, exc.position) + 1
    char = exc.character if isinstance(exc.character, str) else chr(exc.character)
    return Problem(
        (),
        f"line {line} has a character YAML does not allow ({char!r})",
        "remove it, or write it escaped inside a double-quoted string",
        line=line,
    )


def _syntax_problem(exc: yaml.MarkedYAMLError) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "invalid YAML"
    if exc.context and exc.problem:
        what = f"{exc.context}, {exc.problem}"
    line = mark.line + 1 if mark else None
    column = mark.column + 1 if mark else None
    where = f"line {line}, column {column}: " if mark else ""
    hint = "check the indentation and quoting near that point"
    if "\\t" in what or "\t" in what:
        hint = "indent with spaces, not tabs"
    elif "single document" in what:
        hint = "keep one document: remove the extra `---` and what follows it"
    elif "found undefined alias" in what:
        hint = "define the anchor (&name) before using it (*name)"
    return Problem((), f"YAML syntax error at {where}{what}", hint, line=line, column=column)


def _check_expansion(root: yaml.Node) -> Problem | None:
    """Refuse recursive aliases and documents whose aliases expand beyond reason."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _Recursive(node)
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        active.discard(key)
        sizes[key] = min(total, MAX_EXPANDED_VALUES + 1)
        return sizes[key]

    try:
        total = size(root)
    except _Recursive as exc:
        line = exc.node.start_mark.line + 1
        return Problem(
            (), f"an alias at line {line} contains itself", "remove the recursion", line=line
        )
    if total > MAX_EXPANDED_VALUES:
        return Problem(
            (),
            f"aliases expand this file to more than {MAX_EXPANDED_VALUES} values",
            "use fewer nested aliases",
        )
    return None


class _Recursive(Exception):
    def __init__(self, node: yaml.Node) -> None:
        super().__init__("recursive alias")
        self.node = node


def _duplicate_keys(node: yaml.Node, path: YamlPath, seen_nodes: set[int]) -> list[Problem]:
    if id(node) in seen_nodes:  # an alias of something already checked
        return []
    seen_nodes.add(id(node))
    problems: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    Problem(
                        (*path, key),
                        f"key appears twice (lines {seen[key]} and {line})",
                        "keep one of them: YAML uses the last",
                        severity=Severity.WARNING,
                        line=line,
                        column=key_node.start_mark.column + 1,
                    )
                )
            else:
                seen[key] = line
            problems += _duplicate_keys(value_node, (*path, key), seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            problems += _duplicate_keys(item, (*path, index), seen_nodes)
    return problems


def _record_positions(
    node: yaml.Node,
    path: YamlPath,
    positions: dict[YamlPath, Position],
    key_positions: dict[YamlPath, Position],
    visited: set[int],
) -> None:
    """Record where each path starts. An aliased node is walked once, at its anchor; paths
    under later aliases fall back to the alias itself."""
    if path:  # the whole document has no one line worth pointing at
        positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if id(node) in visited:
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        # Backwards, so the pair YAML keeps (the last; a key's own over a merged one) wins.
        for key_node, value_node in reversed(node.value):
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            child = (*path, key)
            key_positions.setdefault(
                child, (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            )
            _record_positions(value_node, child, positions, key_positions, visited)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_positions(item, (*path, index), positions, key_positions, visited)
