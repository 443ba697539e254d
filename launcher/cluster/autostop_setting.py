"""`launcher autostop` and `up --idle-minutes-to-autostop`: tell the head's autoscaler when
to stop the cluster (the head acts on it by itself; see launcher/autoscaler/autostop.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex

from launcher.autoscaler.spec import AUTOSTOP_FILE, HEAD_DIR
from launcher.cluster.head import connect
from launcher.config.model import Autostop, ClusterConfig
from launcher.errors import LauncherError, UsageError
from launcher.ledger.store import update_record


def parse_idle_minutes(value: str) -> float:
    """-i/--idle-minutes: a number of minutes, 0 or more; one clear line otherwise."""
    try:
        minutes = float(value)
    except ValueError:
        raise UsageError(
            f"-i {value}: idle minutes must be a number, e.g. -i 10 (or --cancel)"
        ) from None
    if not math.isfinite(minutes) or minutes < 0:
        raise UsageError(f"-i {value}: idle minutes must be 0 or more, e.g. -i 10")
    return minutes


def set_autostop(config: ClusterConfig, setting: Autostop | None) -> None:
    """Write the autostop setting (None: cancel it) where the head's autoscaler reads it
    every tick, and into this machine's record of the cluster."""
    body = json.dumps(
        {"cancelled": True}
        if setting is None
        else {"idle_minutes": setting.idle_minutes, "down": setting.down}
    )
    command = f"mkdir -p {HEAD_DIR} && printf %s {shlex.quote(body)} > {AUTOSTOP_FILE}"
    _in_force(config, command, "set autostop", setting)


def apply_config_autostop(config: ClusterConfig) -> None:
    """`up` without -i: a config that sets `metadata.launcher.autostop` is in force again
    (what `launcher autostop` set on the head, or cancelled, is dropped); a config without
    one leaves the head's setting as it is (an autostop is not dropped by accident)."""
    if config.autostop is not None:
        _in_force(config, f"rm -f {AUTOSTOP_FILE}", "apply the config's autostop", config.autostop)


def _in_force(config: ClusterConfig, command: str, what: str, setting: Autostop | None) -> None:
    """Run `command` where the head's autoscaler keeps its files (it then reads `setting`),
    and record `setting` in this machine's record of the cluster."""
    session = connect(config)
    result = session.daemon_runner.run(command, session.env)
    if not result.ok:
        raise LauncherError(
            f"could not {what} on the head of {config.cluster_name}: "
            f"{result.output_tail.strip() or 'exit code ' + str(result.exit_code)}"
        )
    recorded = None if setting is None else dataclasses.asdict(setting)
    update_record(
        config.cluster_name,
        lambda r: None if r is None else dataclasses.replace(r, autostop=recorded),
    )


def what_happens(config: ClusterConfig, setting: Autostop) -> str:
    """The setting as the user should read it on this provider: `stop` terminates where
    stopped nodes cannot be kept."""
    from launcher.providers.factory import make_provider

    if setting.down or make_provider(config).traits.keeps_stopped_nodes:
        return setting.describe()
    return (
        f"{setting.describe()}; this provider cannot keep stopped nodes, so the cluster is "
        "terminated then (as with --down)"
    )
