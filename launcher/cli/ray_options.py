"""Options `ray`'s cluster verbs take that mean the same on every verb here: how output
looks (`--log-style`, `--log-color`), `-v` after the verb, and `--disable-usage-stats`.

The output options act on the run's `Settings` as they are parsed, so the commands need
no parameter for them: a script written for `ray up --log-style record -v` runs unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from launcher.cli.app import Settings

F = Callable[..., Any]

# Ray's own variable: its head stops sending usage stats when it starts with it at 0.
USAGE_STATS_OFF = {"RAY_USAGE_STATS_ENABLED": "0"}


def usage_stats_env(disable_usage_stats: bool) -> dict[str, str]:
    """What `--disable-usage-stats` adds to the head's (and the command's) environment."""
    return dict(USAGE_STATS_OFF) if disable_usage_stats else {}


def _settings(ctx: click.Context) -> Settings | None:
    return ctx.find_object(Settings)


def _log_style(ctx: click.Context, param: click.Parameter, value: str) -> str:
    settings = _settings(ctx)
    if settings is not None and value != "auto":
        # record: plain lines, never a live view; pretty: live views where there is a terminal.
        settings.output.set_live(value != "record")
    return value


def _log_color(ctx: click.Context, param: click.Parameter, value: str) -> str:
    settings = _settings(ctx)
    if settings is not None and value != "auto":
        settings.output.set_color(value == "true")
    return value


def _verbose(ctx: click.Context, param: click.Parameter, value: int) -> int:
    settings = _settings(ctx)
    if settings is not None and value:
        settings.verbose = True
    return value


def log_options(f: F) -> F:
    """`--log-style`, `--log-color` and `-v/--verbose` after the verb, as `ray` has them."""
    f = click.option(
        "-v",
        "--verbose",
        "verbose_after_verb",
        count=True,
        expose_value=False,
        callback=_verbose,
        help="Show tracebacks and more detail on errors (as `launcher -v`).",
    )(f)
    f = click.option(
        "--log-color",
        type=click.Choice(["auto", "false", "true"]),
        default="auto",
        expose_value=False,
        callback=_log_color,
        help="Colors in the output: auto (on a terminal, unless NO_COLOR is set), false, true.",
    )(f)
    return click.option(
        "--log-style",
        type=click.Choice(["auto", "record", "pretty"]),
        default="auto",
        expose_value=False,
        callback=_log_style,
        help="record: plain lines, no live view (for logs and CI); pretty: live views; "
        "auto: live views on a terminal.",
    )(f)


def usage_stats_option(f: F) -> F:
    """`--disable-usage-stats`: the cluster's head starts Ray with its usage stats off."""
    return click.option(
        "--disable-usage-stats",
        is_flag=True,
        help="Start the head's Ray with usage stats collection off (RAY_USAGE_STATS_ENABLED=0).",
    )(f)
