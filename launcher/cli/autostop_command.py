"""`autostop`: set, change or cancel when a running cluster stops itself once idle."""

from __future__ import annotations

import click

from launcher.cli.app import Settings, cli
from launcher.cli.cluster_commands import cli_config, config_argument, name_option
from launcher.cluster.autostop_setting import parse_idle_minutes, set_autostop, what_happens
from launcher.config.model import Autostop
from launcher.errors import UsageError


@cli.command()
@config_argument
@click.option(
    "-i",
    "--idle-minutes",
    "idle_minutes",
    default=None,
    metavar="N",
    help="Stop the cluster once it has been idle N minutes (no Ray task, actor, job or "
    "exec/attach/submit session).",
)
@click.option("--down", is_flag=True, help="Tear the cluster down instead of stopping its nodes.")
@click.option("--cancel", is_flag=True, help="Cancel the cluster's autostop.")
@name_option
@click.pass_obj
def autostop(
    settings: Settings,
    cluster_config_file: str,
    idle_minutes: str | None,
    down: bool,
    cancel: bool,
    cluster_name: str | None,
) -> None:
    """Have the head stop (or, with --down, tear down) the cluster once it is idle; it
    works with this machine off. `launcher status` shows it and the idle time so far."""
    if cancel and (idle_minutes is not None or down):
        raise UsageError("--cancel takes no -i or --down; run it alone to cancel autostop")
    if not cancel and idle_minutes is None:
        raise UsageError("give -i N (minutes idle before the cluster stops) or --cancel")
    setting = None if cancel else Autostop(parse_idle_minutes(idle_minutes or ""), down)
    config = cli_config(cluster_config_file, cluster_name)
    set_autostop(config, setting)
    if setting is None:
        settings.output.line(f"Autostop cancelled for cluster {config.cluster_name}.")
    else:
        settings.output.line(
            f"Autostop set for cluster {config.cluster_name}: {what_happens(config, setting)}; "
            "the head acts on it by itself."
        )
