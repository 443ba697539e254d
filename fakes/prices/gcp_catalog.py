"""A fake of the Cloud Billing Catalog API's `services.skus.list`
(`GET /v1/services/{service}/skus?currencyCode=&pageSize=&pageToken=`), shaped as the real
one answers (its discovery document's `ListSkusResponse`): `skus` with `name`, `skuId`,
`description`, `category` {`serviceDisplayName`, `resourceFamily`, `resourceGroup`,
`usageType`}, `serviceRegions`, `pricingInfo` [{`effectiveTime`, `pricingExpression`
{`usageUnit`, `tieredRates` [{`startUsageAmount`, `unitPrice` {`currencyCode`, `units`,
`nanos`}}], ...}, `aggregationInfo`, `currencyConversionRate`}], `serviceProviderName`,
`geoTaxonomy`; pages of `pageSize` (at most 5000) linked by an opaque `nextPageToken`, none
on the last page; Google's error body (`{"error": {"code", "message", "status"}}`).

Like the real API it wants an API key (`key=`) or an OAuth token (`Authorization: Bearer`);
with `api_key` or `token` set, others are refused (403 / 401). A client is sent here by
`LAUNCHER_GCP_PRICES_URL=<server.root_url>`.

    with BillingCatalogServer() as server:
        server.add_family("N2 Instance", ["us-central1"], "Americas", 0.031611, 0.004237,
                          spot=(0.007, 0.001))
        server.add_gpu("Tesla T4", ["us-central1"], "Americas", 0.35, spot=0.14)
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from fakes.prices.http import Answer, LoopbackServer, Request

COMPUTE = "6F81-5844-456A"
EFFECTIVE = "2026-12-01T08:00:00.000Z"


def _money(usd: float) -> dict[str, Any]:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": round((usd - units) * 1e9)}


def _sku_id(description: str, regions: Sequence[str]) -> str:
    digest = hashlib.sha256((description + "|".join(regions)).encode()).hexdigest().upper()
    return f"{digest[0:4]}-{digest[4:8]}-{digest[8:12]}"


def sku(
    description: str,
    regions: Sequence[str],
    usd: float,
    *,
    usage_type: str = "OnDemand",
    resource_group: str = "CPU",
    resource_family: str = "Compute",
    unit: str = "h",
    service: str = COMPUTE,
) -> dict[str, Any]:
    """One SKU as the catalog lists it. `unit` "h" (per hour) or "GiBy.h" (per GiB-hour)."""
    sku_id = _sku_id(description, regions)
    per_gib = unit == "GiBy.h"
    return {
        "name": f"services/{service}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": resource_family,
            "resourceGroup": resource_group,
            "usageType": usage_type,
        },
        "serviceRegions": list(regions),
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [{"startUsageAmount": 0, "unitPrice": _money(usd)}],
                    "usageUnitDescription": "gibibyte hour" if per_gib else "hour",
                    "baseUnit": "By.s" if per_gib else "s",
                    "baseUnitDescription": "byte second" if per_gib else "second",
                    "baseUnitConversionFactor": 3865470566400 if per_gib else 3600,
                },
                "aggregationInfo": {
                    "aggregationLevel": "ACCOUNT",
                    "aggregationInterval": "DAILY",
                    "aggregationCount": 1,
                },
                "currencyConversionRate": 1,
                "effectiveTime": EFFECTIVE,
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {
            "type": "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL",
            "regions": list(regions),
        },
    }


class BillingCatalogServer(LoopbackServer):
    def __init__(
        self, page_size: int = 5000, api_key: str | None = None, token: str | None = None
    ) -> None:
        super().__init__(self._handle)
        self.skus: list[dict[str, Any]] = []
        self.page_size = page_size  # the most a page holds, whatever the client asks
        self.api_key = api_key
        self.token = token

    def __enter__(self) -> BillingCatalogServer:
        self.start()
        return self

    @property
    def root_url(self) -> str:
        return self.url + "/"

    def add_family(
        self,
        family: str,
        regions: Sequence[str],
        geo: str,
        core: float,
        ram: float,
        spot: tuple[float, float] | None = None,
        group: str = "CPU",
    ) -> None:
        """A family's on-demand (and spot) vCPU and memory SKUs, as the catalog names them:
        `family` is the description's start ("N2 Instance", "N1 Predefined Instance",
        "Compute optimized"), `geo` its end ("Americas", "Virginia")."""
        for usage, prefix, prices in (
            ("OnDemand", "", (core, ram)),
            ("Preemptible", "Spot Preemptible ", spot),
        ):
            if prices is None:
                continue
            for part, usd, unit, rg in (
                ("Core", prices[0], "h", group),
                ("Ram", prices[1], "GiBy.h", "RAM"),
            ):
                description = f"{prefix}{family} {part} running in {geo}"
                self.skus.append(
                    sku(description, regions, usd, usage_type=usage, resource_group=rg, unit=unit)
                )

    def add_gpu(
        self,
        model: str,
        regions: Sequence[str],
        geo: str,
        on_demand: float,
        spot: float | None = None,
    ) -> None:
        """A GPU's SKUs: "Nvidia <model> GPU running in <geo>" (and its Spot one)."""
        self.skus.append(
            sku(f"Nvidia {model} GPU running in {geo}", regions, on_demand, resource_group="GPU")
        )
        if spot is not None:
            description = f"Nvidia {model} GPU attached to Spot Preemptible VMs running in {geo}"
            self.skus.append(
                sku(description, regions, spot, usage_type="Preemptible", resource_group="GPU")
            )

    def add_others(self, regions: Sequence[str], geo: str) -> None:
        """SKUs a client must pass over: commitments, sole tenancy, custom extended memory,
        a licence, a disk, egress, a virtual workstation GPU, a Windows licence."""
        others = [
            sku(
                f"Commitment v1: N2 Cpu in {geo} for 1 Year",
                regions,
                0.019915,
                usage_type="Commit1Yr",
            ),
            sku(f"N2 Sole Tenancy Instance Core running in {geo}", regions, 0.0348),
            sku(
                f"N2 Custom Extended Instance Ram running in {geo}",
                regions,
                0.009,
                resource_group="RAM",
                unit="GiBy.h",
            ),
            sku(
                "Licensing Fee for Windows Server 2022 Datacenter Edition (CPU cost)",
                regions,
                0.046,
                resource_family="License",
                resource_group="Windows",
            ),
            sku(
                f"Storage PD Capacity in {geo}",
                regions,
                0.04,
                resource_family="Storage",
                resource_group="PDStandard",
                unit="GiBy.mo",
            ),
            sku(
                f"Network Internet Egress from {geo} to APAC",
                regions,
                0.12,
                resource_family="Network",
                resource_group="PremiumInternetEgress",
                unit="GiBy",
            ),
            sku(
                f"Nvidia Tesla T4 Virtual Workstation GPU running in {geo}",
                regions,
                0.55,
                resource_group="GPU",
            ),
        ]
        self.skus.extend(others)

    def _handle(self, request: Request) -> Answer:
        parts = request.path.strip("/").split("/")
        if request.method != "GET" or parts[:2] != ["v1", "services"] or parts[3:] != ["skus"]:
            return _error(404, "NOT_FOUND", f"The requested URL {request.path} was not found.")
        query = {k: v[0] for k, v in parse_qs(request.query).items()}
        refused = self._refused(request, query)
        if refused is not None:
            return refused
        if parts[2] != COMPUTE:
            return _error(404, "NOT_FOUND", f"Service {parts[2]} not found.")
        if query.get("currencyCode", "USD") != "USD":
            return _error(400, "INVALID_ARGUMENT", "this fake serves USD only")
        found = self.skus
        try:
            size = min(int(query.get("pageSize") or self.page_size), self.page_size)
            start = _offset(query.get("pageToken", ""))
        except ValueError:
            return _error(400, "INVALID_ARGUMENT", "Invalid page token.")
        body: dict[str, Any] = {"skus": found[start : start + size]}
        if start + size < len(found):
            body["nextPageToken"] = _token(start + size)
        return Answer.json(body)

    def _refused(self, request: Request, query: dict[str, str]) -> Answer | None:
        if self.api_key is None and self.token is None:
            return None
        if self.api_key is not None and query.get("key") == self.api_key:
            return None
        bearer = request.headers.get("authorization", "")
        if self.token is not None and bearer == f"Bearer {self.token}":
            return None
        if "key" in query:
            return _error(
                400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."
            )
        if bearer:
            return _error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            )
        return _error(
            403,
            "PERMISSION_DENIED",
            "The request is missing a valid API key.",
        )


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"skus:{offset}".encode()).decode()


def _offset(token: str) -> int:
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(token) from exc
    prefix, _, number = text.partition(":")
    if prefix != "skus" or not number.isdigit():
        raise ValueError(token)
    return int(number)


def _error(code: int, status: str, message: str) -> Answer:
    return Answer.json({"error": {"code": code, "message": message, "status": status}}, code)
