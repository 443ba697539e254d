"""The `validate` and `plan` commands."""

from __future__ import annotations

import dataclasses

import click

from launcher.check.model import Status
from launcher.check.run import extra_finding
from launcher.cli.app import Settings, cli
from launcher.cli.render_plan import render_plan
from launcher.config.loader import load_config
from launcher.config.model import ClusterConfig
from launcher.config.problems import Problem, Severity
from launcher.dryrun import make_plan
from launcher.errors import ConfigError, UsageError
from launcher.pricing import load_prices
from launcher.providers.registry import SPECS

config_argument = click.argument(
    "cluster_config_file", metavar="CLUSTER.yaml", type=click.Path(dir_okay=False)
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text."
)


@cli.command()
@config_argument
@json_option
@click.pass_obj
def validate(settings: Settings, cluster_config_file: str, as_json: bool) -> None:
    """Check a cluster config and report every problem in it. Contacts nothing."""
    out = settings.output
    config = _load(settings, cluster_config_file, as_json)
    if as_json:
        out.json(
            {
                "valid": True,
                "cluster_name": config.cluster_name,
                "provider": config.provider.type,
                "head_node_type": config.head_node_type,
                "node_types": list(config.node_types),
                "problems": [p.to_json() for p in config.warnings],
            }
        )
        return
    out.problems(cluster_config_file, config.warnings)
    workers = [t for t in config.node_types.values() if t.max_workers > 0]
    out.line(
        f"{cluster_config_file}: valid: cluster {config.cluster_name!r} on "
        f"{config.provider.type}, head {config.head_node_type}, "
        f"{len(workers)} worker type(s), up to {config.max_workers} worker(s)"
        + (f", {len(config.warnings)} warning(s)" if config.warnings else "")
    )


@cli.command()
@config_argument
@json_option
@click.pass_obj
def plan(settings: Settings, cluster_config_file: str, as_json: bool) -> None:
    """Show what `up` would do: nodes, cloud resources, commands and cost. Creates nothing;
    reads the cloud's published prices (cached; LAUNCHER_PRICES=static: the shipped table)."""
    out = settings.output
    config = _load(settings, cluster_config_file, as_json)
    result = make_plan(config, SPECS[config.provider.type], load_prices())
    if as_json:
        out.json(result.to_json())
        return
    out.problems(cluster_config_file, config.warnings)
    render_plan(out.console, result)


def _load(settings: Settings, path: str, as_json: bool) -> ClusterConfig:
    """Load a config; with --json, problems are printed as JSON on stdout too. A provider
    whose extra is not installed is a warning here (`up` refuses it)."""
    try:
        config = load_config(path)
    except (ConfigError, UsageError) as exc:
        if not as_json:
            raise
        problems = (
            [p.to_json() for p in exc.problems]
            if isinstance(exc, ConfigError)
            else [{"severity": "error", "message": str(exc)}]
        )
        settings.output.json({"valid": False, "problems": problems})
        raise click.exceptions.Exit(exc.exit_code) from None
    missing = extra_finding(SPECS[config.provider.type])
    if missing.status is not Status.PROBLEM:
        return config
    warning = Problem(
        ("provider", "type"),
        f"{missing.detail}: `up` cannot use the {config.provider.type} provider here",
        missing.fix,
        severity=Severity.WARNING,
    )
    return dataclasses.replace(config, warnings=(*config.warnings, warning))
