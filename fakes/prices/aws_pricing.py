"""A fake AWS Price List API (`pricing`): `GetProducts` over AWS's JSON 1.1 protocol
(`POST /`, `X-Amz-Target: AWSPriceListService.GetProducts`), enough for boto3's real
`pricing` client pointed here by `AWS_ENDPOINT_URL_PRICING`.

    with PriceListServer() as server:
        server.add_ec2("m5.large", "us-east-1", 0.096)
        env = {"AWS_ENDPOINT_URL_PRICING": server.url, ...}

Products are the Price List's JSON documents (`product.attributes`, `terms.OnDemand`),
returned as strings in `PriceList`, as AWS does; `TERM_MATCH` filters compare attribute
values as AWS does (case-insensitive). Signatures are not checked.
"""

from __future__ import annotations

import json
from typing import Any

from fakes.prices.http import Answer, LoopbackServer, Request

_JSON = "application/x-amz-json-1.1"


def _error(kind: str, message: str) -> Answer:
    return Answer.json({"__type": kind, "Message": message}, 400, _JSON)


def ec2_product(instance_type: str, region: str, usd_per_hour: float) -> dict[str, Any]:
    """A Price List document of a Linux, shared-tenancy EC2 instance type's on-demand price."""
    sku = f"FAKE{abs(hash((instance_type, region))) % 10**10:010d}"
    return {
        "product": {
            "productFamily": "Compute Instance",
            "sku": sku,
            "attributes": {
                "servicecode": "AmazonEC2",
                "instanceType": instance_type,
                "regionCode": region,
                "operatingSystem": "Linux",
                "tenancy": "Shared",
                "preInstalledSw": "NA",
                "capacitystatus": "Used",
            },
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                f"{sku}.JRTCKXETXF": {
                    "sku": sku,
                    "priceDimensions": {
                        f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs",
                            "description": f"${usd_per_hour} per On Demand Linux {instance_type}",
                            "pricePerUnit": {"USD": f"{usd_per_hour:.10f}"},
                        }
                    },
                }
            }
        },
        "version": "20261201000000",
        "publicationDate": "2026-12-01T00:00:00Z",
    }


class PriceListServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__(self._handle)
        self.products: list[dict[str, Any]] = []

    def __enter__(self) -> PriceListServer:
        self.start()
        return self

    def add_ec2(self, instance_type: str, region: str, usd_per_hour: float) -> None:
        self.products.append(ec2_product(instance_type, region, usd_per_hour))

    def get_products_calls(self) -> list[dict[str, Any]]:
        return [json.loads(c.body) for c in self.calls if c.body]

    def _handle(self, request: Request) -> Answer:
        target = request.headers.get("x-amz-target", "")
        if request.method != "POST" or target != "AWSPriceListService.GetProducts":
            return _error("UnknownOperationException", f"unknown operation {target!r}")
        body = json.loads(request.body or b"{}")
        service = body.get("ServiceCode")
        filters = body.get("Filters", [])
        if any(f.get("Type") != "TERM_MATCH" for f in filters):
            return _error("InvalidParameterException", "only TERM_MATCH filters exist")
        found = [
            json.dumps(p)
            for p in self.products
            if p["serviceCode"] == service and _matches(p["product"]["attributes"], filters)
        ]
        size = int(body.get("MaxResults") or 100)
        start = int(body.get("NextToken") or 0)
        answer: dict[str, Any] = {
            "FormatVersion": "aws_v1",
            "PriceList": found[start : start + size],
        }
        if start + size < len(found):
            answer["NextToken"] = str(start + size)
        return Answer.json(answer, 200, _JSON)


def _matches(attributes: dict[str, str], filters: list[dict[str, str]]) -> bool:
    return all(
        attributes.get(f["Field"], "").casefold() == str(f["Value"]).casefold() for f in filters
    )
