"""The runs of a cluster as any machine with its config can know them: this machine's, the
controller's (for runs a controller supervises: launcher/runs/controller.py), and the copies
the cluster's nodes keep (newer ones win), for `launcher jobs` and `launcher status`."""

from __future__ import annotations

import contextlib
import dataclasses
import os

from launcher.config.model import ClusterConfig, ControllerSettings
from launcher.errors import LauncherError
from launcher.providers.factory import make_provider
from launcher.runs import replica, store
from launcher.runs.model import CONTROLLER_ENV, Run


def known_runs(config: ClusterConfig, *, from_cluster: bool = True) -> list[Run]:
    """This machine's runs, the nodes' copies (`from_cluster`) and the controllers', the
    newest record of each run winning: a run a controller supervises is newest there, one
    supervised from here or another machine is known to this one only by the nodes'
    copies. The controllers are asked last (those of the config and of every record read,
    their word winning a tie), so that a lease they hold is not judged by a heartbeat read
    before the nodes were."""
    local = store.local_runs(config.cluster_name)
    best = {r.id: r for r in local}
    copies: list[Run] = []
    if from_cluster:
        with contextlib.suppress(LauncherError):
            copies = replica.fetch(make_provider(config), config)
    for run in copies:
        known = best.get(run.id)
        if known is None or run.updated_at > known.updated_at:
            best[run.id] = run
    _from_controllers(config, controllers_of(config, [*local, *copies]), best)
    return sorted(best.values(), key=lambda r: r.created_at)


def _from_controllers(
    config: ClusterConfig, controllers: list[ControllerSettings], best: dict[str, Run]
) -> None:
    """Merge into `best` the runs each controller holds (one that does not answer adds
    nothing)."""
    for settings in controllers:
        try:
            held = _controller_runs(settings, config)
        except LauncherError:
            continue
        for run in held:
            known = best.get(run.id)
            if known is None or run.updated_at >= known.updated_at:
                # The record as the controller keeps it, but naming this machine's config.
                path = known.config_path if known is not None else config.source or ""
                best[run.id] = dataclasses.replace(run, config_path=path)


def controllers_of(config: ClusterConfig, runs: list[Run]) -> list[ControllerSettings]:
    """The controllers that may hold the cluster's runs: the config's, and those this
    machine's runs name. None on a controller itself (its runs are its own)."""
    if os.environ.get(CONTROLLER_ENV):
        return []
    base = config.recover.controller
    found = {str(base): base} if base is not None else {}
    for run in runs:
        settings = controller_for(config, run)
        if settings is not None:
            found.setdefault(str(settings), settings)
    return list(found.values())


def controller_for(config: ClusterConfig, run: Run) -> ControllerSettings | None:
    """The controller that supervises `run`, or None."""
    if not run.controller or os.environ.get(CONTROLLER_ENV):
        return None
    base = config.recover.controller
    if base is not None and str(base) == run.controller:
        return base
    from launcher.runs.controller import settings_from

    return settings_from(run.controller, base, config.auth.ssh_private_key)


def _controller_runs(settings: ControllerSettings, config: ClusterConfig) -> list[Run]:
    from launcher.runs.controller import Controller, runs

    controller = Controller(settings)
    try:
        return runs(controller, config.cluster_name)
    finally:
        controller.close()


def state_of(run: Run, now: float) -> str:
    """The run's state, and "(unsupervised)" while it has not ended and no supervisor
    holds it."""
    if run.state.ended:
        return run.state.value
    if run.supervisor is None or not run.supervisor.live(now):
        return f"{run.state.value} (unsupervised)"
    return run.state.value
