"""`launcher autostop` and `up --idle-minutes-to-autostop`: tell the head's autoscaler when
to stop the cluster (the head acts on it by itself; see launcher/autoscaler/autostop.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex

from launcher.autoscaler.spec import AUTOSTOP_FILE, HEAD_DIR
from launcher.cluster.head import HeadSession, connect
from launcher.config.model import Autostop, ClusterConfig
from launcher.errors import LauncherError, UsageError
from launcher.records.store import update_record


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


def set_autostop(
    config: ClusterConfig, setting: Autostop | None, session: HeadSession | None = None
) -> HeadSession:
    """Write the autostop setting (None: cancel it) where the head's autoscaler reads it
    every tick, and into this machine's record of the cluster."""
    session = session or connect(config)
    body = json.dumps(
        {"cancelled": True}
        if setting is None
        else {"idle_minutes": setting.idle_minutes, "down": setting.down}
    )
    command = f"mkdir -p {HEAD_DIR} && printf %s {shlex.quote(body)} > {AUTOSTOP_FILE}"
    result = session.daemon_runner.run(command, session.env)
    if not result.ok:
        raise LauncherError(
            f"could not set autostop on the head of {config.cluster_name}: "
            f"{result.output_tail.strip() or 'exit code ' + str(result.exit_code)}"
        )
    recorded = None if setting is None else dataclasses.asdict(setting)
    update_record(
        config.cluster_name,
        lambda r: None if r is None else dataclasses.replace(r, autostop=recorded),
    )
    return session
