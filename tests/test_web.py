"""The launcher's page (launcher/web/): its model on generated records and timelines, the
collector (a cluster that does not answer is shown unreachable, not waited on), the local
copy of a head's timeline, and the server through aiohttp's test client (token, pages,
filters, a gone cluster)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from launcher.cluster.ops import AutoscalerState
from launcher.ledger.record import ClusterState, all_gone
from launcher.ledger.store import update_record
from launcher.providers.base import TAG_STATUS, Node, NodeKind, NodeState
from launcher.testing import web_data
from launcher.web import history, model
from launcher.web.collector import Collector
from launcher.web.server import make_app

NOW = time.time()  # the server computes ages and costs at its own now
TOKEN = "secret-token"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _save(name: str, nodes: int, state: str = ClusterState.UP, decisions: int = 0) -> None:
    record = web_data.record(name, nodes, NOW, state=state)
    update_record(name, lambda _: record)
    if decisions:
        path = history.local_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(web_data.timeline(decisions, NOW, samples=100)) + "\n")


def _live(node_ids: list[str]) -> model.Live:
    nodes = tuple(
        Node(i, NodeKind.WORKER, "cpu", f"127.0.0.{k + 2}", NodeState.RUNNING, created_at=NOW - 60)
        for k, i in enumerate(node_ids)
    )
    return model.Live(nodes=nodes, polled_at=NOW)


# -- the model -------------------------------------------------------------------------------
def test_decisions_newest_first_filtered_by_action_and_text_a_page_at_a_time() -> None:
    events = history.parse_events("\n".join(web_data.timeline(10_000, NOW, samples=10)))
    rows = model.decision_rows(events, None)
    assert len(rows) == 10_000
    assert rows[0]["t"] > rows[-1]["t"]
    view = model.decisions_view(rows, "launch", "", 100, 50)
    assert view["total"] == 2000 and len(view["items"]) == 50 and view["offset"] == 100
    assert {r["action"] for r in view["items"]} == {"launch"}
    assert view["actions"]["terminate"] == 2000
    text = model.decisions_view(rows, "", "GPU-SPOT: 3 pending", 0, 500)
    assert text["total"] > 0
    assert all("gpu-spot: 3 pending" in r["reason"] for r in text["items"])
    assert model.page(rows, 0, 10**6)["limit"] == model.MAX_PAGE


def test_series_thins_long_histories_and_keeps_the_last_sample() -> None:
    events = history.parse_events("\n".join(web_data.timeline(0, NOW, samples=5000)))
    plot = model.series(events, None, max_points=1000)
    assert plot["source"] == "timeline"
    assert len(plot["t"]) == 1000 and plot["t"][-1] == events[-1]["t"]
    assert set(plot["nodes"]) == set(web_data.TYPES) and set(plot["pending"]) == {"CPU", "GPU"}
    assert all(len(v) == 1000 for v in [*plot["nodes"].values(), *plot["pending"].values()])


def test_without_a_timeline_the_plot_is_what_the_page_polled() -> None:
    live = _live(["a", "b"])
    sample = model.sample_of(live.nodes, None, NOW)
    assert sample["nodes"] == {"cpu": {"running": 0, "launching": 2}}  # not set up yet
    plot = model.series([], model.Live(seen=(sample,)))
    assert plot["source"] == "page" and plot["nodes"] == {"cpu": [2.0]}
    # Counted as the head's own samples count them: a taken-back, dead or stopped node, or
    # one whose setup failed, is not on its way.
    up = {TAG_STATUS: "up-to-date"}
    nodes = [
        Node("r", NodeKind.WORKER, "cpu", "127.0.0.2", NodeState.RUNNING, up),
        Node("p", NodeKind.WORKER, "cpu", "127.0.0.3", NodeState.PREEMPTED, up),
        Node("d", NodeKind.WORKER, "cpu", "127.0.0.4", NodeState.DEAD, up),
        Node("s", NodeKind.WORKER, "cpu", "127.0.0.5", NodeState.STOPPED, up),
        Node(
            "f",
            NodeKind.WORKER,
            "cpu",
            "127.0.0.6",
            NodeState.RUNNING,
            {TAG_STATUS: "update-failed"},
        ),
        Node("l", NodeKind.WORKER, "cpu", None, NodeState.PENDING),
    ]
    assert model.sample_of(nodes, None, NOW)["nodes"] == {"cpu": {"running": 1, "launching": 1}}


def test_nodes_join_the_poll_with_the_record_and_keep_the_gone_ones() -> None:
    record = web_data.record("c", 20, NOW)
    live = _live(["i-000001", "i-000002", "new-node"])
    rows = model.node_rows(record, live, NOW)
    by_id = {r["id"]: r for r in rows}
    assert by_id["i-000001"]["address"] == "127.0.0.2" and by_id["i-000001"]["per_hour"] == 0.192
    assert by_id["new-node"]["spot"] is None  # not recorded yet
    assert by_id["i-000009"]["state"] == "gone" and by_id["i-000009"]["ended_at"] is not None
    # Unlisted nodes the record still holds running are gone once the poll answered.
    assert by_id["i-000003"]["state"] == "gone"
    assert [r["state"] == "gone" for r in rows] == sorted(r["state"] == "gone" for r in rows)
    assert len(model.filter_rows(rows, "127.0.0.3", ("address",))) == 1
    # A stopped cluster's nodes, taken down with it, are stopped (kept), not gone.
    stopped = all_gone(record, NOW, ClusterState.STOPPED)
    states = {r["id"]: r["state"] for r in model.node_rows(stopped, None, NOW)}
    assert states["i-000001"] == "stopped" and states["i-000009"] == "gone"


def test_a_cluster_whose_poll_failed_is_unreachable_and_a_gone_one_gone() -> None:
    up = web_data.record("up", 3, NOW)
    gone = web_data.record("gone", 3, NOW, state=ClusterState.GONE)
    rows = model.cluster_rows([gone, up], {"up": model.Live(error="timed out")}, NOW)
    assert [(r["name"], r["shown_state"]) for r in rows] == [
        ("up", "unreachable"),
        ("gone", "gone"),
    ]
    assert rows[1]["cost_so_far"] > 0


# -- the local copy of the head's timeline ---------------------------------------------------
def test_local_timeline_reads_only_whole_appended_lines(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    lines = web_data.timeline(3, NOW, samples=2)
    path.write_text(lines[0] + "\n" + lines[1][:10])
    timeline = history.LocalTimeline(path)
    assert timeline.refresh() and len(timeline.events) == 1
    with path.open("a") as f:
        f.write(lines[1][10:] + "\n" + "\n".join(lines[2:]) + "\n")
    assert timeline.refresh() and len(timeline.events) == len(lines)
    assert not timeline.refresh()


def test_keep_appends_and_remembers_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "c" / "timeline.jsonl"
    lines = web_data.timeline(1, NOW, samples=1)[:2]  # a sample, a decision
    first, second = (f"{line}\n".encode() for line in lines)
    assert history.keep(path, 0, first) == len(first)
    assert history.keep(path, len(first), second) == len(second)
    assert path.with_suffix(".offset").read_text() == str(len(first) + len(second))
    assert [e["kind"] for e in history.parse_events(path.read_text())] == ["sample", "decision"]
    assert history.whole_lines(b'{"a":1}\n{"b"') == b'{"a":1}\n'


def _head(tmp_path: Path) -> Any:
    """A head whose runner runs here, its home a directory of the test's."""
    from launcher.runners.local import LocalProcessRunner

    home = tmp_path / "head"
    (home / ".launcher" / "head").mkdir(parents=True)
    runner = LocalProcessRunner(home, {}, tmp_path / "head.log")
    session = type("Session", (), {"daemon_runner": runner, "env": {}})()
    return session, home / ".launcher" / "head" / "timeline.jsonl"


def test_fetch_copies_whole_new_lines_and_follows_a_rotation(home: Path, tmp_path: Path) -> None:
    session, remote = _head(tmp_path)
    lines = web_data.timeline(60, NOW, samples=5)  # 5 samples, 60 decisions, ...
    assert history.fetch(session, "c") == 0  # nothing written yet
    remote.write_text("\n".join(lines[:10]) + "\n" + lines[10][:7])  # a torn last line
    history.fetch(session, "c")
    copy = history.LocalTimeline(history.local_path("c"))
    copy.refresh()
    assert len(copy.events) == 10
    with remote.open("a") as f:
        f.write(lines[10][7:] + "\n" + "\n".join(lines[11:20]) + "\n")
    history.fetch(session, "c")
    copy.refresh()
    assert len(copy.events) == 20
    # The writer rotates: the rest of the old file, then the new one from its start.
    with remote.open("a") as f:
        f.write("\n".join(lines[20:25]) + "\n")
    remote.replace(remote.with_name("timeline.1.jsonl"))
    remote.write_text("\n".join(lines[25:27]) + "\n")
    history.fetch(session, "c")
    copy.refresh()
    assert [e["t"] for e in copy.events] == [json.loads(x)["t"] for x in lines[:27]]
    assert not list(remote.parent.glob("*.part"))  # the head's slice is removed
    # Nothing new since: one command on the head, nothing copied, nothing left there.
    runner = session.daemon_runner
    calls: list[str] = []
    run, get = runner.run, runner.get
    runner.run = lambda *a, **k: calls.append("run") or run(*a, **k)
    runner.get = lambda *a, **k: calls.append("get") or get(*a, **k)
    assert history.fetch(session, "c") == 0
    assert calls == ["run"] and not list(remote.parent.glob("*.part"))
    copy.refresh()
    assert len(copy.events) == 27


def test_runs_show_their_recoveries() -> None:
    from launcher.runs.model import Attempt, Recovery, Run, RunState

    run = Run(
        "r1",
        "c",
        "/c.yaml",
        "tune.py",
        (),
        NOW - 600,
        state=RunState.RUNNING,
        attempts=(Attempt(1, "h1", NOW - 600, NOW - 300), Attempt(2, "h2", NOW - 290)),
        recoveries=(
            Recovery(
                "h1", "head reclaimed", NOW - 300, "h2", "head", ("w1",), {"driver_started": 8.5}
            ),
        ),
    )
    (row,) = model.run_rows([run], NOW)
    assert row["attempts"] == 2 and row["state"].startswith("running")
    assert row["recoveries"] == [
        {
            "lost_head": "h1",
            "why": "head reclaimed",
            "seen_at": NOW - 300,
            "new_head": "h2",
            "adopted": 1,
            "took_s": 8.5,
        }
    ]


# -- the collector ---------------------------------------------------------------------------
def test_a_cluster_that_does_not_answer_is_unreachable_without_holding_the_others(
    home: Path,
) -> None:
    _save("slow", 2)
    _save("fast", 2)
    release = threading.Event()

    def probe(record: Any) -> model.Live:
        if record.name == "slow":
            release.wait(30)
            raise TimeoutError("head did not answer")
        return _live(["i-000001"])

    clock = [NOW]
    collector = Collector(probe=probe, timeout=10, clock=lambda: clock[0])
    try:
        collector.tick()  # starts both polls, returns at once
        _wait(collector._clusters["fast"].poll.done)  # type: ignore[union-attr]
        clock[0] += 11
        collector.tick()
        records, live = collector.everything()
        states = {r["name"]: r["shown_state"] for r in model.cluster_rows(records, live, NOW)}
        assert states == {"fast": "up", "slow": "unreachable"}
        assert "no answer in 11 s" in live["slow"].error
        release.set()
        _wait(collector._clusters["slow"].poll.done)  # type: ignore[union-attr]
        collector.tick()
        assert collector.everything()[1]["slow"].error == "head did not answer"
    finally:
        release.set()
        collector.stop()


def test_a_poll_that_answers_after_the_cluster_went_shows_no_nodes(home: Path) -> None:
    _save("late", 3)
    release = threading.Event()

    def probe(record: Any) -> model.Live:
        release.wait(30)
        state = AutoscalerState.parse(
            '{"pending": [{"resources": {"CPU": 2}, "count": 1}], "placement_groups": [], '
            '"requested": [], "infeasible": [], "decisions": []}'
        )
        assert state is not None
        # Listed, and asked for, before `down` took it.
        return dataclasses.replace(_live(["i-000001"]), autoscaler=state)

    collector = Collector(probe=probe)
    try:
        collector.tick()
        _save("late", 3, state=ClusterState.GONE)
        release.set()
        _wait(collector._clusters["late"].poll.done)  # type: ignore[union-attr]
        collector.tick()
        record, live, _ = collector.snapshot("late") or (None, None, None)
        assert record is not None and model.shown_state(record, live) == "gone"
        assert {n["state"] for n in model.node_rows(record, live, NOW)} == {"gone"}
        assert live is not None and live.autoscaler is None  # no pending demand shown
    finally:
        release.set()
        collector.stop()


def _wait(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- the server ------------------------------------------------------------------------------
@pytest.fixture
def served(
    home: Path,
) -> Iterator[Callable[[Callable[[TestClient[Any, Any]], Awaitable[None]]], None]]:
    _save("big", 1000, decisions=10_000)
    _save("old", 5, state=ClusterState.GONE)
    collector = Collector(probe=lambda r: _live(["i-000001", "i-000002"]))
    collector.tick()
    _wait(lambda: all(c.poll is None or c.poll.done() for c in collector._clusters.values()))
    collector.tick()

    def run(body: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
        async def main() -> None:
            async with TestClient(TestServer(make_app(collector, TOKEN))) as client:
                await body(client)

        asyncio.run(main())

    yield run
    collector.stop()


async def _get(client: TestClient[Any, Any], path: str, **params: Any) -> Any:
    response = await client.get(path, params={"token": TOKEN, **params})
    assert response.status == 200, await response.text()
    return json.loads(await response.text())


def test_every_request_needs_the_token(served: Any) -> None:
    async def body(client: TestClient[Any, Any]) -> None:
        for path in ("/", "/api/clusters", "/api/clusters/big/nodes", "/static/app.js"):
            assert (await client.get(path)).status == 403
            assert (await client.get(path, params={"token": "wrong"})).status == 403
        assert (await client.get("/", params={"token": TOKEN})).status == 200
        page = await client.get("/static/uPlot.iife.min.js", headers={"X-Token": TOKEN})
        assert page.status == 200 and "uPlot" in await page.text()
        assert (await client.get("/static/..%2Fserver.py", params={"token": TOKEN})).status == 404

    served(body)


def test_clusters_nodes_and_decisions_come_a_page_at_a_time(served: Any) -> None:
    async def body(client: TestClient[Any, Any]) -> None:
        listed = await _get(client, "/api/clusters")
        states = {c["name"]: c["shown_state"] for c in listed["clusters"]}
        assert states == {"big": "up", "old": "gone"}
        nodes = await _get(client, "/api/clusters/big/nodes", offset=100, limit=50)
        assert nodes["total"] == 1000 and len(nodes["items"]) == 50
        assert nodes["items"][0]["state"] == "gone"  # the two listed come first
        found = await _get(client, "/api/clusters/big/nodes", q="127.0.0.3")
        assert [n["id"] for n in found["items"]] == ["i-000002"]
        decisions = await _get(
            client, "/api/clusters/big/decisions", action="fallback", q="cpu-spot"
        )
        assert decisions["total"] == 666 and len(decisions["items"]) == 100
        reclaims = await _get(client, "/api/clusters/big/reclaims", limit=5)
        assert reclaims["total"] == 250 and reclaims["items"][0]["kind"] in ("reclaim", "failure")
        plot = await _get(client, "/api/clusters/big/series")
        assert len(plot["t"]) == 100 and plot["source"] == "timeline"
        detail = (await _get(client, "/api/clusters/big"))["cluster"]
        assert detail["decisions"] == 10_000 and detail["reclaims"] == 200
        assert (await client.get("/api/clusters/nope", params={"token": TOKEN})).status == 404
        bad = await client.get("/api/clusters/big/nodes", params={"token": TOKEN, "offset": "x"})
        assert bad.status == 400

    served(body)


def test_a_gone_cluster_keeps_its_nodes_cost_and_no_poll(served: Any) -> None:
    async def body(client: TestClient[Any, Any]) -> None:
        detail = (await _get(client, "/api/clusters/old"))["cluster"]
        assert detail["shown_state"] == "gone" and detail["cost_so_far"] > 0
        assert detail["per_hour_now_text"] == "-"
        nodes = await _get(client, "/api/clusters/old/nodes")
        assert {n["state"] for n in nodes["items"]} == {"gone"}
        assert (await _get(client, "/api/clusters/old/runs"))["runs"] == []

    served(body)


# -- the command -----------------------------------------------------------------------------
def test_ray_dashboard_flags_need_a_cluster(cli_runner: Callable[..., Any]) -> None:
    result = cli_runner("dashboard", "--remote-port", "8265")
    assert result.exit_code == 2 and "need CLUSTER.yaml" in result.stderr
    result = cli_runner("dashboard", "cluster.yaml", "-p", "0")
    assert result.exit_code == 2 and "-p 0" in result.stderr


def test_a_port_in_use_is_one_line(
    cli_runner: Callable[..., Any], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.setattr("launcher.web.collector.Collector.start", lambda self: None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli_runner("dashboard", "--no-browser", "--port", str(port))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_runs_are_read_at_most_every_runs_every_s() -> None:
    from launcher.config.loader import parse_config
    from launcher.web import collector

    config = parse_config("cluster_name: runsread\nprovider: {type: localhost}\n", "inline")
    reads: list[int] = []

    def read() -> tuple[Any, ...]:
        reads.append(1)
        return ()

    kept = collector.RunsKept()
    kept.of(config, read)
    kept.of(config, read)
    assert len(reads) == 1
