"""Keeping cluster records as commands (and the autoscaler) see nodes come and go: what a
listing means for the record, with each node's price from the provider's offer."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence

from launcher.config.model import Autostop, ClusterConfig
from launcher.ledger.record import ClusterRecord, ClusterState, Seen, all_gone, merge, observe
from launcher.ledger.store import update_record
from launcher.pricing import PriceTable, load_prices
from launcher.pricing.live import cached_prices
from launcher.providers.base import Node, NodeState
from launcher.providers.registry import SPECS


def price_table_label(prices: PriceTable) -> str:
    return f"price table of {prices.as_of} ({prices.source})"


def region_of(config: ClusterConfig) -> str:
    spec = SPECS.get(config.provider.type)
    return spec.region_label(config) if spec else ""


def seen_of(config: ClusterConfig, nodes: Sequence[Node], prices: PriceTable) -> list[Seen]:
    """The listed nodes that exist (a preempted one is gone), with what each costs."""
    spec = SPECS.get(config.provider.type)
    out = []
    for node in nodes:
        if node.state is NodeState.PREEMPTED:
            continue
        node_type = config.node_types.get(node.node_type)
        offer = spec.node_offer(config, node_type, prices) if spec and node_type else None
        price = offer.price if offer else None
        spot = bool(offer and offer.spot)
        hourly = None if price is None else (price.spot if spot else price.on_demand)
        source = "" if price is None else (price.spot_source if spot else price.on_demand_source)
        out.append(
            Seen(
                node.id,
                node.kind.value,
                node.node_type,
                node.created_at,
                offer.description if offer else "unknown",
                spot,
                hourly,
                offer.billed if offer else True,
                source if hourly is not None else "",
            )
        )
    return out


def new_record(config: ClusterConfig, config_text: str, now: float) -> ClusterRecord:
    return ClusterRecord(
        name=config.cluster_name,
        provider=config.provider.type,
        region=region_of(config),
        config_path=os.path.abspath(config.source) if config.source else "",
        config_text=config_text,
        state=ClusterState.UP,
        state_since=now,
    )


def _config_text(config: ClusterConfig) -> str:
    if not config.source:
        return ""
    try:
        with open(config.source) as f:
            return f.read()
    except OSError:
        return ""


def note_listing(
    config: ClusterConfig,
    nodes: Sequence[Node],
    *,
    listed_all: bool = True,
    config_text: str | None = None,
    now: float | None = None,
    autostop: Autostop | None = None,
    autostop_known: bool = False,
) -> ClusterRecord | None:
    """Fold a listing of the cluster's nodes into its record (made when there is none and
    the listing has nodes). A cluster with nodes is up; with none, left as recorded.
    `autostop_known`: `autostop` is the setting in force (the head's autoscaler knows it)."""
    now = time.time() if now is None else now
    spec = SPECS.get(config.provider.type)
    # The live prices `plan` kept on this machine, if any (nothing is fetched here).
    prices = cached_prices(config, spec, load_prices()) if spec else load_prices()
    seen = seen_of(config, nodes, prices)

    def change(record: ClusterRecord | None) -> ClusterRecord | None:
        if record is None:
            if not seen:
                return None
            record = new_record(config, config_text or _config_text(config), now)
        elif config_text:
            record = dataclasses.replace(record, config_text=config_text)
        if seen and record.state != ClusterState.UP:
            record = dataclasses.replace(
                record, state=ClusterState.UP, state_since=now, state_note=""
            )
        record = dataclasses.replace(record, price_table=price_table_label(prices))
        if autostop_known:
            kept = None if autostop is None else dataclasses.asdict(autostop)
            record = dataclasses.replace(record, autostop=kept)
        return observe(record, seen, now, listed_all)

    return update_record(config.cluster_name, change)


def note_gone(
    config: ClusterConfig, note: str, now: float | None = None, state: str = ClusterState.GONE
) -> ClusterRecord | None:
    """Every node of the cluster seen gone (`down` took them; or its autostop stopped them,
    `state` AUTOSTOPPED), and the cluster in `state`."""
    now = time.time() if now is None else now
    return update_record(
        config.cluster_name,
        lambda r: None if r is None else all_gone(r, now, state, note),
    )


def note_copy(name: str, copy: ClusterRecord) -> ClusterRecord | None:
    """Merge a copy of the record kept elsewhere (the head's) into this machine's; the
    head's copy says which autostop is in force."""
    return update_record(
        name,
        lambda r: (
            copy if r is None else dataclasses.replace(merge(r, copy), autostop=copy.autostop)
        ),
    )
