"""Live prices on AWS: boto3's real EC2 and Price List clients against moto (spot price history
per zone) and our Price List fake (fakes/prices/aws_pricing.py), all on 127.0.0.1; the disk
cache with its TTLs; the static table, labelled, when the APIs cannot be reached; `plan`,
`simulate` and the head's autoscaler using them, showing where each price comes from."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.aws.server import MotoServer
from fakes.prices.aws_pricing import PriceListServer
from fakes.prices.aws_spot import zone_prices
from launcher.autoscaler.decide.plan_types import Settings, TypeInfo
from launcher.autoscaler.decide.view import planner_settings, price_changes
from launcher.autoscaler.spec import AutoscalerSpec
from launcher.config.loader import Overrides, load_config
from launcher.config.model import ClusterConfig
from launcher.dryrun import make_plan
from launcher.ledger.keeping import note_listing
from launcher.ledger.store import read_record
from launcher.pricing import PriceTable, load_prices
from launcher.pricing.cache import cache_path, read
from launcher.pricing.handoff import REFRESH_S, HeadPrices, PriceHandoff, handoff_for
from launcher.pricing.live import live_prices
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.registry import SPECS
from tests.conftest import run_cli

CLUSTER = """\
cluster_name: live-prices
max_workers: 4
provider: {type: aws, region: us-west-2 ZONE}
available_node_types:
  head:
    node_config: {InstanceType: m5.large}
    max_workers: 0
  spot:
    node_config:
      InstanceType: m5.xlarge
      InstanceMarketOptions: {MarketType: spot}
    max_workers: 4
head_node_type: head
"""


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def pricing(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[PriceListServer]:
    """The Price List fake with m5.large and m5.xlarge in us-west-2; boto3 sent to it and to
    moto; a fresh $LAUNCHER_HOME; live prices on."""
    moto.reset()
    moto.apply_env(monkeypatch)
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_PRICES", "live")
    with PriceListServer() as server:
        server.add_ec2("m5.large", "us-west-2", 0.101)
        server.add_ec2("m5.xlarge", "us-west-2", 0.202)
        server.add_ec2("m5.xlarge", "us-east-1", 0.192)  # another region: not ours
        monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", server.url)
        yield server


def _config(write_config: Callable[[str], Path], zone: str | None = "us-west-2b") -> ClusterConfig:
    text = CLUSTER.replace(" ZONE", f", availability_zone: {zone}" if zone else "")
    return load_config(write_config(text))


def _live(config: ClusterConfig, now: float | None = None) -> PriceTable:
    return live_prices(config, SPECS["aws"], load_prices(), now=now)


def _spot_calls(moto: MotoServer) -> int:
    return len(moto.calls("DescribeSpotPriceHistory"))


ZONES = {
    ("m5.xlarge", "us-west-2a"): 0.031,
    ("m5.xlarge", "us-west-2b"): 0.047,
    ("m5.xlarge", "us-west-2c"): 0.052,
    ("m5.xlarge", "us-west-2d"): 0.058,
}


def test_live_price_preferred_over_table(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zone_prices(monkeypatch, ZONES)
    static = load_prices().machine("aws", "m5.xlarge")
    assert static is not None and static.price.on_demand != 0.202
    plan = make_plan(_config(write_config), SPECS["aws"], load_prices())
    head, (worker,) = plan.head, plan.workers
    assert head.offer.price is not None and worker.offer.price is not None
    assert head.offer.price.on_demand == pytest.approx(0.101)
    assert worker.offer.price.on_demand == pytest.approx(0.202)
    assert worker.offer.price.spot == pytest.approx(0.047)
    assert worker.offer.price.on_demand_source.startswith("live: AWS Price List API, us-west-2,")
    assert worker.offer.price.spot_source.startswith("live: EC2 spot price history, us-west-2b,")
    # The cost is at the live prices: the head on demand, the spot worker at the zone's price.
    assert plan.cost.at_max == pytest.approx(0.101 + 4 * 0.047)
    assert plan.cost.live_note.startswith("live prices: EC2 spot price history")
    # The Price List was asked for Linux, shared tenancy, in the cluster's region.
    asked = pricing.get_products_calls()
    assert {f["Value"] for c in asked for f in c["Filters"] if f["Field"] == "regionCode"} == {
        "us-west-2"
    }


def test_zone_price_used(
    pricing: PriceListServer, write_config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    zone_prices(monkeypatch, ZONES)
    in_b = _config(write_config, "us-west-2b")
    prices = _live(in_b)
    info = prices.machine("aws", "m5.xlarge")
    assert info is not None and info.price.spot == pytest.approx(0.047)
    # The planner chooses at the price of the cluster's zone.
    settings = planner_settings(in_b, SPECS["aws"], prices)
    assert settings.types["spot"].price == pytest.approx(0.047)
    # A cluster in either zone (listed in launch order) pays the first zone's price.
    either = _config(write_config, "us-west-2a,us-west-2b")
    info = _live(either).machine("aws", "m5.xlarge")
    assert info is not None and info.price.spot == pytest.approx(0.031)
    assert ", us-west-2a, fetched" in info.price.spot_source
    # With no zone given, the region's cheapest zone, named.
    anywhere = _config(write_config, None)
    info = _live(anywhere).machine("aws", "m5.xlarge")
    assert info is not None and info.price.spot == pytest.approx(0.031)
    assert ", us-west-2a, fetched" in info.price.spot_source


def test_cache_hit_avoids_a_second_fetch(
    pricing: PriceListServer, moto: MotoServer, write_config: Callable[[str], Path]
) -> None:
    config = _config(write_config)
    first = _live(config)
    assert _spot_calls(moto) == 1 and len(pricing.calls) == 2  # one per instance type
    assert cache_path("aws", "us-west-2").exists()
    second = _live(config)
    assert _spot_calls(moto) == 1 and len(pricing.calls) == 2
    assert second.machine("aws", "m5.large") == first.machine("aws", "m5.large")
    label = second.machine("aws", "m5.large")
    assert label is not None and label.price.on_demand_source.startswith("live: ")


def test_expired_cache_refetches(
    pricing: PriceListServer, moto: MotoServer, write_config: Callable[[str], Path]
) -> None:
    config = _config(write_config)
    start = time.time()
    _live(config, now=start)
    assert (_spot_calls(moto), len(pricing.calls)) == (1, 2)
    _live(config, now=start + 1800)  # both fresh
    assert (_spot_calls(moto), len(pricing.calls)) == (1, 2)
    pricing.products.clear()
    pricing.add_ec2("m5.large", "us-west-2", 0.111)
    pricing.add_ec2("m5.xlarge", "us-west-2", 0.222)
    later = _live(config, now=start + 3700)  # spot past its hour; on-demand within its day
    assert (_spot_calls(moto), len(pricing.calls)) == (2, 2)
    info = later.machine("aws", "m5.large")
    assert info is not None and info.price.on_demand == pytest.approx(0.101)
    next_day = _live(config, now=start + 86400 + 60)
    assert (_spot_calls(moto), len(pricing.calls)) == (3, 4)
    info = next_day.machine("aws", "m5.large")
    assert info is not None and info.price.on_demand == pytest.approx(0.111)


def test_offline_falls_back_to_the_labelled_table(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pricing.offline = True
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:9")  # nothing listens there
    config = _config(write_config)
    prices = _live(config)
    static = load_prices().machine("aws", "m5.xlarge")
    info = prices.machine("aws", "m5.xlarge")
    assert static is not None and info is not None and info.price == static.price
    assert info.price.on_demand_source == f"static table {load_prices().dated('aws')} (us-east-1)"
    note = prices.live_notes["aws"]
    assert "on-demand prices unavailable" in note and "spot prices unavailable" in note
    assert "static table" in note
    # The failure is remembered: the next plan does not wait on the APIs again.
    calls = len(pricing.calls)
    again = _live(config)
    assert len(pricing.calls) == calls and "unavailable" in again.live_notes["aws"]


def test_a_stale_live_price_beats_the_table_when_offline(
    pricing: PriceListServer, write_config: Callable[[str], Path]
) -> None:
    config = _config(write_config)
    start = time.time()
    _live(config, now=start)
    pricing.offline = True
    later = _live(config, now=start + 2 * 86400)
    info = later.machine("aws", "m5.large")
    assert info is not None and info.price.on_demand == pytest.approx(0.101)
    assert info.price.on_demand_source.startswith("live: AWS Price List API")
    assert "on-demand prices unavailable" in later.live_notes["aws"]


def test_fetching_is_bounded_in_time(
    pricing: PriceListServer, write_config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    pricing.delay_s = 5.0
    monkeypatch.setenv("LAUNCHER_PRICES_TIMEOUT", "1")
    config = _config(write_config)
    started = time.monotonic()
    prices = _live(config)
    assert time.monotonic() - started < 2.5
    info = prices.machine("aws", "m5.large")
    assert info is not None and info.price.on_demand_source.startswith("static table ")


def test_static_and_cached_modes_fetch_nothing(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(write_config)
    monkeypatch.setenv("LAUNCHER_PRICES", "static")
    assert _live(config) == load_prices()
    monkeypatch.setenv("LAUNCHER_PRICES", "cached")
    info = _live(config).machine("aws", "m5.large")
    assert info is not None and info.price.on_demand_source.startswith("static table ")
    assert _spot_calls(moto) == 0 and not pricing.calls
    monkeypatch.setenv("LAUNCHER_PRICES", "live")
    _live(config)
    monkeypatch.setenv("LAUNCHER_PRICES", "cached")
    info = _live(config, now=time.time() + 7 * 86400).machine("aws", "m5.large")
    assert info is not None and info.price.on_demand == pytest.approx(0.101)


def test_plan_shows_the_source_of_each_price(
    pricing: PriceListServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    zone_prices(monkeypatch, ZONES)
    path = write_config(CLUSTER.replace(" ZONE", ", availability_zone: us-west-2b"))
    shown = run_cli("plan", str(path))
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    text = " ".join(shown.stdout.split())
    assert "on-demand $0.202/h, spot $0.047/h" in text
    assert "on-demand price: live: AWS Price List API, us-west-2, fetched" in text
    assert "spot price: live: EC2 spot price history, us-west-2b, fetched" in text
    assert "at the live prices shown for each node" in text
    as_json = run_cli("plan", str(path), "--json")
    node = next(n for n in json.loads(as_json.stdout)["nodes"] if n["role"] == "head")
    assert node["price_on_demand_source"].startswith("live: AWS Price List API")
    # Offline: the table's prices, saying so.
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "other-home"))
    pricing.offline = True
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:9")
    shown = run_cli("plan", str(path))
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    text = " ".join(shown.stdout.split())
    assert f"prices: static table {load_prices().dated('aws')} (us-east-1)" in text
    assert "prices unavailable" in text and "static table" in text


def test_cost_report_shows_the_source_of_each_price(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zone_prices(monkeypatch, ZONES)
    config = _config(write_config)
    shown = run_cli("plan", str(config.source))  # `plan` keeps the live prices on disk
    assert shown.exit_code == 0, shown.stderr
    calls = (_spot_calls(moto), len(pricing.calls))
    start = time.time() - 3600
    head = Node("i-h", NodeKind.HEAD, "head", "127.16.1.4", NodeState.RUNNING, created_at=start)
    spot = Node("i-s", NodeKind.WORKER, "spot", "127.16.1.5", NodeState.RUNNING, created_at=start)
    note_listing(config, [head, spot], now=start + 60)
    note_listing(config, [head, spot], now=start + 3600)
    assert (_spot_calls(moto), len(pricing.calls)) == calls  # records never fetch
    record = read_record("live-prices")
    assert record is not None and record.nodes["i-s"].price_per_hour == pytest.approx(0.047)
    report = run_cli("cost-report", "--json")
    (cluster,) = json.loads(report.stdout)["clusters"]
    sources = {r["node_type"]: r["price_sources"] for r in cluster["rows"]}
    assert sources["spot"][0].startswith("live: EC2 spot price history, us-west-2b, fetched")
    assert sources["head"][0].startswith("live: AWS Price List API, us-west-2, fetched")
    text = " ".join(run_cli("cost-report").stdout.split())
    assert "price of live-prices spot (spot): live: EC2 spot price history, us-west-2b" in text


# The head's autoscaler plans with live prices: what `up` hands it (this machine's cache and
# price settings, in the autoscaler's spec but not its digest), and what the head reads
# itself, in the background, every REFRESH_S; and `simulate` prices a trace as `plan` does.

AWS = SPECS["aws"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _spot_price(prices: HeadPrices) -> float | None:
    info = prices.table().machine("aws", "m5.xlarge")
    return info.price.spot if info is not None else None


def _offline(pricing: PriceListServer, monkeypatch: pytest.MonkeyPatch) -> None:
    pricing.offline = True
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:9")  # nothing listens there


def test_the_head_plans_at_once_with_the_prices_up_handed_it_when_it_cannot_read_them(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    zone_prices(monkeypatch, ZONES)
    config = _config(write_config)
    assert run_cli("plan", str(config.source)).exit_code == 0  # this machine's cache
    handoff = handoff_for(config, AWS)
    assert handoff.region == "us-west-2" and handoff.cache is not None
    assert handoff.environ == {"LAUNCHER_PRICES": "live"}  # no credentials, no endpoints
    # The head: its own $LAUNCHER_HOME, and no way to reach the price APIs.
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "head-home"))
    _offline(pricing, monkeypatch)
    calls = (_spot_calls(moto), len(pricing.calls))
    clock = Clock()
    prices = HeadPrices(config, AWS, handoff, clock)
    assert _spot_price(prices) == pytest.approx(0.047)  # the zone's live price, at once
    settings = planner_settings(config, AWS, prices.table())
    assert settings.types["spot"].price == pytest.approx(0.047)
    assert read(cache_path("aws", "us-west-2")).entries  # kept in the head's own cache
    # Its refresh finds the handed prices fresh: nothing fetched, nothing changed.
    assert prices.poll() is None
    prices.wait(10)
    fresh = prices.poll()
    assert fresh is not None and fresh.machine("aws", "m5.xlarge") == prices.table().machine(
        "aws", "m5.xlarge"
    )
    assert (_spot_calls(moto), len(pricing.calls)) == calls


def test_the_head_reads_prices_itself_in_the_background_and_replans_with_them(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zone_prices(monkeypatch, ZONES)
    config = _config(write_config)
    handoff = handoff_for(config, AWS)  # nothing cached on this machine: plan never ran
    assert handoff.cache is None
    clock = Clock()
    prices = HeadPrices(config, AWS, handoff, clock)
    before = planner_settings(config, AWS, prices.table())
    assert prices.table().machine("aws", "m5.xlarge") is not None
    # The static table until the head has read.
    assert prices.table().live_notes["aws"].startswith("no live prices; static table")
    assert prices.poll() is None  # starts the first refresh, in a thread
    prices.wait(10)
    fresh = prices.poll()
    assert fresh is not None and prices.table() is fresh
    assert _spot_price(prices) == pytest.approx(0.047)
    assert fresh.live_notes["aws"].startswith("live prices: EC2 spot price history")
    after = planner_settings(config, AWS, fresh)
    assert price_changes(before, after) == [
        f"head: ${before.types['head'].price:.4f}/h -> $0.1010/h",
        f"spot: ${before.types['spot'].price:.4f}/h -> $0.0470/h",
    ]
    # The next refresh waits its turn.
    calls = (_spot_calls(moto), len(pricing.calls))
    clock.now += REFRESH_S - 1
    assert prices.poll() is None
    prices.wait(10)
    assert prices.poll() is None and (_spot_calls(moto), len(pricing.calls)) == calls
    clock.now += 1
    prices.poll()
    prices.wait(10)
    assert prices.poll() is not None  # read again (the cache, still fresh, answered)


def test_static_prices_on_this_machine_keep_the_head_from_fetching(
    pricing: PriceListServer,
    moto: MotoServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(write_config)
    monkeypatch.setenv("LAUNCHER_PRICES", "static")
    handoff = handoff_for(config, AWS)
    assert handoff == PriceHandoff({"LAUNCHER_PRICES": "static"})
    monkeypatch.setenv("LAUNCHER_PRICES", "live")  # the head's own environment says live
    prices = HeadPrices(config, AWS, handoff, Clock())
    prices.poll()
    prices.wait(10)
    assert prices.poll() is None
    assert _spot_calls(moto) == 0 and not pricing.calls
    info = prices.table().machine("aws", "m5.xlarge")
    assert info is not None and info.price.spot_source.startswith("static table ")


def test_new_prices_alone_do_not_restart_the_autoscaler() -> None:
    cache = {"version": 1, "entries": {}, "failures": {}}
    bare = AutoscalerSpec("cluster_name: c\n", "c.yaml", Overrides())
    priced = AutoscalerSpec(
        "cluster_name: c\n",
        "c.yaml",
        Overrides(),
        prices=PriceHandoff({"LAUNCHER_PRICES": "live"}, "us-west-2", cache),
    )
    assert bare.digest == priced.digest
    again = AutoscalerSpec.from_json(priced.to_json())
    assert again == priced and json.loads(priced.to_json())["prices"]["region"] == "us-west-2"
    # A spec written before prices were handed over still reads.
    old = json.loads(bare.to_json())
    del old["prices"]
    assert AutoscalerSpec.from_json(json.dumps(old)).prices == PriceHandoff()


def test_price_changes_name_each_type_whose_price_moved() -> None:
    def settings(**prices: float | None) -> Settings:
        types = {n: TypeInfo(n, {"CPU": 1.0}, 0, 1, price=p) for n, p in prices.items()}
        return Settings(types=types, max_workers=1)

    before = settings(a=0.1, b=0.2, c=None)
    after = settings(a=0.1, b=0.25, c=0.3)
    assert price_changes(before, after) == ["b: $0.2000/h -> $0.2500/h", "c: unknown -> $0.3000/h"]
    assert price_changes(after, after) == []


def test_simulate_costs_a_trace_at_the_zones_live_prices(
    pricing: PriceListServer,
    write_config: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zone_prices(monkeypatch, ZONES)
    config = _config(write_config)
    line = '{"t": 0, "resources": {"CPU": 1}, "count": 8, "duration_s": 3600}\n'
    trace = write_config(line, "trace.jsonl")
    args = ("simulate", str(config.source), "--trace", str(trace), "--launch-delay-s", "0")
    shown = run_cli(*args, "--json")
    assert shown.exit_code == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["prices"].startswith("live prices: EC2 spot price history")
    hours = report["node_hours"]
    assert report["cost"]["spot"] == pytest.approx(round(0.047 * hours["spot"], 4))
    assert report["cost"]["head"] == pytest.approx(round(0.101 * hours["head"], 4))
    text = " ".join(run_cli(*args).stdout.split())
    assert "Prices: live prices: EC2 spot price history" in text
