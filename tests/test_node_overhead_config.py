"""`metadata.launcher.node_overhead`: the config chooses between the cheapest plan and
fewer, bigger nodes (the planner's Settings.node_overhead); checked by the schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.autoscaler.decide.plan_mix import NODE_OVERHEAD
from launcher.autoscaler.decide.view import planner_settings
from launcher.config.loader import parse_config
from launcher.errors import LauncherError
from launcher.pricing import load_prices
from launcher.providers.registry import SPECS
from tests.cluster_helpers import cluster_config, run


def _config(extra: str) -> str:
    return cluster_config("overhead", extra=extra)


def test_the_config_sets_the_planner_s_node_overhead_and_the_default_stays() -> None:
    spec, prices = SPECS["localhost"], load_prices()
    unset = parse_config(_config(""), "c.yaml")
    assert planner_settings(unset, spec, prices).node_overhead == NODE_OVERHEAD
    cheapest = parse_config(_config("metadata: {launcher: {node_overhead: 0}}\n"), "c.yaml")
    assert cheapest.node_overhead == 0.0
    assert planner_settings(cheapest, spec, prices).node_overhead == 0.0


def test_a_negative_node_overhead_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(LauncherError):
        parse_config(_config("metadata: {launcher: {node_overhead: -1}}\n"), "c.yaml")
    path = tmp_path / "c.yaml"
    path.write_text(_config("metadata: {launcher: {node_overhead: many}}\n"))
    result = run("plan", str(path), timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "node_overhead" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
