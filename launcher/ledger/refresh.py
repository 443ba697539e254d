"""`list --refresh`: ask each cluster's provider what runs, instead of trusting the record
(a cluster taken down outside the launcher, or by its own autostop, shows as gone)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from launcher.config.loader import Overrides, parse_config
from launcher.errors import LauncherError
from launcher.ledger.keeping import note_listing
from launcher.ledger.record import ClusterRecord, ClusterState, all_gone
from launcher.ledger.store import read_record, update_record
from launcher.providers.base import TAG_AUTOSTOPPED
from launcher.providers.factory import make_provider

GONE_NOTE = "not found by its provider at a refresh: taken down outside this machine's launcher"


@dataclass(frozen=True)
class Refreshed:
    record: ClusterRecord
    problem: str | None = None  # why the provider could not be asked (the record is as kept)


def refresh(record: ClusterRecord) -> Refreshed:
    if record.state == ClusterState.GONE:
        return Refreshed(record)
    if not record.config_text:
        return Refreshed(record, "its config was not recorded; run `launcher status` on it")
    try:
        config = parse_config(  # only to list its nodes: its local files are not needed
            record.config_text,
            record.config_path,
            Overrides(cluster_name=record.name),
            local_files=False,
        )
        provider = make_provider(config)
        nodes = provider.nodes()
        stopped = provider.stopped_nodes() if not nodes else []
    except LauncherError as exc:
        return Refreshed(record, str(exc))
    if nodes:
        return Refreshed(note_listing(config, nodes) or record)
    now = time.time()
    if stopped:
        autostopped = any(n.tags.get(TAG_AUTOSTOPPED) for n in stopped)
        state = ClusterState.AUTOSTOPPED if autostopped else ClusterState.STOPPED
        note = f"{len(stopped)} stopped node(s); `launcher up` starts them again"
    else:
        state, note = ClusterState.GONE, GONE_NOTE

    def change(kept: ClusterRecord | None) -> ClusterRecord:
        current = kept or record
        if current.state == state:  # as recorded (by its autostop): keep how it got there
            return all_gone(current, now, state, current.state_note)
        return all_gone(current, now, state, note)

    return Refreshed(update_record(record.name, change) or read_record(record.name) or record)
