"""Commands for trying a cluster's resilience and looking into it: kill-random-node (a
random worker, or with --head the head) and dashboard (Ray's names and flags)."""

from __future__ import annotations

import contextlib
import random
import threading
import time

import click

from launcher.cli.app import FiniteFloatRange, Settings, cli
from launcher.cli.cluster_commands import (
    cache_option,
    cli_config,
    config_argument,
    confirmer,
    name_option,
    yes_option,
)
from launcher.cluster.chaos import Kill, KillResult, check_flags, kill_node, pick
from launcher.cluster.dashboard import RAY_DASHBOARD_PORT, forwarded_dashboard
from launcher.cluster.head import connect
from launcher.errors import LauncherError, UsageError
from launcher.providers.base import Node, NodeKind
from launcher.providers.factory import make_provider


@cli.command(name="kill-random-node")
@config_argument
@click.option(
    "--head",
    is_flag=True,
    help="Take the head instead of a random worker, to rehearse losing it. Nothing replaces "
    "it by itself: a run started with `launcher submit --recover` brings up a new head and "
    "goes on; otherwise bring the cluster back with `launcher up`.",
)
@click.option(
    "--hard",
    is_flag=True,
    help="Take the whole node away through the provider (terminate it; on the localhost "
    "provider a `simulated_spot` type is reclaimed as a cloud reclaims spot machines) "
    "instead of stopping its Ray.",
)
@click.option(
    "--notice",
    "notice_s",
    type=FiniteFloatRange(min=0),
    default=0.0,
    metavar="SECONDS",
    help="With --hard on a `simulated_spot` worker: give notice this long before taking it, "
    "as AWS (2 minutes) and GCP (30 s) do before reclaiming a spot machine; the autoscaler "
    "launches its replacement on the notice. The command waits until the node is taken. "
    "Not with --head.",
)
@yes_option
@name_option
@click.pass_obj
def kill_random_node_command(
    settings: Settings,
    cluster_config_file: str,
    head: bool,
    hard: bool,
    notice_s: float,
    yes: bool,
    cluster_name: str | None,
) -> None:
    """Kill a random worker, to see the cluster and its jobs survive it: stop its Ray, or
    with --hard take the node away; the autoscaler replaces it. With --head, kill the head
    instead: nothing but a run started with `launcher submit --recover` replaces it."""
    check_flags(hard=hard, head=head, notice_s=notice_s)
    config = cli_config(cluster_config_file, cluster_name)
    provider = make_provider(config)
    node = pick(config, provider.nodes(), head=head, hard=hard, rng=random.Random())
    question = f"This will {_what(node, hard)} of cluster {config.cluster_name}. Go on?"
    if not confirmer(yes)(question):
        raise click.exceptions.Exit(1)

    def noticed(node: Node, at: float) -> None:
        when = time.strftime("%H:%M:%S", time.localtime(at))
        settings.output.line(
            f"Gave notice: worker {node.id} ({node.node_type}) with IP {node.ip or 'unknown'} "
            f"is reclaimed at {when}, in {notice_s:g} s."
        )

    result = kill_node(config, provider, node, hard=hard, notice_s=notice_s, on_notice=noticed)
    settings.output.line(_done(result, config.source or "CLUSTER.yaml"))


def _what(node: Node, hard: bool) -> str:
    """What the command will do to `node`, for its question."""
    if node.kind is NodeKind.HEAD:
        head = f"the head {node.id} ({node.node_type}) with IP {node.ip or 'unknown'}"
        return f"take away {head}" if hard else f"stop Ray on {head}"
    return "take a random worker away" if hard else "stop Ray on a random worker"


def _done(result: KillResult, source: str) -> str:
    """The line that says what was done, once it is seen done, and what comes next."""
    node = result.node
    where = f"{node.kind.value} {node.id} ({node.node_type}) with IP {node.ip or 'unknown'}"
    done = f"{result.how.value[0].upper()}{result.how.value[1:]} {where}"
    if result.how is Kill.RECLAIMED:
        done = f"Reclaimed {where} as a cloud reclaims a spot machine"
    if node.kind is NodeKind.HEAD:
        return (
            f"{done}; nothing replaces a lost head by itself: a run started with "
            "`launcher submit --recover` brings up a new head and goes on; otherwise bring "
            f"the cluster back with `launcher up {source}`."
        )
    if result.how is Kill.RECLAIMED:
        return f"{done}; the autoscaler will see it preempted and replace it."
    return f"{done}; the autoscaler will replace it."


@cli.command()
@click.argument(
    "cluster_config_file", metavar="[CLUSTER.yaml]", type=click.Path(dir_okay=False), required=False
)
@click.option(
    "-p",
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="The port on this machine to reach the dashboard at [default: "
    f"{RAY_DASHBOARD_PORT} for Ray's; any free port for the launcher's page].",
)
@click.option(
    "--remote-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The dashboard's port on the head [default: as the head's `ray start` gives it, "
    f"else {RAY_DASHBOARD_PORT}].",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The launcher's page only: the address to listen on. Anyone who can reach it "
    "and has the URL's token sees every cluster.",
)
@click.option("--no-browser", is_flag=True, help="The launcher's page only: do not open a browser.")
@click.option(
    "--interval",
    type=FiniteFloatRange(min=0.2),
    default=3.0,
    show_default=True,
    help="The launcher's page only: seconds between polls of each running cluster.",
)
@name_option
@cache_option
@click.pass_obj
def dashboard(
    settings: Settings,
    cluster_config_file: str | None,
    port: int | None,
    remote_port: int | None,
    host: str,
    no_browser: bool,
    interval: float,
    cluster_name: str | None,
    no_config_cache: bool,
) -> None:
    """With CLUSTER.yaml (as `ray dashboard`): forward Ray's dashboard from the head to this
    machine until Ctrl-C, and print its local URL once it answers. Without: serve the
    launcher's page of every cluster launched from here (nodes, a plot of nodes against
    demand, decisions, reclaims, cost, runs) until Ctrl-C, and print its URL with its
    token."""
    if cluster_config_file is None:
        if cluster_name is not None or remote_port is not None:
            raise UsageError(
                "-n and --remote-port need CLUSTER.yaml (they are for Ray's dashboard)"
            )
        _serve_page(settings, host, port or 0, not no_browser, interval)
        return
    if port == 0:
        raise UsageError("-p 0 (any free port) is for the launcher's page; give Ray's a port")
    session = connect(cli_config(cluster_config_file, cluster_name))
    local = RAY_DASHBOARD_PORT if port is None else port
    with forwarded_dashboard(session, local, remote_port) as (url, head_port):
        settings.output.line(
            f"Ray dashboard of cluster {session.config.cluster_name}: {url} (the head's port "
            f"{head_port}); press Ctrl-C to stop forwarding."
        )
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    settings.output.line("Stopped forwarding the dashboard.")


def _serve_page(settings: Settings, host: str, port: int, browser: bool, interval: float) -> None:
    try:
        from launcher.web.collector import Collector
        from launcher.web.server import new_token, serve
    except ImportError as exc:
        raise LauncherError(
            f"the dashboard page needs aiohttp ({exc}): pip install 'launcher-ray[web]'"
        ) from None

    def ready(url: str) -> None:
        settings.output.line(f"The launcher's page: {url}  (press Ctrl-C to stop)")
        settings.output.console.file.flush()  # read at once by whoever started us
        if browser:
            import webbrowser

            with contextlib.suppress(Exception):
                webbrowser.open(url)

    try:
        serve(Collector(interval=interval), host=host, port=port, token=new_token(), ready=ready)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port"
        ) from None
    settings.output.line("Stopped serving the page.")
