"""The autoscaler daemon survives any exception from one round (issue 25): it logs it with its
traceback, counts it (Ray's update_loop_exceptions) where `launcher status` shows it, and goes
on to the next round."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from launcher.autoscaler.daemon import Daemon
from launcher.autoscaler.spec import STATE_FILE
from launcher.cli.render_status import render_autoscaler
from launcher.cluster.ops import AutoscalerState
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import ProviderError
from launcher.events import Message
from launcher.providers.base import Node
from launcher.testing import MemoryProvider

CONFIG = """
cluster_name: sturdy
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  w: {node_config: {}, resources: {CPU: 1}, max_workers: 2}
head_node_type: head
"""


class _Watched(MemoryProvider):
    """Sets `listed_well` once a listing succeeds (after the failures set for it)."""

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self.listed_well = threading.Event()

    def nodes(self) -> list[Node]:
        listed = super().nodes()
        self.listed_well.set()
        return listed


def _daemon(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: Sequence[Exception]
) -> tuple[Daemon, _Watched]:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = parse_config(CONFIG, "sturdy.yaml")
    provider = _Watched(config)
    for error in errors:  # the listing fails with each in turn, then succeeds
        provider.fail("nodes", error, times=1)
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
    assert provider.listed_well.wait(30), "the daemon stopped at the first exception"
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
    # No min_workers and no demand: nothing was launched, terminated or tagged.
    assert provider.calls_of("create_nodes", "terminate_nodes", "stop_nodes", "set_tags") == []


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
