"""Property-based: mutate valid configs thousands of times. Never a traceback; a config made
invalid always exits 2 with a message naming where the problem is."""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli.main import cli
from launcher.config.legacy import LEGACY_KEYS
from launcher.config.problems import format_path
from launcher.config.schema import load_schema
from launcher.config.yamlsource import MAX_NESTING, MAX_NUMBER_CHARS
from tests.conftest import RAY_EXAMPLES

OWN = {
    "cluster_name": "fuzz",
    "max_workers": 3,
    "provider": {"type": "localhost"},
    "available_node_types": {
        "head": {"node_config": {}, "resources": {"CPU": 2}, "max_workers": 0},
        "worker": {
            "node_config": {},
            "resources": {"CPU": 1, "GPU": 1},
            "min_workers": 1,
            "max_workers": 3,
            "labels": {"zone": "a"},
        },
    },
    "head_node_type": "head",
    "auth": {"ssh_user": "me"},
    "setup_commands": ["echo one", "echo two"],
}


def _bases() -> list[dict[str, Any]]:
    bases = [OWN]
    for directory in ("aws", "gcp", "azure", "local", "kubernetes", "fake_multi_node"):
        for path in sorted((RAY_EXAMPLES / directory).glob("example*.yaml")):
            bases.append(yaml.safe_load(path.read_text()))
    return bases


BASES = _bases()
KNOWN_TOP = set(load_schema("cluster")["properties"]) | set(LEGACY_KEYS)
KNOWN_NODE_TYPE = set(load_schema("cluster")["definitions"]["node_type"]["properties"])
KNOWN_AUTH = set(load_schema("cluster")["properties"]["auth"]["properties"])

NOT_INT = [-1, -7, "two", 1.5, [], {}, True, None]
NOT_STRING = [5, 2.5, [], {"a": 1}, True]
NOT_LIST = ["echo hi", 5, {"a": "b"}, True]
NOT_MAPPING = ["text", 5, ["a"], True]
NOT_BOOL = ["yes please", 5, [], {}]
NOT_NUMBER = [-1, -0.5, "fast", [], {}]
NOT_FINITE = [float("nan"), float("inf"), float("-inf")]
ABSURD = [1.0e308, 10**30]  # for counts and speeds, 10**7 is too

TOP_LEVEL = {
    ("cluster_name",): [*NOT_STRING, "bad name!", "", "-lead", "a" * 70],
    ("max_workers",): [*NOT_INT, *NOT_FINITE, *ABSURD, 10**7],
    ("upscaling_speed",): [*NOT_NUMBER, *NOT_FINITE, *ABSURD, 10**7],
    ("idle_timeout_minutes",): [*NOT_NUMBER, *NOT_FINITE, *ABSURD, 10**7],
    ("metadata", "mine"): NOT_FINITE,
    ("provider",): NOT_MAPPING,
    ("provider", "type"): [5, [], {}, "oracle", "nope"],
    ("auth",): NOT_MAPPING,
    ("auth", "ssh_user"): NOT_STRING,
    ("docker",): NOT_MAPPING,
    ("file_mounts",): [[], "x", 5],
    ("file_mounts", "/remote"): NOT_STRING,
    ("file_mounts", "~/../../etc/x"): ["/tmp"],
    ("file_mounts", "/home/u/../../etc"): ["/tmp"],
    ("cluster_synced_files",): [5, {}, "x"],
    ("file_mounts_sync_continuously",): NOT_BOOL,
    ("rsync_exclude",): NOT_LIST,
    ("rsync_filter",): NOT_LIST,
    ("initialization_commands",): NOT_LIST,
    ("setup_commands",): NOT_LIST,
    ("setup_commands", 0): NOT_STRING,
    ("head_setup_commands",): NOT_LIST,
    ("worker_setup_commands",): NOT_LIST,
    ("head_start_ray_commands",): NOT_LIST,
    ("worker_start_ray_commands",): NOT_LIST,
    ("head_node_type",): [5, [], "no-such-type"],
    ("available_node_types",): [[], "x", 5],
}
PER_TYPE = {
    (): ["x", 5, []],
    ("node_config",): NOT_MAPPING,
    ("resources",): [[], "x", 5],
    ("resources", "CPU"): [-1, "x", 1.5, [], None, *NOT_FINITE, *ABSURD],
    ("min_workers",): [-1, "x", 1.5, [], None, *NOT_FINITE, *ABSURD, 10**7],
    ("max_workers",): [-1, "x", 1.5, [], None, *NOT_FINITE, *ABSURD, 10**7],
    ("labels",): [[], 5, "x"],
    ("labels", "team"): [5, [], {}],
    ("worker_setup_commands",): NOT_LIST,
}


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = data
    for index, part in enumerate(path[:-1]):
        wants_list = isinstance(path[index + 1], int)
        if isinstance(part, str) and not isinstance(target.get(part), list if wants_list else dict):
            target[part] = [] if wants_list else {}
        target = target[part]
    if isinstance(path[-1], int):
        if not isinstance(target, list) or not target:
            raise LookupError
        target[path[-1]] = value
    else:
        target[path[-1]] = value


def _not_capped(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    """`value`, or -1 where on-prem would cap it: a count above its machines is used as their
    number, with a warning (as in Ray), however absurd the count."""
    provider = data.get("provider")
    big = isinstance(value, int | float) and not isinstance(value, bool) and value > 10_000
    on_prem = isinstance(provider, dict) and provider.get("type") == "local"
    counts = bool(path) and path[-1] in ("max_workers", "min_workers")
    return -1 if big and on_prem and counts and math.isfinite(value) else value


@st.composite
def invalid_configs(draw: st.DrawFn) -> tuple[str, str]:
    """A config with one mistake, and the path text the error must name."""
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    kind = draw(st.sampled_from(["top", "type", "unknown", "missing", "range"]))
    types = data.get("available_node_types")
    has_types = isinstance(types, dict) and bool(types)
    if kind in ("type", "range") and not has_types:
        kind = "top"
    if kind == "top":
        path, options = draw(st.sampled_from(sorted(TOP_LEVEL.items(), key=str)))
        if path == ("setup_commands", 0) and not data.get("setup_commands"):
            data["setup_commands"] = ["echo"]
        if path[0] == "provider" and len(path) == 2 and not isinstance(data.get("provider"), dict):
            data["provider"] = {}
        _set(data, path, _not_capped(data, path, draw(st.sampled_from(options))))
        expected = format_path(path)
        if path == ("provider", "type"):
            expected = "provider"
        if path == ("available_node_types",) and "head_node_type" not in data:
            expected = "available_node_types"
        return yaml.safe_dump(data), expected
    if kind == "type":
        name = draw(st.sampled_from(sorted(types)))
        sub, options = draw(st.sampled_from(sorted(PER_TYPE.items(), key=str)))
        if sub and not isinstance(types[name], dict):
            types[name] = {"node_config": {}}
        value = _not_capped(data, sub, draw(st.sampled_from(options)))
        _set(data, ("available_node_types", name, *sub), value)
        return yaml.safe_dump(data), format_path(("available_node_types", name))
    if kind == "range":
        name = draw(st.sampled_from(sorted(types)))
        high = draw(st.integers(min_value=0, max_value=50))
        types[name]["max_workers"] = high
        types[name]["min_workers"] = high + draw(st.integers(min_value=1, max_value=5))
        return yaml.safe_dump(data), format_path(("available_node_types", name))
    if kind == "unknown":
        key = draw(st.from_regex(r"[a-z][a-z_]{0,14}", fullmatch=True))
        where = draw(
            st.sampled_from(["top", "auth", "node_type"] if has_types else ["top", "auth"])
        )
        if where == "top" and key not in KNOWN_TOP:
            data[key] = draw(st.sampled_from([1, "x", [], {}]))
            return yaml.safe_dump(data), key
        if where == "auth" and key not in KNOWN_AUTH:
            if not isinstance(data.get("auth"), dict):
                data["auth"] = {}
            data["auth"][key] = "x"
            return yaml.safe_dump(data), format_path(("auth", key))
        if where == "node_type" and key not in KNOWN_NODE_TYPE:
            name = draw(st.sampled_from(sorted(types)))
            types[name][key] = 1
            return yaml.safe_dump(data), format_path(("available_node_types", name, key))
        data["provider"] = "not a mapping"
        return yaml.safe_dump(data), "provider"
    # missing required keys
    if draw(st.booleans()):
        del data["provider"]
        return yaml.safe_dump(data), "provider"
    data["provider"].pop("type", None)
    return yaml.safe_dump(data), "provider"


def _run(text: str) -> tuple[int, str, BaseException | None]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(text)
        result = CliRunner().invoke(cli, ["validate", str(path)])
    exception = None if isinstance(result.exception, SystemExit) else result.exception
    return result.exit_code, result.stdout + result.stderr, exception


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invalid_configs())
def test_mutated_configs_fail_cleanly_naming_the_path(case: tuple[str, str]) -> None:
    text, expected = case
    code, output, exception = _run(text)
    assert exception is None, f"crashed on:\n{text}"
    assert "Traceback" not in output
    assert code == 2, (
        f"accepted an invalid config (expected a problem at {expected}):\n{text}\n{output}"
    )
    assert expected in output, f"no mention of {expected} in:\n{output}"
    assert all(": error: " in line or ": warning: " in line for line in output.splitlines() if line)


@st.composite
def broken_yaml(draw: st.DrawFn) -> str:
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    lines = yaml.safe_dump(data).splitlines()
    # Top-level boundaries: lines starting at column 0, outside any block scalar.
    boundaries = [i for i, line in enumerate(lines) if line[:1].isalpha()] + [len(lines)]
    at = draw(st.sampled_from(boundaries))
    breakage = draw(
        st.sampled_from(
            [
                "extra: [unclosed, list",
                "\tindented: with a tab",
                "bad: {open: mapping",
                "key: value: another",
                '"unterminated: string',
                "&anchor dangling: *nowhere",
            ]
        )
    )
    lines.insert(at, breakage)
    return "\n".join(lines) + "\n"


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_yaml())
def test_broken_yaml_fails_cleanly_naming_the_line(text: str) -> None:
    code, output, exception = _run(text)
    assert exception is None
    assert "Traceback" not in output
    assert code == 2, text
    assert "line" in output


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(text: str) -> None:
    code, output, exception = _run(text)
    assert exception is None, repr(text)
    assert code in (0, 2)
    assert "Traceback" not in output


@st.composite
def hostile_yaml(draw: st.DrawFn) -> tuple[str, str]:
    """A valid config with one thing no cluster config holds, and what the error must say."""
    text = yaml.safe_dump(copy.deepcopy(draw(st.sampled_from(BASES))))
    kind = draw(st.sampled_from(["deep", "digits", "aliases"]))
    if kind == "deep":
        depth = draw(st.integers(min_value=MAX_NESTING, max_value=5_000))
        return text + "deep: " + "[" * depth + "]" * depth + "\n", "levels deep"
    if kind == "digits":
        digits = draw(st.integers(min_value=MAX_NUMBER_CHARS + 1, max_value=6_000))
        return text + "big: " + "7" * digits + "\n", f"a number of {digits} digits"
    chain = draw(st.integers(min_value=MAX_NESTING, max_value=300))
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, chain)]
    return text + "\n".join(lines) + "\n", "levels deep"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_yaml())
def test_hostile_yaml_is_one_line_naming_the_problem(case: tuple[str, str]) -> None:
    text, expected = case
    code, output, exception = _run(text)
    assert exception is None
    assert code == 2, output
    assert output.count("\n") == 1 and expected in output, output
    assert "internal error" not in output and "Traceback" not in output
