"""Our EC2 provider against Ray's (`AWSNodeProvider`), both against the same moto EC2 server
(fakes/aws/server.py's MotoServer on 127.0.0.1) in one run: wall time and EC2 API calls (by
action, from the server's call log) to launch N workers, list them, tick an idle minute
of autoscaling over them (our daemon's 60 ticks against Ray's 12 updates' provider calls),
terminate them until a listing shows none, launch N when the first subnet's zone has no
capacity, and, with cache_stopped_nodes, launch, stop and relaunch (reusing the stopped) N
workers.

    .venv/bin/python bench/bench_aws.py [--repeat 3] [--workers 1,20] [--stopped-workers 1,5]
        [--no-failover] [--verbose]

Every side starts each repeat on a fresh moto (`server.reset()`), with a new loopback VPC,
key pair and security group, and gets the same node_config: InstanceType, ImageId (one of
moto's), SubnetIds (two subnets in two zones), KeyName and SecurityGroupIds, so the launch
requests differ only in their tags and client token. Both sides run with
`cache_stopped_nodes: false` (launch new instances, terminate rather than stop) except in
the cache_stopped_nodes rows. Ours is measured twice: as the autoscaler on the head runs it
(`on_head=True`, the role Ray's provider has in Ray's autoscaler) and as `up`/`down` on the
user's machine run it (`on_head=False`, which journals each launch on disk). What each side
does before its first call (our subnet lookup, Ray's `bootstrap_aws`, making clients) is
outside the timings, and each side lists once, untimed, first. Sides run in a different
order in each repeat. moto launches MinCount instances where EC2 launches up to MaxCount:
the server here launches MaxCount (`Ec2CountServer`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode

from bench import common
from bench.common import daemon_minute, expect, ray_update, show_time, silence_ray_logs
from fakes.aws.server import MotoServer, amazon_image, loopback_vpc
from launcher.config.loader import Overrides, parse_config
from launcher.providers.aws.clients import AwsClients
from launcher.providers.aws.provider import AwsProvider
from launcher.providers.base import NodeKind

CLUSTER = "bench-aws"
INSTANCE_TYPE = "m5.large"
LISTINGS = 10  # listings in a row, with N running
GONE_WAIT_S = 30.0  # at most, after terminating, for a listing that shows none
TICKS_RAY = 12  # Ray's autoscaler updates every 5 s
T = TypeVar("T")


# -- the server ------------------------------------------------------------------------------


class Ec2CountServer(MotoServer):
    """MotoServer whose RunInstances launches MaxCount instances, as EC2 does when it has
    room for them all; moto 5.2.5 launches MinCount and ignores MaxCount, so a request for
    up to 20 with MinCount 1 (both providers send that) would make one instance. The call
    log keeps the request as sent."""

    def _moto(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        stream = environ.get("wsgi.input")
        if isinstance(stream, io.BytesIO):
            form = dict(parse_qsl(stream.getvalue().decode(), keep_blank_values=True))
            if form.get("Action") == "RunInstances" and "MaxCount" in form:
                form["MinCount"] = form["MaxCount"]
                body = urlencode(form).encode()
                environ = {**environ, "wsgi.input": io.BytesIO(body)}
                environ["CONTENT_LENGTH"] = str(len(body))
        return super()._moto(environ)


# -- what each repeat starts from -----------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """A fresh moto: a loopback VPC, and the node_config both sides launch."""

    node_config: Mapping[str, Any]
    zones: tuple[str, ...]  # of the node_config's subnets, in order
    cache_stopped: bool  # both providers' cache_stopped_nodes


def fresh(server: MotoServer, cache_stopped: bool = False) -> Setup:
    server.reset()
    ec2 = server.client("ec2")
    vpc = loopback_vpc(ec2, zones=("a", "b"))
    ec2.create_key_pair(KeyName="bench-key")
    group = ec2.create_security_group(GroupName="bench", Description="bench_aws", VpcId=vpc.id)[
        "GroupId"
    ]
    node_config = {
        "InstanceType": INSTANCE_TYPE,
        "ImageId": amazon_image(server),
        "SubnetIds": vpc.subnet_ids,
        "KeyName": "bench-key",
        "SecurityGroupIds": [group],
    }
    return Setup(node_config, tuple(s.zone for s in vpc.subnets), cache_stopped)


# -- the two providers, behind one interface -----------------------------------------------


class Side(Protocol):
    label: str

    def prepare(self, setup: Setup) -> None: ...

    def launch(self, count: int) -> list[str]: ...

    def listing(self) -> list[str]: ...

    def terminate(self, ids: Sequence[str]) -> None: ...

    def zone_of(self, node_id: str) -> str: ...

    def tick(self) -> None: ...


class Ours:
    """launcher.providers.aws.provider.AwsProvider, built from a cluster YAML."""

    def __init__(self, on_head: bool) -> None:
        self.on_head = on_head
        self.label = "ours (head)" if on_head else "ours (user's machine)"
        self._provider: AwsProvider | None = None
        self._zones: dict[str, str] = {}
        self._home: tempfile.TemporaryDirectory[str] | None = None
        self._clients: AwsClients | None = None

    @property
    def provider(self) -> AwsProvider:
        assert self._provider is not None
        return self._provider

    def prepare(self, setup: Setup) -> None:
        if self._home is not None:
            self._home.cleanup()
        self._home = tempfile.TemporaryDirectory(prefix="bench-aws-home-")
        os.environ["LAUNCHER_HOME"] = self._home.name  # journal, removed ids, known_hosts
        node_config = dict(setup.node_config)
        text = f"""
cluster_name: {CLUSTER}
max_workers: 100
provider:
  type: aws
  region: us-west-2
  use_internal_ips: true
  cache_stopped_nodes: {str(setup.cache_stopped).lower()}
auth: {{ssh_user: root}}
available_node_types:
  head: {{node_config: {node_config}, resources: {{CPU: 2}}, max_workers: 0}}
  worker: {{node_config: {node_config}, resources: {{CPU: 2}}, max_workers: 100}}
head_node_type: head
"""
        config = parse_config(text, "bench.yaml", Overrides())
        self._provider = AwsProvider(config, on_head=self.on_head)
        # One set of clients for the whole run, as Ray's provider caches its clients for the
        # process (and as an autoscaler keeps one provider for its life): botocore's first
        # call of each operation on a new client builds its serializer and parser (~1 ms),
        # which a client made per repeat paid in every timed call.
        if self._clients is None:
            self._clients = self.provider.clients
        self.provider.clients = self._clients
        self.provider.contexts()  # the subnets' zones: what bootstrap looks up
        self.listing()  # warm both clients (and the paginator's model, loaded once)
        self.provider.clients.ec2_launch.describe_instances(MaxResults=5)
        # botocore builds a client's table of error shapes at its first error (~20 ms here).
        # Ray's client is cached for the whole process, so its first repeat pays that once;
        # ours is made per provider (one per autoscaler process): build it here likewise.
        self.provider.clients.ec2_launch.meta.service_model.shape_for_error_code("x")
        self._zones = {}

    def launch(self, count: int) -> list[str]:
        worker = self.provider.config.node_types["worker"]
        made = self.provider.create_nodes(worker, NodeKind.WORKER, count, {})
        self._zones.update({n.id: n.zone for n in made})
        return [n.id for n in made]

    def listing(self) -> list[str]:
        return [n.id for n in self.provider.nodes() if n.kind is NodeKind.WORKER]

    def terminate(self, ids: Sequence[str]) -> None:
        # As the autoscaler removes workers: stopped with cache_stopped_nodes, else
        # terminated (as Ray's terminate_nodes decides).
        self.provider.stop_nodes(ids)

    def zone_of(self, node_id: str) -> str:
        return self._zones[node_id]

    def tick(self) -> None:
        """A minute of the real daemon (launcher/autoscaler/daemon.py) with nothing to change:
        60 ticks at its 1 s interval on a clock that moves 1 s per tick (no head here, so
        no Ray demand: it keeps what is there); its state files go to the bench's home."""
        assert self._home is not None
        home = os.environ.get("HOME")
        os.environ["HOME"] = self._home.name
        try:
            daemon, _ = daemon_minute(self.provider)
        finally:
            if home is not None:
                os.environ["HOME"] = home
        expect(f"{self.label}: the daemon acted", not daemon.executor.pending())
        expect(f"{self.label}: listed {daemon.listing.reads} times", daemon.listing.reads <= 12)

    def close(self) -> None:
        if self._home is not None:
            self._home.cleanup()
            self._home = None


class Ray:
    """ray.autoscaler._private.aws.node_provider.AWSNodeProvider, called as Ray's
    autoscaler calls it (create_node with the tags its NodeLauncher gives)."""

    label = "Ray"

    def __init__(self) -> None:
        from ray.autoscaler._private.aws.node_provider import AWSNodeProvider
        from ray.autoscaler._private.util import hash_launch_conf

        self._factory: Any = AWSNodeProvider  # untyped
        self._hash: Any = hash_launch_conf
        self._provider: Any = None
        self._node_config: dict[str, Any] = {}
        self._tags: dict[str, str] = {}
        self._zones: dict[str, str] = {}

    def prepare(self, setup: Setup) -> None:
        from ray.autoscaler.tags import (
            NODE_KIND_WORKER,
            STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG,
            TAG_RAY_NODE_KIND,
            TAG_RAY_NODE_NAME,
            TAG_RAY_NODE_STATUS,
            TAG_RAY_USER_NODE_TYPE,
        )

        provider_config = {
            "type": "aws",
            "region": "us-west-2",
            "use_internal_ips": True,
            "cache_stopped_nodes": setup.cache_stopped,
        }
        self._provider = self._factory(provider_config, CLUSTER)
        self._node_config = dict(setup.node_config)
        self._tags = {
            TAG_RAY_NODE_NAME: f"ray-{CLUSTER}-worker",
            TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
            TAG_RAY_NODE_STATUS: STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG: self._hash(self._node_config, {"ssh_user": "root"}),
            TAG_RAY_USER_NODE_TYPE: "worker",
        }
        self.listing()  # warm both clients
        self._provider.ec2_fail_fast.meta.client.describe_instances(MaxResults=5)
        self._zones = {}

    def launch(self, count: int) -> list[str]:
        made = self._provider.create_node(dict(self._node_config), dict(self._tags), count)
        self._zones.update({i: n.placement["AvailabilityZone"] for i, n in made.items()})
        return list(made)

    def listing(self) -> list[str]:
        return list(self._provider.non_terminated_nodes({}))

    def terminate(self, ids: Sequence[str]) -> None:
        self._provider.terminate_nodes(list(ids))

    def zone_of(self, node_id: str) -> str:
        return self._zones[node_id]

    def tick(self) -> None:
        """A minute of Ray's autoscaler with nothing to change: 12 updates (its 5 s
        interval), each making the provider calls of one update of Ray's v1 autoscaler, as
        bench_gcp.py counts them: one listing, every node's tags read three times and its
        address twice (answered from the provider's cache of that listing)."""
        for _ in range(TICKS_RAY):
            ray_update(self._provider)


# -- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measure:
    seconds: float
    calls: Mapping[str, int]  # EC2/IAM/STS action -> calls the server saw


def timed(server: MotoServer, work: Callable[[], T]) -> tuple[T, Measure]:
    server.clear_calls()
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    calls = Counter(str(c.action) for c in server.calls())
    return result, Measure(seconds, dict(calls))


def listings_until_gone(side: Side, ids: Sequence[str]) -> int:
    """List until none of `ids` is listed (at most GONE_WAIT_S); returns the listings made."""
    deadline = time.monotonic() + GONE_WAIT_S
    listings = 0
    while True:
        listings += 1
        if not set(ids) & set(side.listing()):
            return listings
        late = time.monotonic() > deadline
        expect(f"{side.label}: terminated nodes still listed after {GONE_WAIT_S:g} s", not late)
        time.sleep(0.1)


def plus(a: Measure, b: Measure) -> Measure:
    return Measure(a.seconds + b.seconds, dict(Counter(a.calls) + Counter(b.calls)))


def one_round(server: MotoServer, side: Side, count: int, quiet: bool) -> dict[str, Measure]:
    """Launch `count`, list LISTINGS times, terminate them until a listing shows none."""
    with common.muted(quiet):
        side.prepare(fresh(server))
        ids, launch = timed(server, lambda: side.launch(count))
        expect(f"{side.label}: launched {len(ids)} of {count}", len(ids) == count)
        listed, listing = timed(server, lambda: [side.listing() for _ in range(LISTINGS)])
        expect(
            f"{side.label}: listed {len(listed[-1])} of {count}", sorted(listed[-1]) == sorted(ids)
        )
        _, tick = timed(server, side.tick)
        _, terminate = timed(server, lambda: side.terminate(ids))
        _, after = timed(server, lambda: listings_until_gone(side, ids))
    return {
        "launch": launch,
        "list": listing,
        "tick": tick,
        "terminate": terminate,
        "gone": plus(terminate, after),
    }


def stopped_round(server: MotoServer, side: Side, count: int, quiet: bool) -> dict[str, Measure]:
    """With cache_stopped_nodes: launch `count` (none stopped yet), remove them (stopped),
    launch `count` again (the stopped ones started). A listing before each removal, untimed,
    as the autoscaler lists before it decides."""
    with common.muted(quiet):
        side.prepare(fresh(server, cache_stopped=True))
        ids, launch = timed(server, lambda: side.launch(count))
        side.listing()
        _, stop = timed(server, lambda: side.terminate(ids))
        again, reuse = timed(server, lambda: side.launch(count))
        expect(f"{side.label}: reused {sorted(again)}, not {sorted(ids)}", set(again) == set(ids))
        side.listing()
        side.terminate(again)
    return {"cached launch": launch, "cached stop": stop, "cached reuse": reuse}


def failover_round(server: MotoServer, side: Side, count: int, quiet: bool) -> Measure:
    """Launch `count` while the first subnet's zone refuses with InsufficientInstanceCapacity."""
    setup = fresh(server)
    server.faults.no_capacity(zone=setup.zones[0])
    with common.muted(quiet):
        side.prepare(setup)
        ids, measure = timed(server, lambda: side.launch(count))
    expect(f"{side.label}: failover launched {len(ids)} of {count}", len(ids) == count)
    zones = {side.zone_of(i) for i in ids}
    expect(f"{side.label}: failover launched in {zones}", zones == {setup.zones[1]})
    return measure


# -- reporting ------------------------------------------------------------------------------


def median_measure(measures: Sequence[Measure]) -> Measure:
    actions = sorted({a for m in measures for a in m.calls})
    calls = {a: statistics.median_low(m.calls.get(a, 0) for m in measures) for a in actions}
    return Measure(statistics.median(m.seconds for m in measures), calls)


def varies(measures: Sequence[Measure]) -> bool:
    return len({tuple(sorted(m.calls.items())) for m in measures}) > 1


SHORT = {
    "RunInstances": "Run",
    "DescribeInstances": "Describe",
    "TerminateInstances": "Terminate",
    "StopInstances": "Stop",
    "StartInstances": "Start",
    "CreateTags": "CreateTags",
}


def show_calls(measure: Measure, per: int = 1) -> str:
    return common.show_calls(measure.calls, SHORT, per)


ROWS = {
    "launch": "launch N workers",
    "list": f"list, per call ({LISTINGS} in a row)",
    "tick": "an idle minute of autoscaler ticks (ours 60, Ray's 12)",
    "terminate": "terminate N",
    "gone": "terminate N until a listing shows none",
    "failover": "launch N, first zone out of capacity",
    "cached launch": "cache_stopped_nodes: launch N, none stopped",
    "cached stop": "cache_stopped_nodes: remove N (stopped)",
    "cached reuse": "cache_stopped_nodes: launch N, N stopped",
}
Results = Mapping[tuple[str, int, str], Sequence[Measure]]


def report(results: Results, labels: Sequence[str], counts: Sequence[int]) -> str:
    """A markdown table: per row and N, each side's median time and calls, and the ratio of
    each of ours to Ray's (the last label)."""
    ray = labels[-1]
    ours = labels[:-1]
    header = "| operation | N | " + " | ".join(f"{x} | calls" for x in labels)
    header += " | " + " | ".join(f"{x} / Ray" for x in ours) + " |"
    lines = [header, "| --- | ---: | " + "---: | --- | " * len(labels) + "---: | " * len(ours)]
    lines[-1] = lines[-1].rstrip()
    notes = []
    for row, title in ROWS.items():
        for count in sorted({c for (r, c, _) in results if r == row}):
            per = LISTINGS if row == "list" else 1
            cells: list[str] = []
            medians: dict[str, float] = {}
            for label in labels:
                measures = results.get((row, count, label))
                if not measures:
                    cells += ["n/a", ""]
                    continue
                median = median_measure(measures)
                medians[label] = median.seconds / per
                cells += [show_time(median.seconds / per), show_calls(median, per)]
                if varies(measures):
                    runs = "; ".join(show_calls(m, per) for m in measures)
                    notes.append(f"{title}, N={count}, {label}: calls varied: {runs}")
            for label in ours:
                known = label in medians and ray in medians
                cells.append(f"{medians[label] / medians[ray]:.2f}x" if known else "n/a")
            lines.append(f"| {title} | {count} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", *notes])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="repeats per measurement")
    parser.add_argument("--workers", default="1,20", help="comma-separated N (default 1,20)")
    parser.add_argument(
        "--stopped-workers",
        default="1,5",
        help="N for the cache_stopped_nodes rows (default 1,5; Ray's provider sleeps 1 s per "
        "reused node); 0 skips them",
    )
    parser.add_argument("--no-failover", action="store_true", help="skip the failover rows")
    parser.add_argument("--verbose", action="store_true", help="show Ray's provider's output")
    args = parser.parse_args()
    if args.repeat < 1:
        raise SystemExit(f"bench_aws: --repeat {args.repeat}: give at least 1")
    counts = common.counts(
        args.workers, "--workers", prog="bench_aws", example="1,20", zero_is_none=False
    )
    stopped = (
        []
        if args.stopped_workers == "0"
        else common.counts(
            args.stopped_workers,
            "--stopped-workers",
            prog="bench_aws",
            example="1,20",
            zero_is_none=False,
        )
    )

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    results: dict[tuple[str, int, str], list[Measure]] = {}
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(Ec2CountServer())
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            os.environ.pop(name, None)
        os.environ.update(server.env())  # both sides find moto (and no real AWS) from here
        head, laptop, ray = Ours(on_head=True), Ours(on_head=False), Ray()
        sides: list[Side] = [head, laptop, ray]
        quiet = not args.verbose
        if quiet:
            silence_ray_logs(stack)
        for side in sides:  # warm-up, untimed: imports and botocore's first-use work
            one_round(server, side, 1, quiet)
        for repeat in range(args.repeat):
            shift = repeat % len(sides)
            order = sides[shift:] + sides[:shift]
            for count in sorted(set(counts) | set(stopped)):
                for side in order:
                    measures: dict[str, Measure] = {}
                    if count in counts:
                        measures.update(one_round(server, side, count, quiet))
                        if not args.no_failover:
                            measures["failover"] = failover_round(server, side, count, quiet)
                    if count in stopped and side is not laptop:  # `down` terminates
                        measures.update(stopped_round(server, side, count, quiet))
                    for row, measure in measures.items():
                        results.setdefault((row, count, side.label), []).append(measure)
                    done = ", ".join(f"{r} {show_time(m.seconds)}" for r, m in measures.items())
                    print(f"  N={count} {side.label}: {done}", file=sys.stderr)
            print(
                f"repeat {repeat + 1}/{args.repeat} done ({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
            )
        head.close()
        laptop.close()
    print(f"medians of {args.repeat}; calls per operation (per listing for 'list')")
    print(report(results, [s.label for s in sides], counts))
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print(
        f"{time.monotonic() - started:.0f} s in all; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; threads left: {', '.join(left) or 'none'}"
    )


if __name__ == "__main__":
    main()
