"""Live prices on GCP: Compute Engine's SKUs from the Cloud Billing Catalog API (a plain HTTPS
GET, paged) against our loopback fake (fakes/prices/gcp_catalog.py): per-vCPU and per-GiB
rates of each machine family in the cluster's region, machine types priced from them (the
table's sizes, or the name's shape), GPUs by the hour, spot and on-demand; the disk cache;
the table, labelled, when offline; `plan` and `cost-report` naming the source."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from fakes.prices.gcp_catalog import BillingCatalogServer
from launcher.config.loader import load_config
from launcher.config.model import ClusterConfig
from launcher.dryrun import make_plan
from launcher.ledger.keeping import note_listing
from launcher.ledger.store import read_record
from launcher.pricing import PriceTable, load_prices
from launcher.pricing.cache import cache_path
from launcher.pricing.gcp import shape_of
from launcher.pricing.live import live_prices
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.providers.registry import SPECS
from tests.conftest import RAY_EXAMPLES, run_cli

KEY = "test-api-key"
AMERICAS = ["us-central1", "us-east1", "us-west1"]
VIRGINIA = ["us-east4"]

# (SKU family, on-demand core, RAM, spot core, RAM) in the Americas; Virginia's are 12% more.
FAMILIES = {
    "n1": ("N1 Predefined Instance", 0.031611, 0.004237, 0.00664, 0.00089),
    "n1-custom": ("Custom Instance", 0.033174, 0.004446, 0.00698, 0.00094),
    "e2": ("E2 Instance", 0.021811, 0.002923, 0.006543, 0.000877),
    "n2": ("N2 Instance", 0.031611, 0.004237, 0.00765, 0.00103),
    "n2d": ("N2D AMD Instance", 0.027502, 0.003686, 0.00665, 0.00089),
    "c2": ("Compute optimized", 0.03398, 0.00455, 0.00822, 0.0011),
    "c3": ("C3 Instance", 0.03465, 0.00464, 0.0111, 0.0015),
    "n4": ("N4 Instance", 0.0301, 0.00404, 0.0097, 0.0013),
    "a2": ("A2 Instance", 0.031611, 0.004237, 0.0095, 0.00127),
    "g2": ("G2 Instance", 0.024988, 0.002927, 0.00998, 0.00117),
}
GPUS = {  # SKU model, on-demand, spot
    "nvidia-tesla-t4": ("Tesla T4", 0.35, 0.14),
    "nvidia-tesla-a100": ("Tesla A100", 2.933908, 1.1),
    "nvidia-l4": ("L4", 0.56, 0.224),
}
VIRGINIA_FACTOR = 1.12


def _catalog(server: BillingCatalogServer) -> None:
    for name, (family, core, ram, spot_core, spot_ram) in FAMILIES.items():
        server.add_family(family, AMERICAS, "Americas", core, ram, spot=(spot_core, spot_ram))
        if name in ("n1", "n2"):
            more = tuple(round(p * VIRGINIA_FACTOR, 6) for p in (core, ram, spot_core, spot_ram))
            server.add_family(family, VIRGINIA, "Virginia", more[0], more[1], (more[2], more[3]))
    for model, on_demand, gpu_spot in GPUS.values():
        server.add_gpu(model, AMERICAS, "Americas", on_demand, spot=gpu_spot)
    server.add_others(AMERICAS, "Americas")
    # Europe, last (the client must read every page to find the Americas' rates first).
    server.add_family("N2 Instance", ["europe-west4"], "Netherlands", 0.0348, 0.00466)


@pytest.fixture
def catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[BillingCatalogServer]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_PRICES", "live")
    monkeypatch.setenv("LAUNCHER_GCP_BILLING_API_KEY", KEY)
    with BillingCatalogServer(page_size=7, api_key=KEY) as server:
        _catalog(server)
        monkeypatch.setenv("LAUNCHER_GCP_PRICES_URL", server.root_url)
        yield server


MACHINES = [
    "e2-standard-4",  # table rows, priced from their sizes there
    "n1-standard-8",
    "custom-6-16384",
    "a2-highgpu-1g",
    "g2-standard-4",
    "n2-standard-32",  # not in the table: sized from the name
    "n2d-highmem-4",
    "c2-standard-8",
    "c3-highcpu-4",
    "n4-standard-2",
    "g2-standard-24",
    "e2-medium",  # shared core: not priced here
]


def _cluster(region: str = "us-west1", zone: str | None = None) -> str:
    zone = zone or f"{region}-a"
    types = "\n".join(
        f"  t{i}:\n    node_config: {{machineType: {m}}}\n    max_workers: 1"
        for i, m in enumerate(MACHINES)
    )
    return f"""\
cluster_name: live-prices-gcp
max_workers: 20
provider: {{type: gcp, region: {region}, availability_zone: {zone}, project_id: proj}}
auth: {{ssh_user: ubuntu}}
available_node_types:
  head:
    node_config: {{machineType: n1-standard-2}}
    max_workers: 0
  gpu:
    node_config:
      machineType: n1-standard-4
      guestAccelerators: [{{acceleratorType: nvidia-tesla-t4, acceleratorCount: 2}}]
      scheduling: {{provisioningModel: SPOT}}
    max_workers: 2
{types}
head_node_type: head
"""


def _config(write_config: Callable[[str], Path], region: str = "us-west1") -> ClusterConfig:
    return load_config(write_config(_cluster(region)))


def _live(config: ClusterConfig, now: float | None = None) -> PriceTable:
    return live_prices(config, SPECS["gcp"], load_prices(), now=now)


def _expected(machine: str, spot: bool = False, factor: float = 1.0) -> float:
    known = load_prices().machine("gcp", machine)
    shape = shape_of(machine, known)
    assert shape is not None
    _, core, ram, spot_core, spot_ram = FAMILIES[shape.family]
    if spot:
        core, ram = spot_core, spot_ram
    price = shape.vcpus * round(core * factor, 6) + shape.memory_gib * round(ram * factor, 6)
    if shape.gpu:
        _, on_demand, gpu_spot = GPUS[shape.gpu]
        price += shape.gpus * (gpu_spot if spot else on_demand)
    return price


def test_each_family_priced_from_its_rates(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    prices = _live(_config(write_config))
    assert prices.live_notes["gcp"] == "live prices: Cloud Billing Catalog API"
    for machine in MACHINES[:-1]:
        info = prices.machine("gcp", machine)
        assert info is not None, machine
        assert info.price.on_demand == pytest.approx(_expected(machine), abs=1e-5), machine
        assert info.price.spot == pytest.approx(_expected(machine, spot=True), abs=1e-5), machine
        assert info.price.on_demand_source.startswith(
            "live: Cloud Billing Catalog API, us-west1, fetched"
        )
        assert info.price.live
    # Sizes as GCE defines them, where the table has no row.
    n2 = prices.machine("gcp", "n2-standard-32")
    assert n2 is not None and (n2.vcpus, n2.memory_gib) == (32, 128)
    g2 = prices.machine("gcp", "g2-standard-24")
    assert g2 is not None and (g2.vcpus, g2.memory_gib, g2.gpus) == (24, 96, 2)
    # Known figures: the table's n1-standard-2 and custom-6-16384 are these rates' sums.
    static = load_prices().machine("gcp", "custom-6-16384")
    live = prices.machine("gcp", "custom-6-16384")
    assert static is not None and live is not None
    assert live.price.on_demand == pytest.approx(static.price.on_demand, abs=1e-3)
    # a2-highgpu-1g is 12 vCPUs, 85 GiB and one A100.
    a2 = prices.machine("gcp", "a2-highgpu-1g")
    assert a2 is not None
    assert a2.price.on_demand == pytest.approx(12 * 0.031611 + 85 * 0.004237 + 2.933908)
    # Shared-core types are left to the table (which has no e2-medium row).
    assert prices.machine("gcp", "e2-medium") is None
    # The accelerator, by the hour, spot and on-demand.
    t4 = prices.accelerator("gcp", "nvidia-tesla-t4")
    assert t4 is not None and (t4.on_demand, t4.spot) == pytest.approx((0.35, 0.14))
    assert t4.spot_source.startswith("live: Cloud Billing Catalog API, us-west1")


def test_the_plan_prices_spot_and_on_demand_nodes(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    plan = make_plan(_config(write_config), SPECS["gcp"], load_prices())
    head = plan.head.offer
    assert head.price is not None and not head.spot
    assert head.price.on_demand == pytest.approx(_expected("n1-standard-2"), abs=1e-5)
    gpu = next(w.offer for w in plan.workers if w.offer.description.startswith("n1-standard-4"))
    assert gpu.spot and gpu.price is not None
    assert gpu.price.spot == pytest.approx(_expected("n1-standard-4", spot=True) + 2 * 0.14)
    assert gpu.price.on_demand == pytest.approx(_expected("n1-standard-4") + 2 * 0.35)


def test_every_page_read_once_for_both_markets(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    _live(_config(write_config))
    pages = -(-len(catalog.skus) // catalog.page_size)
    assert pages > 3 and len(catalog.calls) == pages  # one walk serves spot and on-demand
    queries = [parse_qs(c.query) for c in catalog.calls]
    assert all(q["currencyCode"] == ["USD"] and q["key"] == [KEY] for q in queries)
    assert "pageToken" not in queries[0]
    assert all(c.path == "/v1/services/6F81-5844-456A/skus" for c in catalog.calls)
    assert len({q["pageToken"][0] for q in queries[1:]}) == pages - 1


def test_the_clusters_region_is_priced(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    prices = _live(_config(write_config, "us-east4"))
    info = prices.machine("gcp", "n2-standard-32")
    assert info is not None
    assert info.price.on_demand == pytest.approx(
        _expected("n2-standard-32", factor=VIRGINIA_FACTOR), abs=1e-5
    )
    assert info.price.on_demand_source.startswith("live: Cloud Billing Catalog API, us-east4,")
    # Families the catalog has no Virginia SKUs for keep the table's price, labelled so.
    e2 = prices.machine("gcp", "e2-standard-4")
    assert e2 is not None and e2.price.on_demand_source.startswith("static table ")
    assert not cache_path("gcp", "us-west1").exists() and cache_path("gcp", "us-east4").exists()


def test_cache_reused_within_its_ttl(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    config = _config(write_config)
    start = time.time()
    first = _live(config, now=start)
    walk = len(catalog.calls)
    second = _live(config, now=start + 1800)  # both markets fresh: nothing asked
    assert len(catalog.calls) == walk
    assert second.machine("gcp", "n2-standard-32") == first.machine("gcp", "n2-standard-32")
    # Spot past its hour, on-demand within its day: spot read again, at its new rates.
    catalog.skus.clear()
    _catalog_with_n2_spot(catalog, 0.009, 0.0012)
    later = _live(config, now=start + 3700)
    assert len(catalog.calls) > walk
    info = later.machine("gcp", "n2-standard-32")
    assert info is not None
    assert info.price.spot == pytest.approx(32 * 0.009 + 128 * 0.0012)
    assert info.price.on_demand == pytest.approx(_expected("n2-standard-32"))


def _catalog_with_n2_spot(server: BillingCatalogServer, core: float, ram: float) -> None:
    _catalog(server)
    for sku in server.skus:
        if sku["description"] == "Spot Preemptible N2 Instance Core running in Americas":
            sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {
                "currencyCode": "USD",
                "units": "0",
                "nanos": round(core * 1e9),
            }
        if sku["description"] == "Spot Preemptible N2 Instance Ram running in Americas":
            sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"] = {
                "currencyCode": "USD",
                "units": "0",
                "nanos": round(ram * 1e9),
            }


def test_offline_falls_back_to_the_labelled_table(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    catalog.offline = True
    config = _config(write_config)
    prices = _live(config)
    static = load_prices().machine("gcp", "n1-standard-8")
    info = prices.machine("gcp", "n1-standard-8")
    assert static is not None and info is not None and info.price == static.price
    label = f"static table {load_prices().dated('gcp')} (us-central1)"
    assert info.price.on_demand_source == label
    note = prices.live_notes["gcp"]
    assert "on-demand prices unavailable: HTTP 503" in note and "static table" in note
    # A machine the table lacks stays unpriced (never a made-up figure).
    assert prices.machine("gcp", "n2-standard-32") is None
    # The failure is remembered: the next plan does not wait on the API again.
    calls = len(catalog.calls)
    again = _live(config)
    assert len(catalog.calls) == calls and "unavailable" in again.live_notes["gcp"]


def test_credentials_key_or_token(
    catalog: BillingCatalogServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Without the key, the cluster's OAuth token (here given in provider.gcp_credentials).
    monkeypatch.delenv("LAUNCHER_GCP_BILLING_API_KEY")
    catalog.token = "ya29.token"
    text = _cluster().replace(
        "project_id: proj}",
        "project_id: proj, gcp_credentials: {type: credentials_token, credentials: ya29.token}}",
    )
    prices = _live(load_config(write_config(text)))
    assert prices.live_notes["gcp"] == "live prices: Cloud Billing Catalog API"
    assert {c.headers.get("authorization") for c in catalog.calls} == {"Bearer ya29.token"}
    assert all("key" not in parse_qs(c.query) for c in catalog.calls)
    # A key the API refuses: its message, and the table.
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "other-home"))
    monkeypatch.setenv("LAUNCHER_GCP_BILLING_API_KEY", "wrong")
    prices = _live(_config(write_config))
    assert "HTTP 400: API key not valid" in prices.live_notes["gcp"]
    info = prices.machine("gcp", "n1-standard-8")
    assert info is not None and info.price.on_demand_source.startswith("static table ")


def test_plan_shows_the_gcp_source_on_rays_example(
    catalog: BillingCatalogServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    example = RAY_EXAMPLES / "gcp" / "example-gpu-docker.yaml"  # n1-standard-2 + T4, us-west1
    shown = run_cli("plan", str(example))
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    text = " ".join(shown.stdout.split())
    assert "prices: live: Cloud Billing Catalog API, us-west1, fetched" in text
    assert "live prices: Cloud Billing Catalog API" in text
    as_json = json.loads(run_cli("plan", str(example), "--json").stdout)
    head = next(n for n in as_json["nodes"] if n["role"] == "head")
    assert head["price_on_demand_source"].startswith("live: Cloud Billing Catalog API")
    # Offline, elsewhere: the table's prices, saying so.
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "other-home"))
    catalog.offline = True
    shown = run_cli("plan", str(example))
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    text = " ".join(shown.stdout.split())
    assert f"prices: static table {load_prices().dated('gcp')} (us-central1)" in text
    assert "prices unavailable" in text


def test_cost_report_shows_the_gcp_source(
    catalog: BillingCatalogServer, write_config: Callable[[str], Path]
) -> None:
    config = _config(write_config)
    shown = run_cli("plan", str(config.source))  # `plan` keeps the live prices on disk
    assert shown.exit_code == 0, shown.stderr
    calls = len(catalog.calls)
    start = time.time() - 3600
    head = Node("h", NodeKind.HEAD, "head", "127.16.1.4", NodeState.RUNNING, created_at=start)
    big = Node("w", NodeKind.WORKER, "t5", "127.16.1.5", NodeState.RUNNING, created_at=start)
    note_listing(config, [head, big], now=start + 60)
    note_listing(config, [head, big], now=start + 3600)
    assert len(catalog.calls) == calls  # records never fetch
    record = read_record("live-prices-gcp")
    assert record is not None
    assert record.nodes["w"].price_per_hour == pytest.approx(_expected("n2-standard-32"))
    report = run_cli("cost-report", "--json")
    (cluster,) = json.loads(report.stdout)["clusters"]
    sources = {r["node_type"]: r["price_sources"] for r in cluster["rows"]}
    assert sources["t5"][0].startswith("live: Cloud Billing Catalog API, us-west1, fetched")
    assert sources["head"][0].startswith("live: Cloud Billing Catalog API, us-west1, fetched")


def test_a_slow_catalog_leaves_the_table(
    catalog: BillingCatalogServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    catalog.delay_s = 3.0
    monkeypatch.setenv("LAUNCHER_PRICES_TIMEOUT", "0.5")
    prices = _live(_config(write_config))
    assert "no answer within 0.5 s" in prices.live_notes["gcp"]
    info = prices.machine("gcp", "n1-standard-8")
    assert info is not None and info.price.on_demand_source.startswith("static table ")


def test_gclouds_endpoint_override_is_honoured(
    catalog: BillingCatalogServer,
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LAUNCHER_GCP_PRICES_URL")
    monkeypatch.setenv("CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING", catalog.url)
    prices = _live(_config(write_config))
    assert prices.live_notes["gcp"] == "live prices: Cloud Billing Catalog API"
    assert catalog.calls
