"""The launcher's page (`launcher dashboard` without a cluster) at scale: a cluster of 1,000
nodes with a day of history holding 10,000 decisions (generated records and timeline,
launcher/testing/web_data.py), against a small one (10 nodes, 100 decisions) measured in the
same run as the baseline.

- JSON endpoints: the server's time per request (over HTTP on 127.0.0.1, a page of 100
  rows), the first after a change (the views are built again) and the next ones (cached).
- Page load: headless Debian chromium (Playwright), from navigation to the cluster's list,
  plot, nodes, decisions and reclaims rendered.
- Update: 100 new decisions and a sample appended to the cluster's timeline; the time the
  page spends fetching and rendering once it sees the change (`updateMs`), and the time
  from the write until the page shows the newest decision (which includes the collector's
  and the page's polling intervals: 0.5 s and 2 s here).

    .venv/bin/python bench/bench_web.py [--repeats 5] [--screenshot docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import show_time

CHROMIUM = "/usr/bin/chromium"
SCALES = {"small": (10, 100), "big": (1000, 10_000)}


def _setup(home: Path) -> None:
    os.environ["LAUNCHER_HOME"] = str(home)
    from launcher.ledger.store import update_record
    from launcher.testing import web_data
    from launcher.web import history

    now = time.time()
    for name, (nodes, decisions) in SCALES.items():
        record = web_data.record(name, nodes, now)
        update_record(name, lambda _, r=record: r)  # type: ignore[misc]
        path = history.local_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(web_data.timeline(decisions, now)) + "\n")


def _probe(record: Any) -> Any:
    """The cluster's live state as a poll would find it: its running nodes listed."""
    from launcher.providers.base import Node, NodeKind, NodeState
    from launcher.web.model import Live

    nodes = tuple(
        Node(
            n.id,
            NodeKind(n.kind),
            n.node_type,
            f"127.1.{i // 250}.{i % 250 + 2}",
            NodeState.RUNNING,
            created_at=n.runs[-1].start,
        )
        for i, n in enumerate(record.running_nodes)
    )
    return Live(nodes=nodes, polled_at=time.time(), autoscaler_running=True)


def _serve(token: str) -> tuple[str, Any, threading.Thread]:
    from aiohttp import web

    from launcher.web.collector import Collector
    from launcher.web.server import free_port, make_app

    collector = Collector(interval=0.5, probe=_probe)
    collector.start()
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(make_app(collector, token), access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(30)
    return f"http://127.0.0.1:{port}", collector, thread


def _endpoints(base: str, token: str, collector: Any, repeats: int) -> list[tuple[str, ...]]:
    import urllib.request

    def get(path: str) -> float:
        sep = "&" if "?" in path else "?"
        began = time.perf_counter()
        with urllib.request.urlopen(f"{base}{path}{sep}token={token}") as answer:
            json.loads(answer.read())
        return time.perf_counter() - began

    paths = {
        "clusters": "/api/clusters",
        "cluster": "/api/clusters/{c}",
        "nodes (page 3)": "/api/clusters/{c}/nodes?offset=200&limit=100",
        "nodes filtered": "/api/clusters/{c}/nodes?q=gpu-spot",
        "decisions (page 3)": "/api/clusters/{c}/decisions?offset=200&limit=100",
        "decisions filtered": "/api/clusters/{c}/decisions?action=fallback&q=cpu-spot",
        "reclaims": "/api/clusters/{c}/reclaims",
        "series": "/api/clusters/{c}/series",
    }
    rows = []
    for label, path in paths.items():
        times: dict[str, list[float]] = {"small": [], "big": [], "big cold": []}
        for _ in range(repeats):
            for scale in ("small", "big"):
                times[scale].append(get(path.format(c=scale)))
        for _ in range(repeats):
            with collector._lock:  # a change: the cached views are built again
                collector.generation += 1
            times["big cold"].append(get(path.format(c="big")))
        small, big, cold = (statistics.median(times[k]) for k in ("small", "big", "big cold"))
        rows.append(
            (label, show_time(small), show_time(big), show_time(cold), f"{big / small:.2f}x")
        )
    return rows


def _page(base: str, token: str, repeats: int, screenshot: str | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from launcher.testing import web_data
    from launcher.web import history

    out: dict[str, Any] = {"load": {}, "update_ms": [], "update_seen": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 1400})
        for scale in ("small", "big"):
            loads = []
            for _ in range(repeats):
                page.goto("about:blank")  # a whole new load each time, not a hash change
                began = time.perf_counter()
                page.goto(f"{base}/?token={token}#{scale}")
                page.wait_for_function(
                    "document.querySelector('#plot').dataset.points > 0 && "
                    "document.querySelectorAll('#decisions tbody tr').length > 0 && "
                    "document.querySelectorAll('#nodes tbody tr').length > 0 && "
                    "document.querySelectorAll('#reclaims tbody tr').length > 0 && "
                    "document.body.dataset.updateMs !== undefined"
                )
                loads.append(time.perf_counter() - began)
            out["load"][scale] = loads
        if screenshot:
            page.goto(f"{base}/?token={token}&rows=8#big")
            page.wait_for_selector("#runs tbody tr")
            page.screenshot(path=screenshot, full_page=True)
        path = history.local_path("big")
        samples = [json.loads(x) for x in web_data.timeline(0, time.time(), samples=1)]
        last_sample = samples[-1] if samples else None
        for i in range(repeats):
            marker = f"bench update {i}"
            now = time.time()
            lines = [json.dumps({**last_sample, "t": now})] if last_sample else []
            lines += [
                json.dumps(
                    {
                        "kind": "decision",
                        "t": now + k / 1000,
                        "action": "launch",
                        "node_type": "cpu",
                        "count": 1,
                        "reason": marker if k == 99 else f"{k} pending bundle(s) of {{CPU: 2}}",
                    }
                )
                for k in range(100)
            ]
            before = page.get_attribute("body", "data-generation")
            began = time.perf_counter()
            with path.open("a") as f:
                f.write("\n".join(lines) + "\n")
            shown = "document.querySelector('#decisions tbody tr td.reason')?.textContent"
            page.wait_for_function(
                f"{shown} === '{marker}' && document.body.dataset.generation !== '{before}'"
            )
            out["update_seen"].append(time.perf_counter() - began)
            out["update_ms"].append(float(page.get_attribute("body", "data-update-ms") or 0))
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--screenshot", help="also write a screenshot of the page here")
    args = parser.parse_args()
    token = "bench"
    with tempfile.TemporaryDirectory() as tmp:
        _setup(Path(tmp) / "home")
        base, collector, _ = _serve(token)
        rows = _endpoints(base, token, collector, max(args.repeats, 20))
        print("JSON endpoints, server time per request (median; a page of 100 rows)")
        print(f"{'endpoint':22} {'small':>10} {'1,000/10k':>10} {'after change':>13} {'ratio':>7}")
        for row in rows:
            print(f"{row[0]:22} {row[1]:>10} {row[2]:>10} {row[3]:>13} {row[4]:>7}")
        page = _page(base, token, args.repeats, args.screenshot)
        small, big = (statistics.median(page["load"][s]) for s in ("small", "big"))
        print(f"\npage load to data rendered (median of {args.repeats}, chromium headless):")
        spans = {k: f"{show_time(min(v))}-{show_time(max(v))}" for k, v in page["load"].items()}
        print(f"  10 nodes / 100 decisions:       {show_time(small)}  ({spans['small']})")
        print(
            f"  1,000 nodes / 10,000 decisions: {show_time(big)}  ({spans['big']}; "
            f"{big / small:.2f}x)"
        )
        print(
            f"update, 100 decisions appended: fetch + render "
            f"{statistics.median(page['update_ms']):.1f} ms (median; "
            f"{min(page['update_ms']):.1f}-{max(page['update_ms']):.1f}); write to shown "
            f"{show_time(statistics.median(page['update_seen']))} (polling 0.5 s + 2 s)"
        )
        collector.stop()


if __name__ == "__main__":
    main()
