"""The reclaim notices nodes report in Ray's KV are deleted once the node is gone and past
its reclaim time (one small key per reclaimed node was left for the life of the cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from launcher.autoscaler.daemon import RECLAIM_GRACE_S, Daemon
from launcher.autoscaler.decide.demand import _forget_of, request_line
from launcher.autoscaler.observe.notice_keys import NOTICE_NAMESPACE, NOTICE_PREFIX
from launcher.autoscaler.observe.ray_state import DemandReader


def test_a_request_names_the_notices_to_delete_and_a_plain_read_names_none() -> None:
    assert request_line() == "read\n"
    assert _forget_of(request_line()) == []
    assert _forget_of(request_line(["i-1", "i-2"])) == ["i-1", "i-2"]
    assert _forget_of("read {not json\n") == []  # a garbled request still reads


class _Kv:
    def __init__(self) -> None:
        self.deleted: list[tuple[bytes, bool, bytes]] = []

    def internal_kv_del(self, key: bytes, by_prefix: bool, namespace: bytes) -> int:
        if key.endswith(b"fails"):
            raise RuntimeError("GCS busy")
        self.deleted.append((key, by_prefix, namespace))
        return 1


def test_the_reader_deletes_each_named_notice_and_shrugs_off_a_failure() -> None:
    reader = DemandReader.__new__(DemandReader)  # no GCS needed for this
    kv = _Kv()
    reader.client = kv
    reader.forget_notices(["fails", "i-9"])
    expected = ((NOTICE_PREFIX + "i-9").encode(), False, NOTICE_NAMESPACE.encode())
    assert kv.deleted == [expected]


def test_the_daemon_forgets_only_notices_of_nodes_gone_and_past_reclaim_with_grace() -> None:
    daemon: Any = Daemon.__new__(Daemon)  # only the decision's inputs are set
    now = 10_000.0
    daemon.wall_clock = lambda: now
    daemon.last_listed_ids = {"listed"}
    daemon.last_notices = (
        ("listed", now - 1_000),  # still listed: kept, whatever its time
        ("gone-long-ago", now - RECLAIM_GRACE_S - 1),
        ("gone-just-now", now - RECLAIM_GRACE_S + 30),  # within the grace: kept
        ("not-yet", now + 60),
    )
    assert daemon._stale_notices() == ["gone-long-ago"]


def test_the_aws_watcher_writes_the_keys_the_autoscaler_reads() -> None:
    # The watcher runs where the launcher is not installed, so it carries the values itself.
    from launcher.providers import notice_watch

    assert (notice_watch.NOTICE_PREFIX, notice_watch.NOTICE_NAMESPACE) == (
        NOTICE_PREFIX,
        NOTICE_NAMESPACE,
    )


def test_the_azure_watcher_reads_a_preempt_event_for_its_own_vm() -> None:
    from launcher.providers.notice_watch import parse_scheduled_events

    document = json.dumps(
        {
            "DocumentIncarnation": 2,
            "Events": [
                {
                    "EventId": "a",
                    "EventType": "Freeze",
                    "Resources": ["vm-1"],
                    "NotBefore": "Wed, 02 Dec 2026 10:00:00 GMT",
                },
                {
                    "EventId": "b",
                    "EventType": "Preempt",
                    "Resources": ["VM-1"],
                    "NotBefore": "Wed, 02 Dec 2026 10:00:30 GMT",
                },
            ],
        }
    )
    at = parse_scheduled_events(document, "vm-1", now=0.0)
    assert at == datetime(2026, 12, 2, 10, 0, 30, tzinfo=UTC).timestamp()
    assert parse_scheduled_events(document, "vm-2", now=0.0) is None  # another VM's
    started = document.replace('"Wed, 02 Dec 2026 10:00:30 GMT"', '""')
    assert parse_scheduled_events(started, "vm-1", now=7.0) == 7.0  # begun: no NotBefore
    assert parse_scheduled_events('{"Events": []}', "vm-1", now=0.0) is None
    assert parse_scheduled_events("not json", "vm-1", now=0.0) is None
