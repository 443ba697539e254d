"""The autoscaler's folders say what their modules do: decide/ is pure. Its modules import
nothing from act/ or observe/, nor anything that reaches outside the process or waits."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DECIDE = Path(__file__).parent.parent / "launcher" / "autoscaler" / "decide"
FORBIDDEN_MODULES = ("subprocess", "socket", "threading", "select", "urllib", "http")
FORBIDDEN_PACKAGES = ("launcher.autoscaler.act", "launcher.autoscaler.observe")


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every import in `path`; name is "" for `import module`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, alias.name) for alias in node.names]
    return out


def _calls(path: Path) -> set[str]:
    """Dotted names called in `path` (`time.sleep`, `os.system`, ...)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            out.add(f"{func.value.id}.{func.attr}")
    return out


MODULES = sorted(DECIDE.glob("*.py"))


def test_decide_has_its_modules() -> None:
    names = {p.stem for p in MODULES}
    assert {"planner", "choice", "node_states", "actions", "demand"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_decide_module_imports_no_effects(path: Path) -> None:
    for module, name in _imports(path):
        top = module.split(".")[0]
        assert top not in FORBIDDEN_MODULES, f"{path.name} imports {module}"
        assert not module.startswith(FORBIDDEN_PACKAGES), f"{path.name} imports {module}"
        if module == "launcher.autoscaler":
            assert name not in ("act", "observe"), f"{path.name} imports {name}"
        assert (module, name) != ("time", "sleep"), f"{path.name} imports time.sleep"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_decide_module_neither_sleeps_nor_reads_a_clock(path: Path) -> None:
    called = _calls(path)
    for call in ("time.sleep", "time.time", "time.monotonic", "os.system", "os.kill"):
        assert call not in called, f"{path.name} calls {call}"
