"""`--env NAME[=VALUE]` on `up`, `exec` and `submit`: variables for the driver and the
nodes' Ray, whose values stay out of command lines, logs and records (launcher.secret_env)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from launcher import secret_env
from launcher.config.model import ClusterConfig

F = TypeVar("F", bound=Callable[..., Any])


def env_option(f: F) -> F:
    return click.option(
        "--env",
        "env",
        multiple=True,
        metavar="NAME[=VALUE]",
        help="Pass an environment variable to the driver and to Ray on every node (repeat "
        "for more). NAME alone takes its value from this machine's environment. Values are "
        "sent on standard input, never in a command line, log or record; each node keeps "
        "Ray's in ~/.launcher/secrets/env (0600).",
    )(f)


def checked(options: Sequence[str]) -> tuple[str, ...]:
    """`--env` as given, each checked now (a bad name, or a NAME unset here: UsageError)."""
    for spec in options:
        secret_env.parse_option(spec, os.environ)
    return tuple(options)


def values_for(config: ClusterConfig, options: Sequence[str]) -> dict[str, str]:
    """The config's metadata.launcher.env names and `--env`, with their values."""
    return secret_env.resolve(options, config.env_names, os.environ)
