"""Our JSON schemas, and turning jsonschema's findings into one-line problems with a fix."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.config.problems import (
    Problem,
    Severity,
    YamlPath,
    describe_value,
    did_you_mean,
    format_path,
    hidden_characters,
    number_text,
)

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping of keys to values",
    "null": "null",
}
_TYPE_HINTS = {
    "integer": "write a whole number such as 2",
    "number": "write a number such as 1.5",
    "string": "write text; quote it if it looks like a number or boolean",
    "boolean": "write true or false",
    "array": "write a list, one `- item` per line or [a, b]",
    "object": "write indented `key: value` lines",
}


def schema_dir() -> Path:
    """Schemas ship inside the wheel as `launcher/_schemas`; in a checkout they are `schemas/`."""
    here = Path(__file__).resolve().parent.parent
    packaged = here / "_schemas"
    return packaged if packaged.is_dir() else here.parent / "schemas"


@cache
def load_schema(name: str) -> Mapping[str, Any]:
    """`cluster`, or a provider's `package:file` (its spec's `schema_name`); read once."""
    package, _, file = name.rpartition(":")
    if package:
        text = resources.files(package).joinpath(file).read_text()
    else:
        text = (schema_dir() / f"{name}.schema.json").read_text()
    result: Mapping[str, Any] = json.loads(text)
    return result


def _strict_pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """JSON schema's `pattern`, where a final `$` is the end of the text: Python's `$` also
    matches before a final newline, which let `"x\\n"` pass as a cluster name."""
    if not isinstance(instance, str):
        return
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    if re.search(pattern, instance) is None:
        from jsonschema.exceptions import ValidationError

        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def _validator_class() -> Any:
    """Draft 7 with our `pattern`. jsonschema is imported here, when a config is validated
    (~35 ms of imports that an `up` whose config was validated before does without:
    loader.py keeps the digests of configs that passed)."""
    import jsonschema

    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft7Validator, {"pattern": _strict_pattern}
    )


@cache
def _validator(name: str, definition: str | None) -> Any:
    root = load_schema(name)
    schema = (
        root
        if definition is None
        else {**root["definitions"][definition], "definitions": root.get("definitions", {})}
    )
    return _validator_class()(schema)


def property_fix(name: str, key: str, value: object) -> str | None:
    """None when `value` is valid for the top-level `key` of schema `name`, else the rule's
    fix (its `x-hint`): for values given outside the file, such as `--cluster-name`."""
    rule = load_schema(name)["properties"][key]
    if _validator_class()(rule).is_valid(value):
        return None
    return str(rule.get("x-hint") or f"see `{key}` in docs/config-reference.md")


def schema_problems(
    instance: object, name: str, base: YamlPath = (), definition: str | None = None
) -> list[Problem]:
    """Every schema violation in `instance`, as problems located under `base`."""
    problems: list[Problem] = []
    for error in _validator(name, definition).iter_errors(instance):
        problems.extend(_convert(error, base))
    # A value of the wrong type also fails its enum, range or pattern: say it once.
    mistyped = {p.path for p in problems if p.message.startswith("expected ")}
    return [p for p in problems if p.path not in mistyped or p.message.startswith("expected ")]


def unknown_key_problem(path: YamlPath, key: str, known: list[str], fallback: str) -> Problem:
    """An unknown key, with the key it probably meant or what to do instead."""
    guess = did_you_mean(key, known)
    hidden = hidden_characters(key)
    if guess and hidden:
        fix = f"it contains a hidden character ({', '.join(hidden)}); retype it as `{guess}`"
    elif guess:
        fix = f"did you mean `{guess}`?"
    else:
        fix = fallback
    return Problem((*path, key), "unknown key", fix, meant=guess)


def typo_problems(instance: object, name: str, base: YamlPath, definition: str) -> list[Problem]:
    """For open mappings (`x-typo-check`): a key close to a known key is an error, any
    other unknown key a warning, since it is passed on untouched."""
    schema = load_schema(name)["definitions"][definition]
    if not isinstance(instance, Mapping) or not schema.get("x-typo-check"):
        return []
    known = list(schema.get("properties", {}))
    problems = []
    for key in instance:
        if key in known:
            continue
        if did_you_mean(key, known) is not None:
            problems.append(unknown_key_problem(base, key, known, ""))
        else:
            problems.append(
                Problem(
                    (*base, key),
                    "not a key the launcher knows; passed on as is",
                    "check the spelling",
                    severity=Severity.WARNING,
                )
            )
    return problems


def _convert(error: ValidationError, base: YamlPath) -> Iterator[Problem]:
    path: YamlPath = (*base, *error.absolute_path)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    hint = schema.get("x-hint")
    kind = error.validator
    value = error.instance
    expected: Any = error.validator_value
    if kind == "additionalProperties" and schema.get("additionalProperties") is False:
        known = list(schema.get("properties", {}))
        for key in _unknown_keys(value, schema):
            yield unknown_key_problem(path, key, known, _known_keys_hint(known))
        return
    if "propertyNames" in error.relative_schema_path:
        # jsonschema reports a bad key name against its mapping; point at the key itself.
        what = "an empty name" if value == "" else f"the name {value!r}"
        yield Problem(
            (*path, str(value)), f"{what} is not allowed here", hint or "use a plain name"
        )
        return
    if kind == "required":
        for key in expected:
            if isinstance(value, Mapping) and key not in value:
                prop = schema.get("properties", {}).get(key, {})
                where = format_path((*path, key))
                yield Problem(path, f"`{key}` is missing", prop.get("x-hint") or f"add {where}")
        return
    if kind == "type":
        wanted = expected if isinstance(expected, list) else [expected]
        words = " or ".join(_TYPE_WORDS.get(str(w), str(w)) for w in wanted)
        if isinstance(value, str) and {"integer", "number"} & set(map(str, wanted)):
            try:
                float(value)
            except ValueError:
                pass
            else:
                hint = f"YAML reads `{value}` as text; write it as a plain number like 1000"
        yield Problem(
            path,
            f"expected {words}, got {describe_value(value)}",
            hint or _TYPE_HINTS.get(str(wanted[0])),
        )
        return
    if kind in ("minimum", "exclusiveMinimum"):
        yield Problem(
            path,
            f"{_number(value)} is less than the minimum of {_number(expected)}",
            hint or f"use {_number(expected)} or more",
        )
        return
    if kind == "maximum":
        yield Problem(
            path,
            f"{_number(value)} is more than the maximum of {_number(expected)}",
            hint or f"use {_number(expected)} or less",
        )
        return
    if kind in ("enum", "const"):
        options = expected if kind == "enum" else [expected]
        guess = did_you_mean(str(value), [str(o) for o in options])
        fix = (
            f"did you mean `{guess}`?"
            if guess
            else hint or "use one of: " + ", ".join(str(o) for o in options)
        )
        yield Problem(path, f"{describe_value(value)} is not allowed here", fix)
        return
    if kind == "pattern":
        yield Problem(path, f"{describe_value(value)} is not allowed", hint)
        return
    if kind == "minLength":
        yield Problem(path, "must not be empty", hint)
        return
    if kind == "anyOf":
        subs = _branch_errors(error)
        if subs:
            for sub in subs:
                yield from _convert(sub, base)
            return
    if kind == "propertyNames":
        for sub in error.context:
            sub_hint = sub.schema.get("x-hint") if isinstance(sub.schema, Mapping) else None
            yield Problem(
                (*path, str(sub.instance)),
                "this name is not allowed",
                sub_hint or "use a plain name",
            )
        return
    yield Problem(path, error.message, hint)


def _branch_errors(error: ValidationError) -> list[ValidationError]:
    """For a value of exactly one `anyOf` branch's type (the mapping form of `recover:
    true|{...}`), that branch's own errors, to say instead of "valid under none"."""
    branches = error.validator_value if isinstance(error.validator_value, list) else []
    typed = [
        i
        for i, branch in enumerate(branches)
        if isinstance(branch, Mapping) and _of_type(error.instance, branch.get("type"))
    ]
    if len(typed) != 1:
        return []
    return [
        sub
        for sub in error.context or ()
        if sub.relative_schema_path and sub.relative_schema_path[0] == typed[0]
    ]


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (Mapping,),
    "array": (list, tuple),
    "string": (str,),
    "boolean": (bool,),
}


def _of_type(value: object, kind: object) -> bool:
    types = _PYTHON_TYPES.get(str(kind))
    return types is not None and isinstance(value, types)


def _number(value: object) -> str:
    return number_text(value) if isinstance(value, int | float) else str(value)


def _unknown_keys(value: object, schema: Mapping[str, Any]) -> list[str]:
    if not isinstance(value, Mapping):
        return []
    known = set(schema.get("properties", {}))
    return [k for k in value if k not in known]


def _known_keys_hint(known: list[str]) -> str:
    if not known:
        return "remove it: nothing may be set here"
    shown = ", ".join(sorted(known)[:12])
    more = ", ..." if len(known) > 12 else ""
    return f"remove it, or use a known key ({shown}{more})"
