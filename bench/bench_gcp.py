"""Our GCE provider against Ray's (`GCPNodeProvider`), both against the same fake GCE
(fakes/gce/server.py's GceServer on 127.0.0.1) in one run: wall time and Compute API calls (by
method, from the fake's call log) to launch N workers until each is RUNNING, list them, run
a minute of autoscaler ticks with nothing to change, set labels on one node, and terminate them all
until a listing shows none.

    .venv/bin/python bench/bench_gcp.py [--repeat 3] [--workers 1,10,50]
        [--delay-workers 1,10] [--verbose]

Two settings of the fake's Timings, the same for both sides: all zero (every operation is
DONE and every instance RUNNING inside the call that made it), and the fake's default
small delays (50 ms per lifecycle step: PROVISIONING -> STAGING, the insert's operation DONE,
-> RUNNING 50 ms later; 50 ms to stop or delete; 20 ms for any other operation such as
setLabels). Ray's provider polls an operation that is not DONE every 5 s
(`POLL_INTERVAL`), so with delays its waits are whole 5 s steps; `--delay-workers` sets
the N measured with delays (Ray's terminate then takes about 5 s per node).

Every side starts each repeat on a reset fake (`server.reset()`), in one zone, us-west1-b,
with the same node_config (n1-standard-2, a debian-12 boot disk, the default network, no
external address, an ssh-keys metadata item). Ours is `GcpProvider` made as the provider
contract's GcpHarness makes it (`parse_config`, `make_provider`, `bootstrap()`); Ray's is
`ray.autoscaler._private.gcp.node_provider.GCPNodeProvider` with the fake's key as
`gcp_credentials`, its discovery clients built with the fake's endpoint. What happens
before the first timed call (bootstrap, clients, a token, one listing) is untimed. Sides
take turns at going first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from bench import common
from bench.common import daemon_minute, expect, ray_update, show_time, silence_ray_logs, wait_for
from fakes.gce.server import PROJECT, GceServer
from launcher.config.loader import Overrides, parse_config
from launcher.providers.base import TAG_STATUS, NodeKind, NodeState
from launcher.providers.factory import make_provider
from launcher.providers.gcp.provider import GcpProvider

CLUSTER = "bench-gcp"
ZONE = "us-west1-b"
LISTINGS = 10  # listings in a row, with N running
TICKS_RAY = 12  # Ray's autoscaler every 5 s (AUTOSCALER_UPDATE_INTERVAL_S)
POLL_S = 0.02  # how often the script lists while it waits for RUNNING or gone
WAIT_S = 120.0  # at most, for RUNNING or gone
IMAGE = "projects/debian-cloud/global/images/family/debian-12"
SSH_KEYS = (
    "root:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchBenchBenchBenchBenchBenchBenchBench bench"
)
T = TypeVar("T")


def node_config() -> dict[str, Any]:
    return {
        "machineType": "n1-standard-2",
        "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"sourceImage": IMAGE}}],
        "networkInterfaces": [{"network": "global/networks/default"}],
        "metadata": {"items": [{"key": "ssh-keys", "value": SSH_KEYS}]},
    }


def set_timings(server: GceServer, delays: bool) -> None:
    """The fake's defaults (fakes/gce/compute.py Timings, which reset() puts back) or
    all zero."""
    if delays:
        return
    for step in ("provision", "stage", "stop", "delete", "operation"):
        setattr(server.timings, step, 0.0)


# -- the two providers, behind one interface -----------------------------------------------


class Side(Protocol):
    label: str

    def prepare(self, server: GceServer) -> None: ...

    def launch(self, count: int) -> list[str]: ...

    def running(self) -> set[str]: ...

    def listing(self) -> list[str]: ...

    def tick(self) -> None: ...

    def label_one(self, node_id: str) -> None: ...

    def terminate(self, ids: Sequence[str]) -> None: ...


class Ours:
    """launcher.providers.gcp.provider.GcpProvider, made as the contract suite makes it."""

    label = "ours"

    def __init__(self) -> None:
        self._provider: GcpProvider | None = None
        self._home: tempfile.TemporaryDirectory[str] | None = None

    @property
    def provider(self) -> GcpProvider:
        assert self._provider is not None
        return self._provider

    def prepare(self, server: GceServer) -> None:
        if self._home is None:
            self._home = tempfile.TemporaryDirectory(prefix="bench-gcp-home-")
            os.environ["LAUNCHER_HOME"] = self._home.name  # the SSH key bootstrap makes
            os.environ["HOME"] = self._home.name  # the daemon's state file (~/.launcher/head)
        config = node_config()
        config.pop("metadata")  # ours puts its own key in ssh-keys
        text = f"""
cluster_name: {CLUSTER}
max_workers: 100
provider:
  type: gcp
  region: us-west1
  availability_zone: {ZONE}
  project_id: {PROJECT}
  use_internal_ips: true
  cache_stopped_nodes: false
  allow_ssh_from: [127.0.0.0/8]
auth: {{ssh_user: root}}
available_node_types:
  head: {{node_config: {config}, resources: {{CPU: 2}}, max_workers: 0}}
  worker: {{node_config: {config}, resources: {{CPU: 2}}, max_workers: 100}}
head_node_type: head
"""
        provider = make_provider(parse_config(text, "bench.yaml", Overrides()))
        assert isinstance(provider, GcpProvider)
        self._provider = provider
        provider.bootstrap()  # SSH key, firewall rules, the head's account
        self.listing()

    def launch(self, count: int) -> list[str]:
        worker = self.provider.config.node_types["worker"]
        made = self.provider.create_nodes(worker, NodeKind.WORKER, count, {})
        ids = [n.id for n in made]
        if any(n.state is not NodeState.RUNNING for n in made):
            wait_for(
                lambda: set(ids) <= self.running(), f"{self.label}: RUNNING", WAIT_S, poll_s=POLL_S
            )
        return ids

    def running(self) -> set[str]:
        return {n.id for n in self.provider.nodes() if n.state is NodeState.RUNNING}

    def listing(self) -> list[str]:
        return [n.id for n in self.provider.nodes() if n.kind is NodeKind.WORKER]

    def tick(self) -> None:
        """A minute of the real daemon (launcher/autoscaler/daemon.py) with nothing to change:
        60 ticks at its 1 s interval on a clock that moves 1 s per tick (no head here, so
        no Ray demand: it keeps what is there). Its listing is read when 5 s old."""
        daemon, _ = daemon_minute(self.provider)
        expect("ours: the daemon listed more than 12 times", daemon.listing.reads <= 12)

    def label_one(self, node_id: str) -> None:
        self.provider.set_tags(node_id, {TAG_STATUS: "up-to-date"})

    def terminate(self, ids: Sequence[str]) -> None:
        self.provider.terminate_nodes(ids)

    def close(self) -> None:
        if self._home is not None:
            self._home.cleanup()
            self._home = None


class Ray:
    """ray.autoscaler._private.gcp.node_provider.GCPNodeProvider, called as Ray's
    autoscaler calls it (create_node with the tags its NodeLauncher gives)."""

    label = "Ray"

    def __init__(self) -> None:
        from ray.autoscaler._private.gcp.node_provider import GCPNodeProvider
        from ray.autoscaler._private.util import hash_launch_conf

        self._factory: Any = GCPNodeProvider  # untyped
        self._hash: Any = hash_launch_conf
        self._provider: Any = None
        self._tags: dict[str, str] = {}

    def prepare(self, server: GceServer) -> None:
        from ray.autoscaler.tags import (
            NODE_KIND_WORKER,
            STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG,
            TAG_RAY_NODE_KIND,
            TAG_RAY_NODE_NAME,
            TAG_RAY_NODE_STATUS,
            TAG_RAY_USER_NODE_TYPE,
        )

        credentials = {"type": "service_account", "credentials": server.key_file.read_text()}
        provider_config = {
            "type": "gcp",
            "project_id": PROJECT,
            "region": "us-west1",
            "availability_zone": ZONE,
            "use_internal_ips": True,
            "cache_stopped_nodes": False,
            "gcp_credentials": credentials,
        }
        self._provider = self._factory(provider_config, CLUSTER)
        self._tags = {
            TAG_RAY_NODE_NAME: f"ray-{CLUSTER}-worker",
            TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
            TAG_RAY_NODE_STATUS: STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG: self._hash(node_config(), {"ssh_user": "root"}),
            TAG_RAY_USER_NODE_TYPE: "worker",
        }
        self.listing()

    def launch(self, count: int) -> list[str]:
        made = list(self._provider.create_node(node_config(), dict(self._tags), count))
        wait_for(
            lambda: set(made) <= self.running(), f"{self.label}: RUNNING", WAIT_S, poll_s=POLL_S
        )
        return made

    def running(self) -> set[str]:
        listed = self._provider.non_terminated_nodes({})
        return {i for i in listed if self._provider.is_running(i)}

    def listing(self) -> list[str]:
        return list(self._provider.non_terminated_nodes({}))

    def tick(self) -> None:
        """A minute of Ray's autoscaler with nothing to change: 12 StandardAutoscaler updates
        (its 5 s interval), each making the provider calls of one update (Ray's v1
        autoscaler, ray/autoscaler/_private/autoscaler.py): NonTerminatedNodes lists once
        and reads each node's tags (its kind); the config and update checks read each
        worker's tags again (launch hash, type, status); attempt_to_recover_unhealthy_nodes
        and the LoadMetrics pruning read each node's internal_ip. All but the listing are
        answered from the provider's cache of that listing."""
        for _ in range(TICKS_RAY):
            ray_update(self._provider)

    def label_one(self, node_id: str) -> None:
        self._provider.set_node_tags(node_id, {"ray-node-status": "up-to-date"})

    def terminate(self, ids: Sequence[str]) -> None:
        self._provider.terminate_nodes(list(ids))


# -- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measure:
    seconds: float
    calls: Mapping[str, int]  # API method -> calls the fake saw


def timed(server: GceServer, work: Callable[[], T]) -> tuple[T, Measure]:
    server.clear_calls()
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    calls = Counter(str(c.call.method) for c in server.calls())
    return result, Measure(seconds, dict(calls))


def listings_until_gone(side: Side, ids: Sequence[str]) -> None:
    wait_for(
        lambda: not set(ids) & set(side.listing()),
        f"{side.label}: terminated, listed",
        WAIT_S,
        poll_s=POLL_S,
    )


def one_round(
    server: GceServer, side: Side, count: int, delays: bool, quiet: bool
) -> dict[str, Measure]:
    server.reset()
    set_timings(server, delays)
    with common.muted(quiet):
        side.prepare(server)
        ids, launch = timed(server, lambda: side.launch(count))
        expect(f"{side.label}: launched {len(ids)} of {count}", len(ids) == count)
        listed, listing = timed(server, lambda: [side.listing() for _ in range(LISTINGS)])
        expect(
            f"{side.label}: listed {len(listed[-1])} of {count}", sorted(listed[-1]) == sorted(ids)
        )
        _, tick = timed(server, side.tick)
        _, label = timed(server, lambda: side.label_one(ids[0]))
        view = server.instance(ids[0])
        expect(
            f"{side.label}: {ids[0]} not labelled",
            view is not None and "up-to-date" in view.labels.values(),
        )
        _, gone = timed(server, lambda: (side.terminate(ids), listings_until_gone(side, ids)))
    expect(f"{side.label}: the fake failed: {server.errors}", not server.errors)
    return {"launch": launch, "list": listing, "tick": tick, "label": label, "gone": gone}


@contextlib.contextmanager
def rays_clients_to(server: GceServer) -> Iterator[None]:
    """Ray builds its discovery clients with Google's endpoint (static discovery, no
    client_options): give them the fake's, as tests/test_gce_fake_clients.py does."""
    from googleapiclient import discovery

    build = discovery.build

    def to_the_fake(service: str, version: str, *args: Any, **kwargs: Any) -> Any:
        kwargs["client_options"] = {"api_endpoint": server.endpoint(service)}
        return build(service, version, *args, **kwargs)

    discovery.build = to_the_fake
    try:
        yield
    finally:
        discovery.build = build


# -- reporting ------------------------------------------------------------------------------


def median_measure(measures: Sequence[Measure]) -> Measure:
    methods = sorted({a for m in measures for a in m.calls})
    calls = {a: statistics.median_low(m.calls.get(a, 0) for m in measures) for a in methods}
    return Measure(statistics.median(m.seconds for m in measures), calls)


def varies(measures: Sequence[Measure]) -> bool:
    return len({tuple(sorted(m.calls.items())) for m in measures}) > 1


SHORT = {
    "compute.instances.insert": "insert",
    "compute.zoneOperations.wait": "op.wait",
    "compute.zoneOperations.get": "op.get",
    "compute.instances.get": "get",
    "compute.instances.aggregatedList": "aggregatedList",
    "compute.instances.list": "list",
    "compute.instances.setLabels": "setLabels",
    "compute.instances.delete": "delete",
    "oauth2.token": "token",
}


def show_calls(measure: Measure, per: int = 1) -> str:
    return common.show_calls(measure.calls, SHORT, per)


def total_calls(measure: Measure, per: int = 1) -> float:
    return sum(n for m, n in measure.calls.items() if m != "oauth2.token") / per


ROWS = {
    "launch": "launch N workers until RUNNING",
    "list": f"list, per call ({LISTINGS} in a row)",
    "tick": "an idle minute of autoscaler ticks (ours 60, Ray's 12)",
    "label": "set labels on one node",
    "gone": "terminate N until a listing shows none",
}
Results = Mapping[tuple[str, str, int, str], Sequence[Measure]]


def report(results: Results, timings: str) -> str:
    header = "| operation | N | ours | calls | Ray | calls | time ours / Ray | calls ours / Ray |"
    lines = [header, "| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |"]
    notes = []
    for row, title in ROWS.items():
        for count in sorted({c for (t, r, c, _) in results if r == row and t == timings}):
            per = LISTINGS if row == "list" else 1
            cells: list[str] = []
            medians: dict[str, Measure] = {}
            for label in ("ours", "Ray"):
                measures = results.get((timings, row, count, label))
                if not measures:
                    cells += ["n/a", ""]
                    continue
                median = median_measure(measures)
                medians[label] = median
                cells += [show_time(median.seconds / per), show_calls(median, per)]
                if varies(measures):
                    runs = "; ".join(show_calls(m, per) for m in measures)
                    notes.append(f"{title}, N={count}, {label}: calls varied: {runs}")
            if len(medians) == 2:
                ours, ray = medians["ours"], medians["Ray"]
                cells.append(f"{ours.seconds / ray.seconds:.2f}x")
                cr = total_calls(ray, per)
                cells.append(f"{total_calls(ours, per) / cr:.2f}x" if cr else "n/a")
            else:
                cells += ["n/a", "n/a"]
            lines.append(f"| {title} | {count} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *notes])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="repeats per measurement")
    parser.add_argument(
        "--workers", default="1,10,50", help="N with zero delays (default 1,10,50; 0: none)"
    )
    parser.add_argument(
        "--delay-workers",
        default="1,10",
        help="N with the fake's small delays (default 1,10; 0: none). Ray's terminate waits "
        "about 5 s per node there",
    )
    parser.add_argument("--verbose", action="store_true", help="show Ray's provider's output")
    args = parser.parse_args()
    if args.repeat < 1:
        raise SystemExit(f"bench_gcp: --repeat {args.repeat}: give at least 1")
    plans = [
        ("zero", n)
        for n in common.counts(args.workers, "--workers", prog="bench_gcp", example="1,10,50")
    ]
    plans += [
        ("delays", n)
        for n in common.counts(
            args.delay_workers, "--delay-workers", prog="bench_gcp", example="1,10,50"
        )
    ]

    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    results: dict[tuple[str, str, int, str], list[Measure]] = {}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(GceServer())
        os.environ.update(server.env())  # ours finds the fake (and no real GCE) from here
        stack.enter_context(rays_clients_to(server))
        ours, ray = Ours(), Ray()
        sides: list[Side] = [ours, ray]
        quiet = not args.verbose
        if quiet:
            silence_ray_logs(stack)
        for side in sides:  # warm-up, untimed: imports and first-use work
            one_round(server, side, 1, False, quiet)
        for repeat in range(args.repeat):
            order = sides if repeat % 2 == 0 else sides[::-1]
            for timings, count in plans:
                for side in order:
                    measures = one_round(server, side, count, timings == "delays", quiet)
                    for row, measure in measures.items():
                        results.setdefault((timings, row, count, side.label), []).append(measure)
                    done = ", ".join(f"{r} {show_time(m.seconds)}" for r, m in measures.items())
                    print(f"  {timings} N={count} {side.label}: {done}", file=sys.stderr)
            loads.append(os.getloadavg()[0])
            print(
                f"repeat {repeat + 1}/{args.repeat} done ({time.monotonic() - started:.0f} s, "
                f"load {loads[-1]:.1f})",
                file=sys.stderr,
            )
        ours.close()
    print(f"medians of {args.repeat}; calls per operation (per listing for 'list')")
    for timings in ("zero", "delays"):
        if any(t == timings for t, _ in plans):
            what = "all zero" if timings == "zero" else "the fake's defaults (50 ms steps)"
            print(f"\nfake's timings: {what}\n")
            print(report(results, timings))
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print(
        f"{time.monotonic() - started:.0f} s in all; load average (1 min) "
        f"{min(loads):.1f} to {max(loads):.1f}; threads left: {', '.join(left) or 'none'}"
    )


if __name__ == "__main__":
    main()
