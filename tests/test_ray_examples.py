"""Ray's own published example configs are our compatibility suite: all validate and plan."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import RAY_EXAMPLES, run_cli

PROVIDER_DIRS = ("aws", "gcp", "local", "kubernetes", "fake_multi_node")


def _examples(include_legacy: bool) -> list[Path]:
    found: list[Path] = []
    for directory in PROVIDER_DIRS:
        found += sorted((RAY_EXAMPLES / directory).glob("example*.yaml"))
        if include_legacy:
            found += sorted((RAY_EXAMPLES / directory / "legacy").glob("example*.yaml"))
    return found


def test_the_examples_are_there() -> None:
    # 22 published examples under the five provider folders; guard against a silent empty run.
    assert len(_examples(include_legacy=False)) >= 20


@pytest.mark.parametrize(
    "path", _examples(include_legacy=False), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_example_validates_and_plans(path: Path) -> None:
    result = run_cli("validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.exception is None
    assert "valid" in result.stdout
    plan = run_cli("plan", str(path))
    assert plan.exit_code == 0, plan.stderr
    assert "Head node" in plan.stdout
    as_json = run_cli("plan", "--json", str(path))
    assert as_json.exit_code == 0
    data = json.loads(as_json.stdout)
    assert data["nodes"][0]["role"] == "head"


@pytest.mark.parametrize(
    "path",
    [p for p in _examples(include_legacy=True) if p.parent.name == "legacy"],
    ids=lambda p: f"{p.parent.parent.name}/legacy/{p.name}",
)
def test_older_examples_validate_and_plan(path: Path, fake_home: Path) -> None:
    # One older example names ~/.ssh/id_rsa, which this machine lacks: a warning, since
    # the config may be checked elsewhere than where it runs.
    result = run_cli("validate", str(path))
    assert result.exit_code == 0, result.stderr
    if re.search(r"^\s*ssh_private_key: ~/.ssh/id_rsa", path.read_text(), re.MULTILINE):
        assert "warning: auth.ssh_private_key: file ~/.ssh/id_rsa is not on this machine" in (
            result.stderr
        )
    assert run_cli("plan", str(path)).exit_code == 0


def test_legacy_head_and_worker_nodes_become_node_types() -> None:
    result = run_cli("plan", "--json", str(RAY_EXAMPLES / "gcp" / "example-full.yaml"))
    data = json.loads(result.stdout)
    head, worker = data["nodes"]
    assert head["machine"] == "n1-standard-2"
    assert worker["market"] == "spot"  # worker_nodes.scheduling preemptible: true
    assert worker["max_count"] == 2 and worker["count_at_start"] == 0


def test_local_example_placeholders_mean_every_listed_machine() -> None:
    result = run_cli("plan", "--json", str(RAY_EXAMPLES / "local" / "example-full.yaml"))
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    worker = data["nodes"][1]
    assert worker["count_at_start"] == 3 == worker["max_count"]
    assert "TYPICALLY_THE_NUMBER_OF_WORKER_IPS" in result.stdout  # reported as a warning
