"""Azure's published prices: the Retail Prices API (unauthenticated REST, `$filter` OData),
Linux pay-as-you-go and Spot meters of the cluster's VM sizes in its location. Azure's prices
are per location (region), not per zone.

`LAUNCHER_AZURE_PRICES_URL` replaces the API's address
(https://prices.azure.com/api/retail/prices), e.g. for a proxy or a test's fake. Plain
`urllib`: no SDK is needed.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from launcher.pricing.quotes import ON_DEMAND, SPOT, PriceRequest, Quote

DEFAULT_URL = "https://prices.azure.com/api/retail/prices"
SOURCE_NAME = "Azure Retail Prices API"
API_VERSION = "2023-01-01-preview"
_PAGES = 5
_BATCH = 10  # sizes per query: the filter stays short


def prices_url(environ: Mapping[str, str] | None = None) -> str:
    return (environ if environ is not None else os.environ).get(
        "LAUNCHER_AZURE_PRICES_URL"
    ) or DEFAULT_URL


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def retail_filter(region: str, sizes: Sequence[str]) -> str:
    either = " or ".join(f"armSkuName eq {_quoted(s)}" for s in sizes)
    return (
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and "
        f"armRegionName eq {_quoted(region)} and ({either})"
    )


def market_of(item: Mapping[str, Any]) -> str | None:
    """ON_DEMAND or SPOT for a Linux hourly USD VM meter; None for any other."""
    if item.get("currencyCode") != "USD" or item.get("unitOfMeasure") != "1 Hour":
        return None
    if str(item.get("productName", "")).endswith("Windows"):
        return None
    sku = str(item.get("skuName", ""))
    if sku.endswith("Low Priority"):
        return None
    return SPOT if sku.endswith(" Spot") else ON_DEMAND


def quotes_of(
    items: Sequence[Mapping[str, Any]], market: str, sizes: Sequence[str], now: float
) -> dict[str, list[Quote]]:
    """Per size (as asked, matched without case), its `market` price in `items`."""
    names = {s.casefold(): s for s in sizes}
    out: dict[str, list[Quote]] = {s: [] for s in sizes}
    for item in items:
        size = names.get(str(item.get("armSkuName", "")).casefold())
        if size is None or market_of(item) != market or out[size]:
            continue
        where = str(item.get("armRegionName", ""))
        out[size].append(Quote(size, market, float(item["retailPrice"]), where, SOURCE_NAME, now))
    return out


def _get(url: str, timeout_s: float) -> Mapping[str, Any]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        data: Mapping[str, Any] = json.loads(answer.read())
    return data


class AzurePrices:
    title = SOURCE_NAME

    def units(self, request: PriceRequest, market: str) -> tuple[str, ...]:
        return request.machines

    def fetch(
        self, request: PriceRequest, market: str, units: Sequence[str], timeout_s: float
    ) -> dict[str, list[Quote]]:
        now = time.time()
        items: list[Mapping[str, Any]] = []
        for start in range(0, len(units), _BATCH):
            query = {
                "api-version": API_VERSION,
                "$filter": retail_filter(request.region, units[start : start + _BATCH]),
            }
            url: str | None = f"{prices_url()}?{urlencode(query)}"
            for _ in range(_PAGES):
                if not url:
                    break
                page = _get(url, timeout_s)
                items += page.get("Items", [])
                url = page.get("NextPageLink")
        return quotes_of(items, market, units, now)

    def derive(self, quotes: Sequence[Quote], request: PriceRequest) -> list[Quote]:
        return list(quotes)


SOURCE = AzurePrices()
