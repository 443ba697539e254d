"""A fake of Azure's Retail Prices API (`GET /api/retail/prices?$filter=...`), unauthenticated
as the real one: the OData `$filter` subset the API documents (`field eq 'value'` joined by
`and`/`or`, parentheses), pages of `page_size` items linked by `NextPageLink`, and the item
fields Azure returns (`armSkuName`, `armRegionName`, `skuName`, `productName`,
`retailPrice`, `unitOfMeasure`, `type`, ...). A client is sent here by
`LAUNCHER_AZURE_PRICES_URL=<server.prices_url>`.

    with RetailPricesServer() as server:
        server.add_vm("Standard_D4s_v3", "eastus", 0.192, spot=0.038)
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlencode

from fakes.prices.http import Answer, LoopbackServer, Request

PATH = "/api/retail/prices"
_TOKEN = re.compile(r"\s*(\(|\)|'(?:[^']|'')*'|[A-Za-z_][A-Za-z0-9_]*)")


def vm_item(size: str, region: str, price: float, kind: str = "") -> dict[str, Any]:
    """A Linux VM meter: `kind` "" (pay as you go), "Spot" or "Low Priority"."""
    short = size.removeprefix("Standard_").replace("_", " ")
    sku = f"{short} {kind}".strip()
    return {
        "currencyCode": "USD",
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": region,
        "location": region,
        "meterName": sku,
        "productName": f"Virtual Machines {short.split()[0]} Series",
        "skuName": sku,
        "serviceName": "Virtual Machines",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "priceType": "Consumption",
        "isPrimaryMeterRegion": True,
        "armSkuName": size,
    }


class RetailPricesServer(LoopbackServer):
    def __init__(self, page_size: int = 100) -> None:
        super().__init__(self._handle)
        self.items: list[dict[str, Any]] = []
        self.page_size = page_size

    def __enter__(self) -> RetailPricesServer:
        self.start()
        return self

    @property
    def prices_url(self) -> str:
        return self.url + PATH

    def add_vm(self, size: str, region: str, on_demand: float, spot: float | None = None) -> None:
        """A size's Linux pay-as-you-go (and spot) meters, and its Windows one (which a
        client must not take for Linux)."""
        self.items.append(vm_item(size, region, on_demand))
        windows = vm_item(size, region, on_demand * 2)
        windows["productName"] += " Windows"
        self.items.append(windows)
        self.items.append(vm_item(size, region, on_demand * 0.4, "Low Priority"))
        if spot is not None:
            self.items.append(vm_item(size, region, spot, "Spot"))

    def _handle(self, request: Request) -> Answer:
        if request.method != "GET" or request.path.rstrip("/") != PATH:
            return Answer.json({"Error": {"Code": "NotFound"}}, 404)
        query = {k: v[0] for k, v in parse_qs(request.query).items()}
        try:
            matches = _parse(query.get("$filter", ""))
        except ValueError as exc:
            return Answer.json({"Error": {"Code": "BadRequest", "Message": str(exc)}}, 400)
        found = [i for i in self.items if matches(i)]
        skip = int(query.get("$skip", "0"))
        page = found[skip : skip + self.page_size]
        link = None
        if skip + self.page_size < len(found):
            link = f"{self.prices_url}?{urlencode({**query, '$skip': skip + self.page_size})}"
        return Answer.json(
            {
                "BillingCurrency": "USD",
                "CustomerEntityId": "Default",
                "CustomerEntityType": "Retail",
                "Items": page,
                "NextPageLink": link,
                "Count": len(page),
            }
        )


Matcher = Any  # Callable[[dict[str, Any]], bool]


def _parse(text: str) -> Matcher:
    """`text`, an OData filter of the API's subset, as a predicate on items."""
    tokens = _tokens(text)
    if not tokens:
        return lambda item: True
    matcher, rest = _or(tokens)
    if rest:
        raise ValueError(f"unexpected {rest[0]!r} in $filter")
    return matcher


def _tokens(text: str) -> list[str]:
    out, at = [], 0
    while at < len(text.rstrip()):
        found = _TOKEN.match(text, at)
        if found is None:
            raise ValueError(f"cannot read $filter at {text[at:]!r}")
        out.append(found.group(1))
        at = found.end()
    return out


def _or(tokens: list[str]) -> tuple[Matcher, list[str]]:
    left, rest = _and(tokens)
    while rest and rest[0].lower() == "or":
        right, rest = _and(rest[1:])
        left = _either(left, right)
    return left, rest


def _and(tokens: list[str]) -> tuple[Matcher, list[str]]:
    left, rest = _term(tokens)
    while rest and rest[0].lower() == "and":
        right, rest = _term(rest[1:])
        left = _both(left, right)
    return left, rest


def _term(tokens: list[str]) -> tuple[Matcher, list[str]]:
    if tokens and tokens[0] == "(":
        inner, rest = _or(tokens[1:])
        if not rest or rest[0] != ")":
            raise ValueError("unbalanced parentheses in $filter")
        return inner, rest[1:]
    if len(tokens) < 3 or tokens[1].lower() != "eq" or not tokens[2].startswith("'"):
        raise ValueError(f"expected FIELD eq 'VALUE' in $filter at {' '.join(tokens[:3])!r}")
    field, value = tokens[0], tokens[2][1:-1].replace("''", "'")
    # The API compares values without case.
    return (lambda i: str(i.get(field, "")).casefold() == value.casefold()), tokens[3:]


def _either(a: Matcher, b: Matcher) -> Matcher:
    return lambda item: a(item) or b(item)


def _both(a: Matcher, b: Matcher) -> Matcher:
    return lambda item: a(item) and b(item)
