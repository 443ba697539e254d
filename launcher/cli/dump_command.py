"""`launcher cluster-dump` (alias `launcher logs`): a cluster's logs in one tarball."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from launcher.cli.app import Settings, cli
from launcher.cli.cluster_commands import cli_config, config_argument, echo_line, name_option
from launcher.cluster import ops
from launcher.cluster.dump import DumpOptions, dump
from launcher.cluster.dump_plan import format_size, parse_size, summary_lines
from launcher.errors import UsageError

# How many cut files the printed summary names (MANIFEST.txt in the tarball names all).
CUT_SHOWN = 10
DEFAULT_MAX_SIZE = "200MB"


class Size(click.ParamType):  # type: ignore[type-arg]
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


def _ad_hoc(f: Any) -> Any:
    """`ray cluster-dump`'s options for hosts not launched from a config, refused."""
    for names, help_text in (
        (("-h", "--host"), "Not supported (a dump of the cluster CLUSTER.yaml names only)."),
        (("-U", "--ssh-user"), "Not supported: the config's auth.ssh_user is used."),
        (("-K", "--ssh-key"), "Not supported: the config's auth.ssh_private_key is used."),
        (("-d", "--docker"), "Not supported: the config's docker.container_name is used."),
    ):
        f = click.option(*names, default=None, help=help_text)(f)
    return f


@cli.command(name="cluster-dump", context_settings={"help_option_names": ["--help"]})
@config_argument
@click.option(
    "-o",
    "--output",
    "-T",
    "--tempfile",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the tarball here instead of launcher-dump-CLUSTER-YYYYmmdd-HHMMSS.tar.gz "
    "in the current directory (-T/--tempfile: `ray cluster-dump`'s name for it).",
)
@click.option(
    "--logs/--no-logs", default=True, show_default=True, help="Ray's session logs of each node."
)
@click.option(
    "--debug-state/--no-debug-state",
    default=True,
    show_default=True,
    help="Ray's debug_state*.txt of each node (with --no-logs: those alone).",
)
@click.option(
    "--pip/--no-pip",
    default=True,
    show_default=True,
    help="Each node's installed Python packages (its python3's pip list).",
)
@click.option(
    "--processes/--no-processes",
    default=True,
    show_default=True,
    help="Each node's running processes (ps).",
)
@click.option(
    "--processes-verbose/--no-processes-verbose",
    default=True,
    show_default=True,
    help="With each process's user, CPU, memory and whole command line.",
)
@click.option(
    "-L",
    "--local",
    is_flag=True,
    help="Also this machine's packages (the launcher's Python) and processes.",
)
@_ad_hoc
@click.option(
    "--max-size",
    type=Size(),
    default=DEFAULT_MAX_SIZE,
    show_default=True,
    help="At most this many bytes of logs, before compression (e.g. 50MB, 1.5GB; K, M, G "
    "are powers of 1024). Files too large for their share keep their end; the summary "
    "lists what was cut.",
)
@name_option
@click.pass_obj
def cluster_dump(
    settings: Settings,
    cluster_config_file: str,
    output: Path | None,
    logs: bool,
    debug_state: bool,
    pip: bool,
    processes: bool,
    processes_verbose: bool,
    local: bool,
    host: str | None,
    ssh_user: str | None,
    ssh_key: str | None,
    docker: str | None,
    max_size: int,
    cluster_name: str | None,
) -> None:
    """Gather the cluster's logs into one tarball, for a bug report or a look offline.

    \b
    It holds:
      setup/NODE.log      the launcher's setup log of each node (kept on this machine)
      autoscaler/         the autoscaler's decision log and last state (on the head)
      ray/NODE/           Ray's session logs of each node (session_latest/logs under
                          Ray's temp dir, in the node's container if it has one)
      info/NODE/          each node's pip.txt (its python3's packages) and processes.txt
      setup/this-machine/ with -L: this machine's packages and processes
      MANIFEST.txt        the summary printed at the end; manifest.json: every file

    Nodes are read in parallel. Nodes that share one directory (every node of a localhost
    cluster writes into one Ray temp dir) have it gathered once, under the first of them.
    A node that cannot be reached is named in the summary and the dump is written
    without it; the exit code is 1 only when nothing could be gathered from any node.
    """
    given = [
        n
        for n, v in (
            ("--host", host),
            ("--ssh-user", ssh_user),
            ("--ssh-key", ssh_key),
            ("--docker", docker),
        )
        if v is not None
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)}: not supported; `launcher cluster-dump` gathers the cluster "
            "CLUSTER.yaml names, reaching its nodes as the config says (for machines the "
            "launcher did not start, write an on-prem config naming them)"
        )
    config = cli_config(cluster_config_file, cluster_name)
    err = settings.output.err_console

    def progress(line: str) -> None:
        err.print(line, markup=False, highlight=False)

    options = DumpOptions(
        output=output,
        max_bytes=max_size,
        logs=logs,
        debug_state=debug_state,
        pip=pip,
        processes=processes,
        processes_verbose=processes_verbose,
        local=local,
    )
    result = dump(config, options, progress)
    out = settings.output
    out.line(f"Wrote {result.path} ({format_size(result.archive_bytes)}).")
    out.line()
    for line in summary_lines(result, cut_limit=CUT_SHOWN):
        out.line(line)
    if not result.gathered_from_cluster:
        click.echo(
            "error: nothing could be gathered from the cluster's nodes (see above); "
            "the dump holds this machine's setup logs only",
            err=True,
        )
        raise click.exceptions.Exit(1)


@cli.command()
@config_argument
@click.option(
    "--node-ip",
    default=None,
    metavar="IP",
    help="The node whose logs to show (as `launcher get-worker-ips` prints) [default: the head].",
)
@click.option(
    "--lines",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="How many of each file's last lines to show first.",
)
@click.option("-f", "--follow", is_flag=True, help="Keep showing lines as they are written.")
@click.option(
    "--file",
    "pattern",
    default="*",
    show_default=True,
    help="Which of Ray's log files (a glob in session_latest/logs, e.g. 'raylet*', "
    "'worker-*.err').",
)
@name_option
@click.pass_obj
def logs(
    settings: Settings,
    cluster_config_file: str,
    node_ip: str | None,
    lines: int,
    follow: bool,
    pattern: str,
    cluster_name: str | None,
) -> None:
    """Show Ray's logs of the head (or another node): the last lines of each file, and with
    -f new ones as they come, until Ctrl-C. The autoscaler's log is `launcher monitor`'s; a
    run's output `launcher jobs logs`'; everything at once, `launcher cluster-dump`."""
    config = cli_config(cluster_config_file, cluster_name)
    sys.exit(ops.show_ray_logs(config, node_ip, lines, follow, pattern, echo_line))
