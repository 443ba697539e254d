"""GCP's published prices: Compute Engine's SKUs in the Cloud Billing Catalog API
(`GET /v1/services/6F81-5844-456A/skus`, pages linked by `nextPageToken`, in USD).

GCE does not price machine types: it prices a vCPU-hour and a GiB-hour of memory of each
machine *family* ("N2 Instance Core running in Americas", "Spot Preemptible N2 Instance Ram
running in ..."), per region (`serviceRegions`; every zone of a region pays the same), and
each GPU by the hour ("Nvidia Tesla T4 GPU running in ..."). So the cache keeps *rates*
(units such as `n2/core`, `n2/ram`, `gpu/nvidia-tesla-t4`, of kind `RATE`), and `derive`
prices a machine type as vCPUs x core rate + GiB x memory rate (+ its bundled GPUs), taking
its size from the static table's row (`PriceRequest.known`) or from its name's shape.

Families priced: e2, n1, n2, n2d, c2, c2d, c3, c3d, n4 (`-standard-N`, `-highmem-N`,
`-highcpu-N` where the family has them), a2 (`a2-highgpu-Ng`, `a2-megagpu-16g`,
`a2-ultragpu-Ng`, with their A100s), g2 (`g2-standard-N`, with their L4s), and custom types
of n1 (`custom-CPUS-MB`), n2 and n2d (`n2-custom-CPUS-MB`). Shared-core types (e2-micro,
f1-micro...), extended-memory custom types, local-SSD variants (`-lssd`) and other families
(m1, m3, a3, t2d, ...) keep the static table's price.

The catalog is read with an API key when `LAUNCHER_GCP_BILLING_API_KEY` is set (the Catalog
accepts a key: Google's documented way; the name is not a `LAUNCHER_*PRICES*` one, so `up`
does not hand the key to the head, which reads with its own identity), else with an OAuth
token of the cluster's credentials, found as the GCP provider finds them
(`provider.gcp_credentials`, else Application Default Credentials).
`LAUNCHER_GCP_PRICES_URL` replaces the API's root (https://cloudbilling.googleapis.com/), as
gcloud's `CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING` also does, e.g. for a test's fake.
Plain `urllib` for the calls; google-auth only to get a token.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from launcher.pricing import HourlyPrice, MachineInfo
from launcher.pricing.quotes import (
    ACCELERATOR,
    MACHINE,
    MARKETS,
    ON_DEMAND,
    SPOT,
    PriceRequest,
    Quote,
)

DEFAULT_ROOT = "https://cloudbilling.googleapis.com/"
COMPUTE_SERVICE = "6F81-5844-456A"  # Compute Engine's service id in the catalog
SOURCE_NAME = "Cloud Billing Catalog API"
RATE = "rate"  # the kind of a per-vCPU, per-GiB or per-GPU hourly quote
_PAGES = 40  # at most this many pages (5000 SKUs each) of one walk: a bound on time
_WALK_REUSE_S = 60.0  # a walk's other market is kept this long for the next fetch

# The machine family a SKU description names (before " Core"/" Ram running in ..."), as GCE
# names machine types.
FAMILIES: Mapping[str, str] = {
    "N1 Predefined Instance": "n1",
    "Custom Instance": "n1-custom",
    "E2 Instance": "e2",
    "N2 Instance": "n2",
    "N2 Custom Instance": "n2-custom",
    "N2D AMD Instance": "n2d",
    "N2D AMD Custom Instance": "n2d-custom",
    "Compute optimized": "c2",
    "C2D AMD Instance": "c2d",
    "C3 Instance": "c3",
    "C3D Instance": "c3d",
    "N4 Instance": "n4",
    "A2 Instance": "a2",
    "G2 Instance": "g2",
}
# The GPU a description names ("Nvidia <model> GPU running in ..."), as GCE names it.
GPUS: Mapping[str, str] = {
    "Tesla K80": "nvidia-tesla-k80",
    "Tesla P4": "nvidia-tesla-p4",
    "Tesla P100": "nvidia-tesla-p100",
    "Tesla T4": "nvidia-tesla-t4",
    "Tesla V100": "nvidia-tesla-v100",
    "Tesla A100": "nvidia-tesla-a100",
    "A100 80GB": "nvidia-a100-80gb",
    "L4": "nvidia-l4",
    "H100 80GB": "nvidia-h100-80gb",
}
# GiB of memory per vCPU of each predefined shape, by family.
SHAPES: Mapping[str, Mapping[str, float]] = {
    "e2": {"standard": 4, "highmem": 8, "highcpu": 1},
    "n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
    "n2": {"standard": 4, "highmem": 8, "highcpu": 1},
    "n2d": {"standard": 4, "highmem": 8, "highcpu": 1},
    "c2": {"standard": 4},
    "c2d": {"standard": 4, "highmem": 8, "highcpu": 2},
    "c3": {"standard": 4, "highmem": 8, "highcpu": 2},
    "c3d": {"standard": 4, "highmem": 8, "highcpu": 2},
    "n4": {"standard": 4, "highmem": 8, "highcpu": 2},
}
# g2-standard-N: N vCPUs, 4N GiB and this many L4s.
_G2_GPUS: Mapping[int, int] = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}
_PREDEFINED = re.compile(r"^([a-z][a-z0-9]*)-(standard|highmem|highcpu)-(\d+)$")
_CUSTOM = re.compile(r"^(?:(n2|n2d)-)?custom-(\d+)-(\d+)$")
_A2 = re.compile(r"^a2-(highgpu|megagpu|ultragpu)-(\d+)g$")
_PART = re.compile(r"^(.+?) (Core|Ram) running in (.+)$")
_GPU = re.compile(r"^Nvidia (.+?) GPU (?:attached to Spot Preemptible VMs )?running in (.+)$")
_USAGE = {"OnDemand": ON_DEMAND, "Preemptible": SPOT}


@dataclass(frozen=True)
class Shape:
    """What GCE bills a machine type by: its family's rates, its size, its bundled GPUs."""

    family: str
    vcpus: int
    memory_gib: float
    gpu: str | None = None
    gpus: int = 0

    def units(self) -> tuple[str, ...]:
        rates = (f"{self.family}/core", f"{self.family}/ram")
        return rates + ((f"gpu/{self.gpu}",) if self.gpu and self.gpus else ())


def shape_of(machine: str, known: MachineInfo | None = None) -> Shape | None:
    """How `machine` is billed, None where this module does not price it. The size is the
    table's (`known`) where it has a row, else the one the name's shape gives."""
    shape = _named_shape(machine)
    if shape is None or known is None:
        return shape
    gpus = known.gpus if shape.gpu and known.gpus else shape.gpus
    return Shape(shape.family, known.vcpus, known.memory_gib, shape.gpu, gpus)


def _named_shape(machine: str) -> Shape | None:
    if found := _PREDEFINED.match(machine):
        family, kind, count = found.group(1), found.group(2), int(found.group(3))
        if family == "g2" and kind == "standard" and count in _G2_GPUS:
            return Shape("g2", count, 4.0 * count, "nvidia-l4", _G2_GPUS[count])
        per_cpu = SHAPES.get(family, {}).get(kind)
        return Shape(family, count, per_cpu * count) if per_cpu and count > 0 else None
    if found := _CUSTOM.match(machine):
        family = f"{found.group(1) or 'n1'}-custom"
        return Shape(family, int(found.group(2)), int(found.group(3)) / 1024)
    if found := _A2.match(machine):
        kind, count = found.group(1), int(found.group(2))
        if kind == "megagpu":
            return Shape("a2", 96, 1360.0, "nvidia-tesla-a100", 16) if count == 16 else None
        if count not in (1, 2, 4, 8):
            return None
        if kind == "ultragpu":
            return Shape("a2", 12 * count, 170.0 * count, "nvidia-a100-80gb", count)
        return Shape("a2", 12 * count, 85.0 * count, "nvidia-tesla-a100", count)
    return None


def machine_info(machine: str) -> MachineInfo | None:
    """A size-only row (no price yet) for a machine type the table lacks, from its name."""
    shape = _named_shape(machine)
    if shape is None:
        return None
    model = shape.gpu if shape.gpus else None
    unpriced = HourlyPrice(0.0, None)
    return MachineInfo(machine, shape.vcpus, shape.memory_gib, shape.gpus, model, unpriced)


# -- the catalog's SKUs -----------------------------------------------------------------------
def _usd(money: Mapping[str, Any]) -> float:
    return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9


def hourly_rate(sku: Mapping[str, Any], unit: str) -> float | None:
    """The USD rate of the SKU's current price (its last pricingInfo), per hour for cores and
    GPUs, per GiB-hour for memory; None where it is priced in another unit or currency."""
    infos = sku.get("pricingInfo") or []
    if not infos:
        return None
    expression = infos[-1].get("pricingExpression") or {}
    wanted = "GiBy.h" if unit.endswith("/ram") else "h"
    if expression.get("usageUnit") != wanted:
        return None
    tiers = [t for t in expression.get("tieredRates") or [] if t.get("unitPrice")]
    first = [t for t in tiers if float(t.get("startUsageAmount") or 0) <= 0]
    if not first or first[-1]["unitPrice"].get("currencyCode", "USD") != "USD":
        return None
    price = _usd(first[-1]["unitPrice"])
    return price if price > 0 else None


def unit_of(sku: Mapping[str, Any]) -> tuple[str, str] | None:
    """(market, unit) of a Compute Engine VM or GPU SKU; None for any other SKU
    (commitments, sole tenancy, licences, disks, network, families not priced here)."""
    category = sku.get("category") or {}
    market = _USAGE.get(str(category.get("usageType", "")))
    if category.get("resourceFamily") != "Compute" or market is None:
        return None
    text = " ".join(str(sku.get("description", "")).split())
    for prefix in ("Spot Preemptible ", "Preemptible "):
        text = text.removeprefix(prefix)
    if found := _PART.match(text):
        family = FAMILIES.get(found.group(1))
        return (market, f"{family}/{found.group(2).lower()}") if family else None
    if found := _GPU.match(text):
        gpu = GPUS.get(found.group(1))
        return (market, f"gpu/{gpu}") if gpu else None
    return None


def region_rates(skus: Sequence[Mapping[str, Any]], region: str) -> dict[tuple[str, str], float]:
    """Per (market, unit), the rate of `region` in `skus` (the lowest, should two SKUs
    name the same: the older "Preemptible ..." and the newer "Spot Preemptible ...")."""
    rates: dict[tuple[str, str], float] = {}
    for sku in skus:
        if region not in (sku.get("serviceRegions") or ()):
            continue
        key = unit_of(sku)
        price = hourly_rate(sku, key[1]) if key else None
        if key is not None and price is not None:
            rates[key] = min(price, rates.get(key, price))
    return rates


# -- fetching ---------------------------------------------------------------------------------
def catalog_root(environ: Mapping[str, str] | None = None) -> str:
    env = environ if environ is not None else os.environ
    root = (
        env.get("LAUNCHER_GCP_PRICES_URL")
        or env.get("CLOUDSDK_API_ENDPOINT_OVERRIDES_CLOUDBILLING")
        or DEFAULT_ROOT
    )
    return root if root.endswith("/") else root + "/"


def _token(provider_config: Any) -> str:
    """An OAuth access token of the cluster's credentials (as the GCP provider finds them)."""
    from launcher.providers.gcp.spec import GcpProviderConfig

    settings = provider_config if isinstance(provider_config, GcpProviderConfig) else None
    if settings and settings.credentials_type == "credentials_token" and settings.credentials:
        return settings.credentials
    import google.auth
    from google.auth.transport.requests import Request

    from launcher.providers.gcp.clients import SCOPES, _service_account_info

    credentials: Any
    if settings and settings.credentials_type == "service_account" and settings.credentials:
        from google.oauth2 import service_account

        info = _service_account_info(settings.credentials)
        make = service_account.Credentials.from_service_account_info
        credentials = make(info, scopes=SCOPES)  # type: ignore[no-untyped-call]
    else:
        credentials, _ = google.auth.default(scopes=SCOPES)
    credentials.refresh(Request())
    return str(credentials.token)


def _get(url: str, headers: Mapping[str, str], timeout_s: float) -> Mapping[str, Any]:
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            data: Mapping[str, Any] = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"HTTP {exc.code}: {_error_message(exc)}") from exc
    return data


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
        return str(body["error"]["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(exc.reason)


def walk(
    request: PriceRequest, timeout_s: float, environ: Mapping[str, str] | None = None
) -> dict[tuple[str, str], float]:
    """Every page of Compute Engine's SKUs; the rates of the request's region."""
    env = environ if environ is not None else os.environ
    query = {"currencyCode": "USD"}
    headers: dict[str, str] = {}
    if key := env.get("LAUNCHER_GCP_BILLING_API_KEY"):
        query["key"] = key
    else:
        headers["Authorization"] = f"Bearer {_token(request.provider_config)}"
    base = f"{catalog_root(env)}v1/services/{COMPUTE_SERVICE}/skus"
    skus: list[Mapping[str, Any]] = []
    page_query = query
    for _ in range(_PAGES):
        page = _get(f"{base}?{urlencode(page_query)}", headers, timeout_s)
        skus += page.get("skus") or []
        token = str(page.get("nextPageToken") or "")
        if not token:
            break
        page_query = {**query, "pageToken": token}
    else:
        raise RuntimeError(f"the catalog has more than {_PAGES} pages; stopped reading it")
    return region_rates(skus, request.region)


class GcpPrices:
    title = SOURCE_NAME

    def __init__(self) -> None:
        # One walk reads both markets: the other one's rates are kept briefly for the
        # fetch that `live_prices` makes next (the same region, just after).
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, str, str], tuple[float, dict[str, float]]] = {}

    def units(self, request: PriceRequest, market: str) -> tuple[str, ...]:
        wanted: set[str] = set()
        for machine in request.machines:
            shape = shape_of(machine, request.known.get(machine))
            wanted.update(shape.units() if shape else ())
        wanted.update(f"gpu/{name}" for name in request.accelerators)
        return tuple(sorted(wanted))

    def fetch(
        self, request: PriceRequest, market: str, units: Sequence[str], timeout_s: float
    ) -> dict[str, list[Quote]]:
        now = time.time()
        key = (catalog_root(), request.region, market)
        with self._lock:
            kept_at, rates = self._kept.pop(key, (0.0, {}))
        if not 0 <= time.monotonic() - kept_at < _WALK_REUSE_S:
            walked = walk(request, timeout_s)
            rates = {u: p for (m, u), p in walked.items() if m == market}
            with self._lock:
                for other in MARKETS:
                    if other != market:
                        theirs = {u: p for (m, u), p in walked.items() if m == other}
                        self._kept[(key[0], key[1], other)] = (time.monotonic(), theirs)
        return {
            u: [Quote(u, market, rates[u], request.region, SOURCE_NAME, now, RATE)]
            if u in rates
            else []
            for u in units
        }

    def derive(self, quotes: Sequence[Quote], request: PriceRequest) -> list[Quote]:
        rates = {(q.market, q.machine): q for q in quotes if q.kind == RATE}
        out: list[Quote] = []
        for machine in request.machines:
            shape = shape_of(machine, request.known.get(machine))
            if shape is None:
                continue
            units = shape.units()
            counts = (shape.vcpus, shape.memory_gib, shape.gpus)[: len(units)]
            for market in MARKETS:
                parts = [rates.get((market, u)) for u in units]
                found = [q for q in parts if q is not None]
                if len(found) < len(parts):
                    continue
                usd = round(sum(n * q.usd_per_hour for n, q in zip(counts, found, strict=True)), 6)
                when = min(q.fetched_at for q in found)
                out.append(Quote(machine, market, usd, request.region, SOURCE_NAME, when, MACHINE))
        for name in request.accelerators:
            for market in MARKETS:
                rate = rates.get((market, f"gpu/{name}"))
                if rate is not None:
                    out.append(
                        Quote(
                            name,
                            market,
                            rate.usd_per_hour,
                            request.region,
                            SOURCE_NAME,
                            rate.fetched_at,
                            ACCELERATOR,
                        )
                    )
        return out


SOURCE = GcpPrices()
