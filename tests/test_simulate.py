"""`launcher simulate`: the planner replayed on a trace with a simulated cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult

Write = Callable[..., Path]
Run = Callable[..., CliResult]

CONFIG = """\
cluster_name: sim
max_workers: 4
idle_timeout_minutes: 1
provider: {type: aws, region: us-east-1}
available_node_types:
  head: {node_config: {InstanceType: m5.large}, max_workers: 0}
  cpu: {node_config: {InstanceType: m5.xlarge}, max_workers: 4}
  spot: {node_config: {InstanceType: m5.xlarge, InstanceMarketOptions: {MarketType: spot}},
         max_workers: 2, resources: {CPU: 4, spotty: 1}}
head_node_type: head
"""


def _simulate(write_config: Write, cli_runner: Run, trace: str, *extra: str) -> dict[str, object]:
    config = write_config(CONFIG)
    trace_path = write_config(trace, "trace.jsonl")
    result = cli_runner("simulate", str(config), "--trace", str(trace_path), "--json", *extra)
    assert result.exit_code == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_tasks_beyond_the_head_launch_workers_and_all_run(
    write_config: Write, cli_runner: Run
) -> None:
    trace = '{"t": 0, "resources": {"CPU": 1}, "count": 16, "duration_s": 60}\n'
    report = _simulate(write_config, cli_runner, trace, "--launch-delay-s", "30")
    assert report["tasks_total"] == 16 and report["tasks_never_placed"] == 0
    # The head (m5.large, 2 CPUs) takes 2 at once; 14 wait for workers of 4 CPUs: 4 launch.
    assert report["peak_nodes"] == 5
    assert report["wait_p50_s"] == 30 and report["wait_max_s"] == 30
    hours = report["node_hours"]
    # The cheaper spot type (2 at most) is used first, then on-demand for the rest.
    assert isinstance(hours, dict) and set(hours) == {"head", "cpu", "spot"}
    assert report["total_cost"] is not None and report["planner_ms_max"] >= 0


def test_placement_group_that_cannot_fit_is_never_placed(
    write_config: Write, cli_runner: Run
) -> None:
    trace = (
        '{"t": 0, "placement_group": {"strategy": "STRICT_SPREAD", "bundles": '
        '[{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}]}, '
        '"duration_s": 10}\n'
        '{"t": 0, "resources": {"CPU": 99}, "duration_s": 10}\n'
    )
    report = _simulate(write_config, cli_runner, trace)
    assert report["tasks_never_placed"] == 2  # 6 distinct nodes > head + 4 workers; CPU 99


def test_spot_preemptions_requeue_work_that_still_finishes(
    write_config: Write, cli_runner: Run
) -> None:
    trace = '{"t": 0, "resources": {"spotty": 1}, "count": 4, "duration_s": 1800}\n'
    report = _simulate(
        write_config,
        cli_runner,
        trace,
        "--preempt-rate",
        "3",
        "--launch-delay-s",
        "10",
        "--seed",
        "7",
    )
    assert isinstance(report["preemptions"], int) and report["preemptions"] > 0
    assert report["tasks_never_placed"] == 0
    wait_max = report["wait_max_s"]
    assert isinstance(wait_max, float | int) and wait_max > 10  # some work waited again


def test_bad_trace_line_is_named(write_config: Write, cli_runner: Run) -> None:
    config = write_config(CONFIG)
    trace = write_config(
        '{"t": 0, "resources": {"CPU": 1}, "duration_s": 5}\n{"t": 1}\n', "trace.jsonl"
    )
    result = cli_runner("simulate", str(config), "--trace", str(trace))
    assert result.exit_code == 2
    assert "trace.jsonl:2:" in result.stderr and "duration_s" in result.stderr
