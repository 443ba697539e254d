"""The autoscaler daemon survives any exception from one round (issue 25): it logs it with its
traceback, counts it (Ray's update_loop_exceptions) where `launcher status` shows it, and goes
on to the next round."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import pytest
from rich.console import Console

from launcher.autoscaler.daemon import Daemon
from launcher.autoscaler.spec import STATE_FILE
from launcher.cli.render_status import render_autoscaler
from launcher.cluster.ops import AutoscalerState
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import ProviderError
from launcher.events import Message
from launcher.providers.base import Node, NodeKind, NodeProvider
from launcher.runners.base import CommandRunner

CONFIG = """
cluster_name: sturdy
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  w: {node_config: {}, resources: {CPU: 1}, max_workers: 2}
head_node_type: head
"""


class _Flaky(NodeProvider):
    """No nodes; the listing fails with each error in `errors` in turn, then succeeds."""

    def __init__(self, config: ClusterConfig, errors: Sequence[Exception]) -> None:
        super().__init__(config)
        self.errors = list(errors)
        self.listed = 0
        self.after_errors = threading.Event()

    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        return []

    def nodes(self) -> list[Node]:
        self.listed += 1
        if self.errors:
            raise self.errors.pop(0)
        self.after_errors.set()
        return []

    def create_nodes(
        self,
        node_type: NodeType,
        kind: NodeKind,
        count: int,
        tags: Mapping[str, str],
        avoid_zones: Collection[str] = (),
        request_id: str | None = None,
    ) -> list[Node]:
        raise AssertionError("nothing is launched: no min_workers and no demand")

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        raise AssertionError("there is nothing to terminate")

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        raise AssertionError("there is no node to tag")

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        raise AssertionError("there is no node to run commands on")


def _daemon(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: Sequence[Exception]
) -> tuple[Daemon, _Flaky]:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(CONFIG, "sturdy.yaml")
    provider = _Flaky(config, errors)
    return Daemon(provider, config, interval_s=0.01), provider


def _state() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(Path(STATE_FILE).expanduser().read_text())
    return loaded


def test_a_round_that_raises_anything_is_logged_counted_and_survived(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bug = ZeroDivisionError("a bug met in one state of the cluster")
    daemon, provider = _daemon(monkeypatch, tmp_path, [bug, ProviderError("API down")])
    runner = threading.Thread(target=daemon.run, daemon=True)
    runner.start()
    assert provider.after_errors.wait(30), "the daemon stopped at the first exception"
    daemon.stopping.set()
    daemon.wake.set()
    runner.join(30)
    assert not runner.is_alive()
    log = capsys.readouterr().out
    assert "Traceback (most recent call last)" in log
    assert "ZeroDivisionError: a bug met in one state of the cluster" in log
    assert "error: API down" in log  # our own errors: one line, as before
    assert log.rstrip().endswith("autoscaler stopped")
    state = _state()
    assert state["update_loop_exceptions"] == 2
    last = state["last_loop_exception"]
    assert isinstance(last, dict) and last["error"] == "ProviderError: API down"


def test_status_shows_the_failed_rounds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    daemon, _ = _daemon(monkeypatch, tmp_path, [KeyError("node_type")])
    daemon.round()  # the first round fails before it has written any state
    parsed = AutoscalerState.parse(Path(STATE_FILE).expanduser().read_text())
    assert parsed is not None and parsed.raw["update_loop_exceptions"] == 1
    console = Console(record=True, width=200)
    render_autoscaler(console, parsed)
    text = console.export_text()
    assert "Autoscaler rounds failed: 1, the last at " in text
    assert "KeyError: 'node_type'" in text
    daemon.round()  # a good round keeps the count
    assert _state()["update_loop_exceptions"] == 1
    healthy = AutoscalerState.parse(json.dumps({**_state(), "update_loop_exceptions": 0}))
    assert healthy is not None
    quiet = Console(record=True, width=200)
    render_autoscaler(quiet, healthy)
    assert "failed" not in quiet.export_text()


def test_an_updaters_warning_reaches_the_autoscaler_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A setup command silent for minutes on a worker the autoscaler sets up is said in its
    log (`launcher monitor`), not only in the node's own log."""
    daemon, _ = _daemon(monkeypatch, tmp_path, [])
    daemon._on_event(Message("w-1: `pip install x` has printed nothing for 300 s", "warning"))
    daemon._on_event(Message("an info line the monitor does not need"))
    log = capsys.readouterr().out
    assert "warning: w-1: `pip install x` has printed nothing for 300 s" in log
    assert "info line" not in log


def test_a_bug_met_every_round_is_traced_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log grew by a whole traceback every second for a bug met every round."""
    daemon, _ = _daemon(monkeypatch, tmp_path, [])

    def broken() -> None:
        raise ZeroDivisionError("met every round")

    monkeypatch.setattr(daemon, "tick", broken)
    for _ in range(3):
        daemon.round()
    log = capsys.readouterr().out
    assert log.count("Traceback (most recent call last)") == 1
    assert log.count("a round failed again (") == 2
    assert daemon.loop_exceptions == 3
