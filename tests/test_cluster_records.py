"""Cluster records (launcher/ledger/): runs observed and merged, node-hours and cost,
`list` and `cost-report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.config.loader import parse_config
from launcher.ledger.keeping import note_gone, note_listing
from launcher.ledger.record import (
    EXACT_GAP_S,
    ClusterRecord,
    ClusterState,
    Run,
    Seen,
    from_json,
    merge,
    observe,
    to_json,
    usage,
)
from launcher.ledger.report import cost_rows, list_row
from launcher.ledger.store import read_record, record_path, update_record
from launcher.providers.base import Node, NodeKind, NodeState
from tests.conftest import CliResult

T0 = 1_700_000_000.0
H = 3600.0


def _record() -> ClusterRecord:
    return ClusterRecord("c", "aws", "us-east-1", "c.yaml", "", ClusterState.UP, T0)


def _seen(node_id: str, launched: float, price: float | None = 0.1, spot: bool = False) -> Seen:
    return Seen(node_id, "worker", "w", launched, "m5.large", spot, price, True)


def test_a_node_runs_from_its_launch_until_it_is_seen_gone() -> None:
    record = observe(_record(), [_seen("i-1", T0 - 600)], T0)
    assert record.nodes["i-1"].runs == (Run(T0 - 600, T0),)
    record = observe(record, [_seen("i-1", T0 - 600)], T0 + H)
    record = observe(record, [], T0 + H + 60)  # seen a minute ago: it ended now
    (run,) = record.nodes["i-1"].runs
    assert run == Run(T0 - 600, T0 + H + 60, open=False, exact=True)
    ((row),) = usage(record, 0, T0 + 10 * H)
    assert row.hours == pytest.approx(1 + 660 / H) and row.cost == pytest.approx(row.hours * 0.1)
    assert not row.at_least


def test_a_node_gone_while_nobody_looked_counts_until_it_was_last_seen_at_least() -> None:
    record = observe(_record(), [_seen("i-1", T0)], T0 + H)
    record = observe(record, [], T0 + H + EXACT_GAP_S + 1)
    (run,) = record.nodes["i-1"].runs
    assert run.end == T0 + H and not run.exact
    (row,) = usage(record, 0, T0 + 10 * H)
    assert row.at_least and row.hours == pytest.approx(1.0)


def test_a_stopped_and_restarted_node_has_two_runs_and_a_window_cuts_them() -> None:
    record = observe(_record(), [_seen("i-1", T0)], T0 + H)
    record = observe(record, [], T0 + H + 10)  # stopped
    record = observe(record, [_seen("i-1", T0 + 3 * H)], T0 + 3 * H + 5)  # started again
    record = observe(record, [_seen("i-1", T0 + 3 * H)], T0 + 4 * H)
    assert [(r.start, r.end) for r in record.nodes["i-1"].runs] == [
        (T0, T0 + H + 10),
        (T0 + 3 * H, T0 + 4 * H),
    ]
    (row,) = usage(record, T0 + 3.5 * H, T0 + 10 * H)
    assert row.hours == pytest.approx(0.5)


def test_copies_merge_their_runs_and_the_later_state_wins() -> None:
    here = observe(_record(), [_seen("i-1", T0)], T0 + 60)  # this machine looked once
    head = observe(_record(), [_seen("i-1", T0), _seen("i-2", T0 + 100)], T0 + H)
    head = observe(head, [], T0 + H + 5)  # the head saw both go
    head = ClusterRecord(**{**head.__dict__, "state": ClusterState.GONE, "state_since": T0 + H})
    merged = merge(here, head)
    assert merged.state == ClusterState.GONE
    assert merged.nodes["i-1"].runs == (Run(T0, T0 + H + 5, open=False, exact=True),)
    assert set(merged.nodes) == {"i-1", "i-2"}
    assert from_json(json.loads(json.dumps(to_json(merged)))) == merged


def test_unknown_prices_are_unknown_and_free_machines_are_free() -> None:
    record = observe(_record(), [_seen("i-1", T0, price=None), _seen("i-2", T0)], T0 + H)
    row = list_row(record, T0 + H)
    assert row["per_hour_now_text"] == "unknown" and row["cost_so_far_text"] == "unknown"
    free = Seen("p-1", "head", "head", T0, "this machine", False, None, False)
    mine = observe(_record(), [free], T0 + H)
    row = list_row(mine, T0 + H)
    assert row["per_hour_now_text"] == "free" and row["cost_so_far_text"] == "free"
    (cluster,) = cost_rows([mine], 0, T0 + 2 * H)
    assert cluster["cost_text"] == "free" and cluster["node_hours"] == pytest.approx(1.0)


AWS = """\
cluster_name: rec
provider: {type: aws, region: us-east-1}
available_node_types:
  head: {node_config: {InstanceType: m5.large}, resources: {CPU: 0}, max_workers: 0}
  spot: {node_config: {InstanceType: m5.xlarge, InstanceMarketOptions: {MarketType: spot}}}
head_node_type: head
"""


def test_listings_keep_a_record_that_list_and_cost_report_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_runner: object
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "lh"))
    config = parse_config(AWS, str(tmp_path / "rec.yaml"))
    head = Node("i-h", NodeKind.HEAD, "head", "10.0.0.1", NodeState.RUNNING, created_at=T0)
    spot = Node("i-s", NodeKind.WORKER, "spot", "10.0.0.2", NodeState.RUNNING, created_at=T0)
    note_listing(config, [head, spot], config_text=AWS, now=T0 + 60)
    note_listing(config, [head, spot], now=T0 + 2 * H)
    record = read_record("rec")
    assert record is not None and record.config_text == AWS and record.region == "us-east-1"
    assert record.nodes["i-s"].spot and record.nodes["i-s"].price_per_hour == 0.07
    assert record.nodes["i-h"].price_per_hour == 0.096
    assert "price table of" in record.price_table
    note_gone(config, "taken down with `launcher down`", now=T0 + 2 * H + 30)
    record = read_record("rec")
    assert record is not None and record.state == ClusterState.GONE
    assert all(not n.running for n in record.nodes.values())
    run = cli_runner  # the CLI, on the same records
    assert callable(run)
    listed: CliResult = run("list", "--json")
    assert listed.exit_code == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["clusters"]
    assert row["state"] == "gone" and row["cost_so_far"] == pytest.approx(
        (0.096 + 0.07) * (2 + 30 / H), rel=1e-6
    )
    text: CliResult = run("list")
    assert "No cluster launched from this machine is up (1 gone" in text.stdout
    report: CliResult = run("cost-report", "--days", "100000", "--json")
    (cluster,) = json.loads(report.stdout)["clusters"]
    assert {(r["node_type"], r["lifecycle"]) for r in cluster["rows"]} == {
        ("head", "on-demand"),
        ("spot", "spot"),
    }
    shown: CliResult = run("cost-report", "--days", "100000")
    assert "m5.xlarge" in shown.stdout and "Prices: price table of" in shown.stdout
    bad: CliResult = run("cost-report", "--days", "-1")
    assert bad.exit_code == 2 and "-1" in bad.stderr


LOCAL = """\
cluster_name: rec-local
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
head_node_type: head
"""


def test_a_cluster_deleted_outside_the_launcher_shows_as_gone_after_a_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli_runner: object
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "lh"))
    config = parse_config(LOCAL, str(tmp_path / "rec.yaml"))
    head = Node("h-1", NodeKind.HEAD, "head", "127.0.0.2", NodeState.RUNNING, created_at=T0)
    note_listing(config, [head], config_text=LOCAL, now=T0)
    run = cli_runner
    assert callable(run)
    kept: CliResult = run("list", "--json")
    (row,) = json.loads(kept.stdout)["clusters"]
    assert row["state"] == "up" and row["per_hour_now_text"] == "free"
    refreshed: CliResult = run("list", "--refresh")
    assert refreshed.exit_code == 0, refreshed.stderr
    assert "taken down outside this machine's launcher" in refreshed.stdout
    record = read_record("rec-local")
    assert record is not None and record.state == ClusterState.GONE
    (run_,) = record.nodes["h-1"].runs
    assert not run_.open and not run_.exact  # nobody saw it go: counted until last seen


def test_a_node_stopped_and_started_while_nobody_looked_is_not_billed_in_between() -> None:
    record = observe(_record(), [_seen("i-1", T0)], T0 + H)  # seen running, then laptop closed
    record = observe(record, [_seen("i-1", T0 + 60 * H)], T0 + 61 * H)  # started again later
    assert [(r.start, r.end, r.exact) for r in record.nodes["i-1"].runs] == [
        (T0, T0 + H, False),
        (T0 + 60 * H, T0 + 61 * H, True),
    ]
    (row,) = usage(record, 0, T0 + 100 * H)
    assert row.hours == pytest.approx(2.0) and row.at_least


def test_a_record_this_version_cannot_read_is_kept_aside_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "lh"))
    path = record_path("rec")
    path.parent.mkdir(parents=True)
    path.write_text('{"name": "rec", "nodes": {"i-1": {"future_field": 1}}}')
    config = parse_config(AWS, str(tmp_path / "rec.yaml"))
    head = Node("i-h", NodeKind.HEAD, "head", "10.0.0.1", NodeState.RUNNING, created_at=T0)
    note_listing(config, [head], config_text=AWS, now=T0 + 60)
    (aside,) = path.parent.glob("rec.json.unreadable-*")
    assert "future_field" in aside.read_text()
    assert read_record("rec") is not None


def test_a_record_holding_the_config_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record keeps the whole config (credentials it names included): 0600 in 0700, and a
    directory an earlier version left open is closed."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    (tmp_path / "records").mkdir(mode=0o755)
    update_record("c", lambda _: _record())
    path = record_path("c")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.with_suffix(".lock").stat().st_mode & 0o077 == 0
