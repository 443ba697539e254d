"""Read a YAML file into plain data plus a map from YAML paths to file positions.

Positions let every problem name the line it is on. Duplicate keys, which YAML
parsers silently resolve to the last value, are reported as problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from launcher.config.problems import Problem, YamlPath

Position = tuple[int, int]  # 1-based line, 1-based column


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
    """Parse one YAML document. On a syntax error, return no document and one problem."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        return None, [
            Problem(
                (),
                f"line {line} has a character YAML does not allow ({char!r})",
                "remove it or write it escaped in a quoted string",
                line=line,
            )
        ]
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(data=None), []
        problems = _duplicate_keys(node, ())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        return None, [_syntax_problem(exc)]
    except yaml.YAMLError as exc:
        return None, [Problem((), f"cannot read the file as YAML: {exc}")]
    finally:
        loader.dispose()
    positions: dict[YamlPath, Position] = {}
    key_positions: dict[YamlPath, Position] = {}
    _record_positions(node, (), positions, key_positions, set())
    data, key_problems = _stringify_keys(data, (), positions)
    return YamlDocument(data, positions, key_positions), problems + key_problems


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
    return Problem((), f"YAML syntax error at {where}{what}", hint, line=line, column=column)


def _scalar_key(node: yaml.Node) -> object:
    return node.value if isinstance(node, yaml.ScalarNode) else id(node)


def _duplicate_keys(node: yaml.Node, path: YamlPath) -> list[Problem]:
    problems: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = _scalar_key(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    Problem(
                        (*path, str(key)),
                        f"key appears twice (lines {seen[key]} and {line})",
                        "keep one of them: YAML would silently use the last",
                        line=line,
                        column=key_node.start_mark.column + 1,
                    )
                )
            else:
                seen[key] = line
            problems += _duplicate_keys(value_node, (*path, str(key)))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            problems += _duplicate_keys(item, (*path, index))
    return problems


def _record_positions(
    node: yaml.Node,
    path: YamlPath,
    positions: dict[YamlPath, Position],
    key_positions: dict[YamlPath, Position],
    active: set[int],
) -> None:
    if path:  # the whole document has no one line worth pointing at
        positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if id(node) in active:  # a recursive alias
        return
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            child = (*path, key)
            key_positions.setdefault(
                child, (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            )
            _record_positions(value_node, child, positions, key_positions, active)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_positions(item, (*path, index), positions, key_positions, active)
    active.discard(id(node))


def _stringify_keys(
    data: object, path: YamlPath, positions: Mapping[YamlPath, Position]
) -> tuple[object, list[Problem]]:
    """Cluster configs only have string keys; report and convert any other key."""
    problems: list[Problem] = []
    if isinstance(data, dict):
        out: dict[str, object] = {}
        for key, value in data.items():
            name = key if isinstance(key, str) else _key_text(key)
            if not isinstance(key, str):
                pos = positions.get((*path, name))
                problems.append(
                    Problem(
                        (*path, name),
                        f"key {name} is read as {type(key).__name__}, not text",
                        f'quote it: "{name}"',
                        line=pos[0] if pos else None,
                    )
                )
            out[name], more = _stringify_keys(value, (*path, name), positions)
            problems += more
        return out, problems
    if isinstance(data, list):
        items = []
        for index, item in enumerate(data):
            converted, more = _stringify_keys(item, (*path, index), positions)
            items.append(converted)
            problems += more
        return items, problems
    return data, problems


def _key_text(key: object) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return str(key).lower()
    return str(key)
