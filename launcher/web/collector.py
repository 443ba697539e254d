"""Polls the running clusters this machine knows, in the background, for the page.

Every `interval` seconds the records are read again (only files that changed), and each
cluster recorded up is polled on a thread of its own (`probe`: its nodes, its autoscaler's
state, its runs, and the new lines of its head's timeline, copied here). Page requests only
read what the last polls left (`snapshot`), so they never wait on a cluster. A poll that
fails, or has not answered after `timeout` seconds, marks the cluster unreachable (with what
the last answer said); no second poll of it starts while one is still out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, NoClusterError
from launcher.ledger.record import ClusterRecord, ClusterState
from launcher.ledger.refresh import refresh
from launcher.ledger.store import parse_record, records_dir
from launcher.runs import store as run_store
from launcher.runs.model import Run
from launcher.web import history
from launcher.web.model import Event, Live, sample_of

SEEN_SAMPLES = 5000  # the page's own samples of a cluster whose head keeps no timeline

Probe = Callable[[ClusterRecord], Live]


RUNS_EVERY_S = 30.0  # a controller that supervises runs is asked this often at most


class RunsKept:
    """Each cluster's runs as last read: this machine's and its controllers' (not the
    copies each node keeps: asking every node on every poll would cost a command per node),
    read again at most every RUNS_EVERY_S. Shared by the polls' threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._kept: dict[str, tuple[float, tuple[Run, ...]]] = {}
        self._lock = threading.Lock()

    def of(self, config: ClusterConfig, read: Callable[[], tuple[Run, ...]]) -> tuple[Run, ...]:
        now = self.clock()
        with self._lock:
            kept = self._kept.get(config.cluster_name)
        if kept is not None and now - kept[0] < RUNS_EVERY_S:
            return kept[1]
        try:
            runs = read()
        except LauncherError:
            runs = kept[1] if kept else ()
        with self._lock:
            self._kept[config.cluster_name] = (now, runs)
        return runs


def probe_cluster(record: ClusterRecord, runs: RunsKept) -> Live:
    """Ask a running cluster what it runs now (and copy its timeline's new lines here)."""
    from launcher.cluster.head import connect
    from launcher.cluster.ops import status
    from launcher.runs.listing import known_runs

    config = parse_config(
        record.config_text,
        record.config_path,
        Overrides(cluster_name=record.name),
        local_files=False,
    )
    found = status(config)
    if not found.nodes:
        refresh(record)  # recorded gone (or stopped) as `list --refresh` would
    head = next((n for n in found.nodes if n.kind.value == "head"), None)
    if head is not None and found.ray_address is not None:
        with contextlib.suppress(NoClusterError):
            history.fetch(connect(config, head=head), record.name)
    return Live(
        nodes=found.nodes,
        autoscaler=found.autoscaler,
        autoscaler_running=found.autoscaler_running,
        ray_address=found.ray_address,
        runs=runs.of(config, lambda: tuple(known_runs(config, from_cluster=False))),
        polled_at=time.time(),
    )


@dataclass
class _Cluster:
    record: ClusterRecord
    mtime: float
    timeline: history.LocalTimeline
    file: str
    live: Live | None = None
    poll: Future[Live] | None = None
    poll_started: float = 0.0


class Collector:
    def __init__(
        self,
        *,
        interval: float = 3.0,
        timeout: float = 30.0,
        probe: Probe | None = None,
        clock: Callable[[], float] = time.time,
        workers: int = 8,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.probe = probe or functools.partial(probe_cluster, runs=RunsKept())
        self.clock = clock
        self.generation = 0  # grows whenever something the page shows changed
        self._clusters: dict[str, _Cluster] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="web-poll")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading (page requests) --------------------------------------------------------
    def names(self) -> list[str]:
        with self._lock:
            return list(self._clusters)

    def snapshot(self, name: str) -> tuple[ClusterRecord, Live | None, Sequence[Event]] | None:
        with self._lock:
            cluster = self._clusters.get(name)
            if cluster is None:
                return None
            return cluster.record, cluster.live, cluster.timeline.events

    def everything(self) -> tuple[list[ClusterRecord], dict[str, Live]]:
        with self._lock:
            records = [c.record for c in self._clusters.values()]
            live = {n: c.live for n, c in self._clusters.items() if c.live is not None}
        return records, live

    # -- polling --------------------------------------------------------------------------
    def start(self) -> None:
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="web-collector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        """Read the records and local timelines again, take in finished polls, start new
        ones. Never waits on a cluster."""
        changed = self._read_records()
        now = self.clock()
        with self._lock:
            clusters = list(self._clusters.values())
        for cluster in clusters:
            changed |= cluster.timeline.refresh()
            changed |= self._take_poll(cluster, now)
            if cluster.poll is None and cluster.record.state == ClusterState.UP:
                cluster.poll_started = now
                cluster.poll = self._pool.submit(self.probe, cluster.record)
        if changed:
            with self._lock:
                self.generation += 1

    def _read_records(self) -> bool:
        changed = False
        seen: dict[str, tuple[Path, float]] = {}
        for path in sorted(records_dir().glob("*.json")):
            with contextlib.suppress(OSError):
                seen[str(path)] = (path, path.stat().st_mtime)
        with self._lock:
            by_file = {c.file: c for c in self._clusters.values()}
        for key, (path, mtime) in seen.items():
            cluster = by_file.get(key)
            if cluster is not None and cluster.mtime == mtime:
                continue
            try:
                record = parse_record(path.read_text())
            except OSError:
                record = None
            if record is None:
                continue
            changed = True
            with self._lock:
                old = self._clusters.get(record.name)
                if old is None:
                    timeline = history.LocalTimeline(history.local_path(record.name))
                    fresh = _Cluster(record, mtime, timeline, key)
                    fresh.live = _runs_only(record) if record.state != ClusterState.UP else None
                    self._clusters[record.name] = fresh
                else:
                    if record.state not in (old.record.state, ClusterState.UP):
                        old.live = _keep_runs(old.live, record)
                    old.record, old.mtime, old.file = record, mtime, key
        return changed

    def _take_poll(self, cluster: _Cluster, now: float) -> bool:
        poll = cluster.poll
        if poll is None:
            return False
        if not poll.done():
            late = now - cluster.poll_started
            if late > self.timeout and not (cluster.live and cluster.live.error):
                cluster.live = _failed(cluster.live, f"no answer in {late:.0f} s")
                return True
            return False
        cluster.poll = None
        try:
            found = poll.result()
        except Exception as exc:  # a cluster's failure is shown, not raised
            cluster.live = _failed(cluster.live, str(exc) or type(exc).__name__)
            return True
        seen = (
            *(cluster.live.seen if cluster.live else ()),
            sample_of(found.nodes, found.autoscaler, now),
        )
        cluster.live = dataclasses.replace(found, seen=seen[-SEEN_SAMPLES:])
        if cluster.record.state != ClusterState.UP:
            # Taken down while the poll was out: what it listed is no longer there.
            cluster.live = _keep_runs(cluster.live, cluster.record)
        return True


def _failed(live: Live | None, why: str) -> Live:
    return dataclasses.replace(live or Live(), error=why)


def _runs_only(record: ClusterRecord) -> Live:
    """A cluster not running: the runs recorded here."""
    return Live(runs=tuple(run_store.local_runs(record.name)))


def _keep_runs(live: Live | None, record: ClusterRecord) -> Live:
    """A cluster that stopped running: what the page saw of it stays, its runs read here."""
    kept = live or Live()
    runs = kept.runs or tuple(run_store.local_runs(record.name))
    return dataclasses.replace(
        kept,
        runs=runs,
        error="",
        nodes=(),
        polled_at=None,
        autoscaler=None,  # its pending demand went with it
        autoscaler_running=False,
        ray_address=None,
    )
