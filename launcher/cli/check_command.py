"""`check`: is each provider ready for `up` here (its extra, credentials, permissions,
quota)? With a cluster config, its provider in depth, with the exit code saying whether
`up` can go ahead."""

from __future__ import annotations

import click

from launcher.check.decide import exit_code, label, overall, summary
from launcher.check.model import ProviderReport, Status
from launcher.check.run import check
from launcher.cli.app import Settings, cli
from launcher.config.loader import load_config


@cli.command(name="check")
@click.argument(
    "cluster_config_file",
    metavar="[CLUSTER.yaml]",
    required=False,
    type=click.Path(dir_okay=False),
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text."
)
@click.pass_obj
def check_command(settings: Settings, cluster_config_file: str | None, as_json: bool) -> None:
    """Check that each provider can be used from here: its extra installed, credentials
    found, what `up` does allowed, and quota left. With CLUSTER.yaml, check its provider
    and its node types' quota, and exit 1 if it is not ready."""
    config = load_config(cluster_config_file) if cluster_config_file else None
    reports = check(config)
    out = settings.output
    if as_json:
        out.json(
            {
                "config": cluster_config_file,
                "ready": exit_code(reports) == 0,
                "providers": [r.to_json(overall(r.findings), summary(r)) for r in reports],
            }
        )
    else:
        width = max(len(r.title) for r in reports)
        for report in reports:
            _render(settings, report, width, detailed=config is not None or settings.verbose)
    code = exit_code(reports)
    if code:
        raise click.exceptions.Exit(code)


def _render(settings: Settings, report: ProviderReport, width: int, detailed: bool) -> None:
    status = overall(report.findings)
    settings.output.line(f"{report.title:<{width}}  {label(status)}: {summary(report)}")
    if not detailed:
        return
    for finding in report.findings:
        mark = "ok" if finding.status is Status.OK else finding.status.value
        fix = f" (fix: {finding.fix})" if finding.fix and finding.status is not Status.OK else ""
        settings.output.line(f"  {finding.aspect.value:<11} {mark}: {finding.detail}{fix}")
