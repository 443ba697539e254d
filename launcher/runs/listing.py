"""The runs of a cluster as any machine with its config can know them: this machine's, and
the copies its nodes keep (newer ones win), for `launcher jobs` and `launcher status`."""

from __future__ import annotations

import contextlib

from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.providers.factory import make_provider
from launcher.runs import replica, store
from launcher.runs.model import Run


def known_runs(config: ClusterConfig, *, from_cluster: bool = True) -> list[Run]:
    best = {r.id: r for r in store.local_runs(config.cluster_name)}
    if from_cluster:
        with contextlib.suppress(LauncherError):
            for run in replica.fetch(make_provider(config), config):
                known = best.get(run.id)
                if known is None or run.updated_at > known.updated_at:
                    best[run.id] = run
    return sorted(best.values(), key=lambda r: r.created_at)


def state_of(run: Run, now: float) -> str:
    """The run's state, and "(unsupervised)" while it has not ended and no supervisor
    holds it."""
    if run.state.ended:
        return run.state.value
    if run.supervisor is None or not run.supervisor.live(now):
        return f"{run.state.value} (unsupervised)"
    return run.state.value
