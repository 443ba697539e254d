"""Live prices on Azure: the Retail Prices API (a plain HTTPS GET with an OData `$filter`)
against our loopback fake (fakes/prices/azure_retail.py): Linux pay-as-you-go and Spot
meters of the cluster's sizes in its location, paged; the table, labelled, when offline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.prices.azure_retail import RetailPricesServer
from launcher.config.loader import load_config
from launcher.config.model import ClusterConfig
from launcher.dryrun import make_plan
from launcher.pricing import load_prices
from launcher.providers.registry import SPECS
from tests.conftest import run_cli

CLUSTER = """\
cluster_name: live-prices
max_workers: 2
provider: {type: azure, location: westus2, resource_group: rg}
auth: {ssh_user: ubuntu}
available_node_types:
  head:
    node_config:
      azure_arm_parameters: {vmSize: Standard_D2s_v3, imageId: IMAGE}
    max_workers: 0
  spot:
    node_config:
      azure_arm_parameters: {vmSize: standard_d4s_v3, priority: Spot, imageId: IMAGE}
    max_workers: 2
head_node_type: head
"""


@pytest.fixture
def retail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[RetailPricesServer]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAUNCHER_PRICES", "live")
    with RetailPricesServer(page_size=3) as server:
        server.add_vm("Standard_D2s_v3", "westus2", 0.0961, spot=0.0192)
        server.add_vm("Standard_D4s_v3", "westus2", 0.1922, spot=0.0384)
        server.add_vm("Standard_D4s_v3", "eastus", 0.2, spot=0.05)  # another location
        monkeypatch.setenv("LAUNCHER_AZURE_PRICES_URL", server.prices_url)
        yield server


IMAGE = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Compute/images/ray"
CLUSTER = CLUSTER.replace("IMAGE", IMAGE)


def _config(write_config: Callable[[str], Path]) -> ClusterConfig:
    return load_config(write_config(CLUSTER))


def test_retail_prices_of_the_location_are_used(
    retail: RetailPricesServer, write_config: Callable[[str], Path]
) -> None:
    plan = make_plan(_config(write_config), SPECS["azure"], load_prices())
    head, (worker,) = plan.head, plan.workers
    assert head.offer.price is not None and worker.offer.price is not None
    assert head.offer.price.on_demand == pytest.approx(0.0961)
    assert worker.offer.price.on_demand == pytest.approx(0.1922)
    assert worker.offer.price.spot == pytest.approx(0.0384)  # not Low Priority, not Windows
    assert worker.offer.price.spot_source.startswith(
        "live: Azure Retail Prices API, westus2, fetched"
    )
    assert plan.cost.at_max == pytest.approx(0.0961 + 2 * 0.0384)
    filters = [c.query for c in retail.calls]
    assert filters and all("westus2" in f for f in filters)
    assert len(retail.calls) > 2  # pages followed (3 items a page)
    # Cached: a second plan asks nothing.
    calls = len(retail.calls)
    make_plan(_config(write_config), SPECS["azure"], load_prices())
    assert len(retail.calls) == calls


def test_offline_uses_the_locations_table_row_labelled(
    retail: RetailPricesServer, write_config: Callable[[str], Path]
) -> None:
    retail.offline = True
    plan = make_plan(_config(write_config), SPECS["azure"], load_prices())
    price = plan.workers[0].offer.price
    assert price is not None
    rows = SPECS["azure"].price_rows() or {}
    assert price.on_demand == pytest.approx(
        rows["regions"]["westus2"]["Standard_D4s_v3"]["on_demand"]
    )
    assert price.on_demand_source == f"static table {rows['as_of']} (westus2)"
    assert "prices unavailable" in plan.cost.live_note


def test_plan_shows_the_azure_sources(
    retail: RetailPricesServer, write_config: Callable[[str], Path]
) -> None:
    shown = run_cli("plan", str(write_config(CLUSTER)))
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    text = " ".join(shown.stdout.split())
    assert "prices: live: Azure Retail Prices API, westus2, fetched" in text
    assert "live prices: Azure Retail Prices API" in text
