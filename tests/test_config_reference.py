"""docs/config-reference.md is generated from the schemas and must be kept current."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from launcher.config.schema import load_schema
from launcher.providers.registry import SPECS

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gen_config_reference.py"
DOC = REPO / "docs" / "config-reference.md"
# Each registered provider schema once, by its section title (fake_multinode is localhost's).
SCHEMAS = list(dict.fromkeys(spec.schema_name for spec in SPECS.values()))


@cache
def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _rendered() -> str:
    text = _generator().render()
    assert isinstance(text, str)
    return text


def _provider_section(doc: str, name: str) -> str:
    match = re.search(rf"^### {re.escape(name)}\n(.*?)(?=^##)", doc, re.M | re.S)
    assert match, f"no `### {name}` section in the rendered reference"
    return match.group(1)


def test_committed_reference_is_current() -> None:
    committed = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
    assert _rendered() == committed, (
        "docs/config-reference.md is out of date; run `python scripts/gen_config_reference.py`"
    )


def test_every_cluster_key_is_documented() -> None:
    doc = _rendered()
    missing = [key for key in load_schema("cluster")["properties"] if f"| `{key}` |" not in doc]
    assert not missing, f"cluster keys missing from the reference: {missing}"


def test_every_node_type_key_is_documented() -> None:
    doc = _rendered()
    node_type = load_schema("cluster")["definitions"]["node_type"]
    missing = [
        key
        for key in node_type["properties"]
        if f"| `available_node_types.<name>.{key}` |" not in doc
    ]
    assert not missing, f"node type keys missing from the reference: {missing}"


def test_every_provider_key_is_documented() -> None:
    doc = _rendered()
    missing: list[str] = []
    for schema_name in SCHEMAS:
        schema = load_schema(schema_name)
        name = str(schema.get("title", schema_name))
        section = _provider_section(doc, name)
        definitions = schema["definitions"]
        for definition in ("provider", "node_config"):
            for key in definitions[definition].get("properties", {}):
                if f"| `{definition}.{key}` |" not in section:
                    missing.append(f"{name}: {definition}.{key}")
    assert not missing, f"provider keys missing from the reference: {missing}"


def test_providers_appear_in_order() -> None:
    doc = _rendered()
    titles = [str(load_schema(name).get("title", name)) for name in SCHEMAS]
    positions = [doc.index(f"\n### {title}\n") for title in titles]
    assert positions == sorted(positions)


def test_check_mode_reports_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _generator()
    stale = tmp_path / "docs" / "config-reference.md"
    stale.parent.mkdir()
    stale.write_text("stale\n")
    monkeypatch.setattr(module, "REPO", tmp_path)
    monkeypatch.setattr(module, "OUTPUT", stale)
    assert module.main(["--check"]) == 1
    message = capsys.readouterr().err
    assert message.count("\n") == 1
    assert "python scripts/gen_config_reference.py" in message
    assert module.main([]) == 0
    assert stale.read_text(encoding="utf-8") == _rendered()
    assert module.main(["--check"]) == 0
