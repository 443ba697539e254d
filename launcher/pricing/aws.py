"""AWS's published prices: EC2 spot price history per availability zone, and on-demand list
prices from the AWS Price List API (`pricing`, whose endpoint is in us-east-1).

boto3 is imported only when prices are fetched. Its own endpoint settings apply:
`AWS_ENDPOINT_URL_EC2` and `AWS_ENDPOINT_URL_PRICING` (or `AWS_ENDPOINT_URL` for both, or
`endpoint_url` in the shared config file) send the calls elsewhere, credentials are found as
for any boto3 client, and the region's prices are those of the cluster's `provider.region`.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.pricing.quotes import ON_DEMAND, SPOT, PriceRequest, Quote

SPOT_SOURCE = "EC2 spot price history"
ON_DEMAND_SOURCE = "AWS Price List API"
PRICING_REGION = "us-east-1"  # where the Price List API answers for every region
_PAGES = 5  # at most this many pages of one call (1000 rows each): a bound on time


def _client(service: str, region: str, timeout_s: float) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"total_max_attempts": 1},
    )
    return boto3.client(service, region_name=region, config=config)


def spot_quotes(rows: Sequence[Mapping[str, Any]], now: float) -> dict[str, list[Quote]]:
    """The newest Linux price per instance type and zone in DescribeSpotPriceHistory rows."""
    newest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        if not str(row.get("ProductDescription", "")).startswith("Linux/UNIX"):
            continue
        key = (str(row["InstanceType"]), str(row["AvailabilityZone"]))
        if key not in newest or row["Timestamp"] > newest[key]["Timestamp"]:
            newest[key] = row
    out: dict[str, list[Quote]] = {}
    for (kind, zone), row in sorted(newest.items()):
        price = float(row["SpotPrice"])
        out.setdefault(kind, []).append(Quote(kind, SPOT, price, zone, SPOT_SOURCE, now))
    return out


def on_demand_price(price_list: Sequence[str]) -> float | None:
    """The hourly USD on-demand price in a GetProducts answer's PriceList, if it has one."""
    for item in price_list:
        product = json.loads(item)
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = dimension.get("pricePerUnit", {}).get("USD")
                if dimension.get("unit") == "Hrs" and usd is not None and float(usd) > 0:
                    return float(usd)
    return None


def _filters(kind: str, region: str) -> list[dict[str, str]]:
    fields = {
        "instanceType": kind,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    return [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in fields.items()]


class AwsPrices:
    title = f"{SPOT_SOURCE} per zone, {ON_DEMAND_SOURCE}"

    def units(self, request: PriceRequest, market: str) -> tuple[str, ...]:
        return request.machines

    def fetch(
        self, request: PriceRequest, market: str, units: Sequence[str], timeout_s: float
    ) -> dict[str, list[Quote]]:
        now = datetime.datetime.now(datetime.UTC)
        found: dict[str, list[Quote]] = {u: [] for u in units}
        if market == SPOT:
            ec2 = _client("ec2", request.region, timeout_s)
            rows: list[Mapping[str, Any]] = []
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=list(units),
                ProductDescriptions=["Linux/UNIX"],
                StartTime=now,
                PaginationConfig={"MaxItems": 1000 * _PAGES, "PageSize": 1000},
            )
            for page in pages:
                rows += page.get("SpotPriceHistory", [])
            found.update(spot_quotes(rows, now.timestamp()))
            return found
        pricing = _client("pricing", PRICING_REGION, timeout_s)
        for kind in units:
            answer = pricing.get_products(
                ServiceCode="AmazonEC2", Filters=_filters(kind, request.region), MaxResults=10
            )
            price = on_demand_price(answer.get("PriceList", []))
            if price is not None:
                quote = Quote(
                    kind, ON_DEMAND, price, request.region, ON_DEMAND_SOURCE, now.timestamp()
                )
                found[kind] = [quote]
        return found

    def derive(self, quotes: Sequence[Quote], request: PriceRequest) -> list[Quote]:
        return list(quotes)


SOURCE = AwsPrices()
