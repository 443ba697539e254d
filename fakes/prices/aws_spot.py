"""EC2's spot price history is moto's (fakes/aws/server.py): moto answers
DescribeSpotPriceHistory for every zone an instance type is offered in, at one price
(0.00001). `zone_prices` gives chosen (instance type, zone) pairs their own price, on the
same wire, for tests of which zone's price a cluster pays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest


def zone_prices(monkeypatch: pytest.MonkeyPatch, prices: Mapping[tuple[str, str], float]) -> None:
    """Make moto's DescribeSpotPriceHistory answer `prices[(instance_type, zone)]` for those
    pairs (others keep moto's price); undone with `monkeypatch`."""
    from moto.core.responses import ActionResult
    from moto.ec2.responses.spot_instances import SpotInstances

    def describe_spot_price_history(self: Any) -> ActionResult:
        types = self._get_param("InstanceTypes", [])
        rows = self.ec2_backend.describe_spot_price_history(types, self._filters_from_querystring())
        history = [
            {
                "InstanceType": r["InstanceType"],
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{prices.get((r['InstanceType'], r['Location']), 0.00001):.6f}",
                "AvailabilityZone": r["Location"],
                "Timestamp": "2026-12-06T10:00:00.000Z",
            }
            for r in rows
        ]
        return ActionResult({"SpotPriceHistory": history})

    monkeypatch.setattr(SpotInstances, "describe_spot_price_history", describe_spot_price_history)
