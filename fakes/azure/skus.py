"""Resource SKUs (`GET /subscriptions/{s}/providers/Microsoft.Compute/skus`) for
fakes/azure/server.py: the fake's VM sizes (catalog.py and `add_size`), each offered in
every location of the catalog and the server's own, in zones 1-3, with Azure's
`restrictions` for what `restrict_size` withholds (the zones stay listed in `locationInfo`,
as Azure lists them)."""

from __future__ import annotations

from typing import Any

from fakes.azure.catalog import LOCATIONS, ZONES
from fakes.azure.routes import Ctx, Reply, handles

SKUS = "Microsoft.Compute/skus"


def _restrictions(restricted: set[tuple[str, str | None]], size: str, location: str) -> list[Any]:
    out: list[Any] = []
    if (size, None) in restricted:
        out.append(
            {
                "type": "Location",
                "values": [location],
                "restrictionInfo": {"locations": [location]},
                "reasonCode": "NotAvailableForSubscription",
            }
        )
    zones = [z for z in ZONES if (size, z) in restricted]
    if zones:
        out.append(
            {
                "type": "Zone",
                "values": [location],
                "restrictionInfo": {"locations": [location], "zones": zones},
                "reasonCode": "NotAvailableForSubscription",
            }
        )
    return out


@handles(SKUS, "list:get")
def list_skus(ctx: Ctx) -> Reply:
    server = ctx.server
    locations = list(dict.fromkeys([server.location, *LOCATIONS]))
    out = []
    for key, size in sorted(server.sizes.items()):
        for location in locations:
            capabilities = [
                {"name": "vCPUs", "value": str(size.vcpus)},
                {"name": "MemoryGB", "value": f"{size.memory_gb:g}"},
                {"name": "LowPriorityCapable", "value": "True"},
            ]
            if size.gpus:
                capabilities.append({"name": "GPUs", "value": str(size.gpus)})
            out.append(
                {
                    "resourceType": "virtualMachines",
                    "name": size.name,
                    "tier": "Standard",
                    "size": size.name.split("_", 1)[-1],
                    "family": size.family,
                    "locations": [location],
                    "locationInfo": [{"location": location, "zones": list(ZONES)}],
                    "capabilities": capabilities,
                    "restrictions": _restrictions(server.restricted, key, location),
                }
            )
    return Reply(200, {"value": out})
