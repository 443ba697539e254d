"""The pure parts of bounding what runs on nodes: which bound a step gets, the head address a
`ray start` joins, the failure line, when a silence is said, and the process-id report a
remote command gives before its output."""

from __future__ import annotations

import pytest

from launcher.config.loader import parse_config
from launcher.runners.base import CommandResult
from launcher.runners.shell import PID_MARK, PidReport
from launcher.updater.bounds import (
    MIN_TIMEOUT_S,
    Bound,
    command_problem,
    joins_address,
    ray_start_bound,
    setup_bound,
)
from launcher.updater.silence import next_check_s, silence_due

BASE = (
    "cluster_name: c\nprovider: {type: localhost}\n"
    "available_node_types: {head: {node_config: {}, resources: {}, max_workers: 0}}\n"
    "head_node_type: head\n"
)


def test_setup_is_unbounded_by_default_and_ray_start_is_bounded_as_a_whole() -> None:
    config = parse_config(BASE, "c.yaml")
    assert setup_bound(config) == Bound(None, "metadata.launcher.command_timeout_s")
    assert setup_bound(config, 7).timeout_s == 7  # the caller's own limit wins
    start = ray_start_bound(config)
    assert (start.timeout_s, start.per_command) == (300, False)
    bounded = parse_config(
        BASE + "metadata: {launcher: {command_timeout_s: 60, ray_start_timeout_s: 20}}\n", "c"
    )
    assert setup_bound(bounded).timeout_s == 60
    whole = ray_start_bound(bounded)
    deadline = whole.deadline(100.0)
    assert deadline == 120.0
    assert whole.timeout_for_next(105.0, deadline) == 15.0  # what is left of the step
    assert whole.timeout_for_next(125.0, deadline) == MIN_TIMEOUT_S
    each = setup_bound(bounded)
    assert each.deadline(100.0) is None and each.timeout_for_next(500.0, None) == 60


@pytest.mark.parametrize(
    ("command", "joined"),
    [
        ("ray start --address=$RAY_HEAD_IP:6379 --block", "10.0.0.1:6379"),
        ("ulimit -n 65536; ray start --address ${RAY_HEAD_IP}:1234", "10.0.0.1:1234"),
        ("ray start --address=$UNKNOWN:6379", "$UNKNOWN:6379"),
        ("ray start --head --port=6379", None),
        ("ray stop", None),
        ("echo --address=x", None),
    ],
)
def test_the_head_address_a_ray_start_joins(command: str, joined: str | None) -> None:
    assert joins_address(command, {"RAY_HEAD_IP": "10.0.0.1"}) == joined


def test_failure_lines() -> None:
    start = Bound(30, "metadata.launcher.ray_start_timeout_s", per_command=False)
    stopped = CommandResult(124, "(stopped after 30 s)", timed_out=True)
    assert command_problem("ray start --address=h:1", stopped, start, "h:1") == (
        "Ray did not join the head at h:1 within 30 s (metadata.launcher.ray_start_timeout_s); "
        "`ray start --address=h:1` was stopped. Check that Ray runs on the head and that this "
        "node reaches that address"
    )
    setup = Bound(5, "metadata.launcher.command_timeout_s")
    assert command_problem("pip install x", stopped, setup, None) == (
        "`pip install x` did not finish within 5 s (metadata.launcher.command_timeout_s) and "
        "was stopped"
    )
    exited = CommandResult(1, "connecting\nno GCS at h:1\n")
    assert command_problem("ray start --address=h:1", exited, start, "h:1") == (
        "`ray start --address=h:1` exited with 1 (joining the head at h:1): no GCS at h:1"
    )
    # A command's own exit code 124 is not a timeout.
    assert "exited with 124" in command_problem("x", CommandResult(124, ""), setup, None)


def test_a_silence_is_said_once_until_output_comes_again() -> None:
    assert not silence_due(last_output=0, now=9.9, after_s=10, warned=False)
    assert silence_due(last_output=0, now=10, after_s=10, warned=False)
    assert not silence_due(last_output=0, now=50, after_s=10, warned=True)
    assert next_check_s(last_output=0, now=4, after_s=10, warned=False) == 6
    assert next_check_s(last_output=0, now=50, after_s=10, warned=True) == 10


def test_the_process_report_is_found_after_what_an_rc_file_printed() -> None:
    report = PidReport()
    data = b"welcome from .bashrc\n" + PID_MARK + b"4242\nfirst\nsecond"
    out = b"".join(report.feed(data[i : i + 5]) for i in range(0, len(data), 5))
    assert (report.reported, report.pid) == (True, 4242)
    assert out + report.finish() == b"welcome from .bashrc\nfirst\nsecond"


def test_output_without_a_report_is_all_passed_on() -> None:
    report = PidReport()
    out = report.feed(b"one\ntwo\npart")
    assert out == b"one\ntwo\n" and out + report.finish() == b"one\ntwo\npart"
    assert (report.reported, report.pid) == (False, None)
