"""Commands that act on clusters: up, down, exec, attach, rsync-up/down, addresses,
status and monitor. Flags follow `ray up/down/...`."""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import click

from launcher.cli.app import FiniteFloatRange, Settings, cli
from launcher.cli.env_option import checked, env_option, values_for
from launcher.cli.progress import ProgressView
from launcher.cli.ray_options import log_options, usage_stats_env, usage_stats_option
from launcher.cluster import lifecycle, ops
from launcher.cluster.autostop_setting import (
    apply_config_autostop,
    parse_idle_minutes,
    set_autostop,
    what_happens,
)
from launcher.config.loader import Overrides, load_config
from launcher.config.model import Autostop, ClusterConfig
from launcher.config.schema import load_schema, property_fix
from launcher.errors import UsageError
from launcher.runs.listing import known_runs, state_of

F = Callable[..., Any]

config_argument = click.argument(
    "cluster_config_file", metavar="CLUSTER.yaml", type=click.Path(dir_okay=False)
)


def _checked_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name given with -n is checked by the config's own cluster_name rule, and a bad one
    is blamed on the flag (the file is not at fault)."""
    fix = None if value is None else property_fix("cluster", "cluster_name", value)
    if fix is not None:
        raise UsageError(f"--cluster-name {value!r} is not a valid cluster name; {fix}")
    return value


def name_option(f: F) -> F:
    return click.option(
        "-n",
        "--cluster-name",
        default=None,
        callback=_checked_name,
        help="Use this cluster name instead of the config's cluster_name.",
    )(f)


def yes_option(f: F) -> F:
    return click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")(f)


def cache_option(f: F) -> F:
    return click.option(
        "--no-config-cache",
        is_flag=True,
        help="With `up`: bootstrap the provider's resources again even when the last `up` "
        "bootstrapped this very config (see `launcher up`); accepted elsewhere, as by `ray`.",
    )(f)


# `up --min-workers/--max-workers`: the config's own limit on counts.
_MAX_COUNT = int(load_schema("cluster")["properties"]["max_workers"]["maximum"])


class PortPair(click.ParamType):  # type: ignore[type-arg]
    name = "PORT[:REMOTE]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        local, _, remote = str(value).partition(":")
        try:
            pair = (int(local), int(remote or local))
        except ValueError:
            self.fail(f"{value!r} is not a port or LOCAL:REMOTE pair of ports", param, ctx)
        if not all(0 < p < 65536 for p in pair):
            self.fail(f"{value!r}: ports are 1-65535", param, ctx)
        return pair


def port_option(f: F) -> F:
    return click.option(
        "-p",
        "--port-forward",
        "port_forward",
        multiple=True,
        type=PortPair(),
        help="Forward this port (or LOCAL:REMOTE) on this machine to the head "
        "while the command runs; repeatable.",
    )(f)


def session_options(f: F) -> F:
    f = click.option("--screen", is_flag=True, help="Run in a detached screen session.")(f)
    return click.option("--tmux", is_flag=True, help="Run in a detached tmux session.")(f)


def confirmer(yes: bool) -> Callable[[str], bool]:
    """Asks a yes/no question at a terminal; with -y, answers yes; elsewhere, refuses."""

    def confirm(question: str) -> bool:
        if yes:
            return True
        if not sys.stdin.isatty():
            raise UsageError(f"{question} Pass -y to confirm when not at a terminal.")
        return click.confirm(question, default=False)

    return confirm


def cli_config(path: str, cluster_name: str | None) -> ClusterConfig:
    """The config a command names, with its --cluster-name override."""
    return load_config(path, Overrides(cluster_name=cluster_name))


def echo_line(line: str) -> None:
    click.echo(line)


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the result as JSON (progress on stderr)."
    )(f)


def up_json(result: lifecycle.UpResult, autostop: str | None) -> dict[str, Any]:
    def node(n: Any) -> dict[str, Any]:
        return {"id": n.id, "type": n.node_type, "ip": n.ip}

    return {
        "cluster": result.config.cluster_name,
        "head": node(result.head),
        "created_head": result.created_head,
        "workers": [node(w) for w in result.workers],
        "ray_address": result.ray_address,
        "autoscaler": result.daemon,
        "autostop": autostop,
    }


def _up(
    settings: Settings,
    path: str,
    overrides: Overrides,
    yes: bool,
    options: lifecycle.UpOptions,
    quiet: bool = False,
) -> lifecycle.UpResult:
    with ProgressView(settings.output.err_console, live=settings.output.live_view()) as view:
        result = lifecycle.up(path, overrides, options, view, confirmer(yes))
    if quiet:  # the caller prints the result (--json)
        return result
    out = settings.output
    workers = len(result.workers)
    out.line(
        f"Cluster {result.config.cluster_name} is up: head {result.head.ip} "
        f"({result.head.node_type}), {workers} worker(s) ready, Ray at "
        f"{result.ray_address}."
    )
    return result


def down_cluster(
    settings: Settings,
    path: str,
    cluster_name: str | None,
    *,
    workers_only: bool = False,
    keep_min_workers: bool = False,
    yes: bool = True,
    purge: bool = False,
    as_json: bool = False,
) -> None:
    with ProgressView(settings.output.err_console, live=settings.output.live_view()) as view:
        result = lifecycle.down(
            path,
            Overrides(cluster_name=cluster_name),
            workers_only=workers_only,
            keep_min_workers=keep_min_workers,
            events=view,
            confirm=confirmer(yes),
            purge=purge,
        )
    if as_json:
        settings.output.json(
            {"terminated": list(result.terminated), "removed": list(result.removed)}
        )
        return
    if not result.terminated and not result.removed:
        settings.output.line("Nothing to take down.")
        return
    settings.output.line(
        f"Terminated {len(result.terminated)} node(s)"
        + (f"; removed {', '.join(result.removed)}" if result.removed else "")
        + "."
    )


@cli.command()
@config_argument
@click.option(
    "--min-workers",
    type=click.IntRange(min=0, max=_MAX_COUNT),
    default=None,
    help="Override min_workers of every worker node type.",
)
@click.option(
    "--max-workers",
    type=click.IntRange(min=0, max=_MAX_COUNT),
    default=None,
    help="Override the cluster-wide max_workers.",
)
@click.option(
    "--no-restart",
    is_flag=True,
    help="Do not restart Ray on nodes that already run it (avoids stopping jobs).",
)
@click.option(
    "--restart-only", is_flag=True, help="Skip file syncing and setup commands; only restart Ray."
)
@click.option("--no-wait", is_flag=True, help="Return once the head is up, before workers.")
@click.option(
    "-i",
    "--idle-minutes-to-autostop",
    "idle_minutes",
    default=None,
    metavar="N",
    help="Have the head stop the cluster once it has been idle N minutes "
    "(see `launcher autostop`).",
)
@click.option(
    "--down",
    "autostop_down",
    is_flag=True,
    help="With -i: tear the cluster down when idle instead of stopping its nodes.",
)
@click.option(
    "--redirect-command-output",
    is_flag=True,
    help="Accepted for compatibility with `ray`: each node's command output always goes to "
    "its log file (see `launcher cluster-dump`); the terminal shows each node's progress.",
)
@click.option(
    "--use-login-shells/--use-normal-shells",
    default=True,
    help="Commands run in login shells (bash --login -i), as Ray runs them by default; "
    "normal shells are not supported.",
)
@env_option
@usage_stats_option
@log_options
@json_option
@yes_option
@name_option
@cache_option
@click.pass_obj
def up(
    settings: Settings,
    cluster_config_file: str,
    min_workers: int | None,
    max_workers: int | None,
    no_restart: bool,
    restart_only: bool,
    no_wait: bool,
    idle_minutes: str | None,
    autostop_down: bool,
    redirect_command_output: bool,
    use_login_shells: bool,
    env: tuple[str, ...],
    disable_usage_stats: bool,
    as_json: bool,
    yes: bool,
    cluster_name: str | None,
    no_config_cache: bool,
) -> None:
    """Create or update a cluster: the head node, its setup, Ray and the autoscaler."""
    if not use_login_shells:
        raise UsageError(
            "--use-normal-shells is not supported: the launcher runs every node command in "
            "a login shell (bash --login -i), so ~/.bashrc's PATH (conda, pyenv) applies; "
            "drop the flag"
        )
    if no_restart and restart_only:
        raise UsageError("--no-restart and --restart-only contradict each other; pick one")
    env = checked(env)
    if autostop_down and idle_minutes is None:
        raise UsageError("--down needs -i/--idle-minutes-to-autostop N (minutes idle)")
    autostop = (
        None if idle_minutes is None else Autostop(parse_idle_minutes(idle_minutes), autostop_down)
    )
    overrides = Overrides(
        cluster_name=cluster_name,
        min_workers=min_workers,
        max_workers=max_workers,
        no_restart=no_restart,
    )
    result = _up(
        settings,
        cluster_config_file,
        overrides,
        yes,
        lifecycle.UpOptions(
            restart_only=restart_only,
            no_restart=no_restart,
            wait_for_workers=not no_wait,
            extra_env=usage_stats_env(disable_usage_stats),
            env_options=env,
            use_receipt=not no_config_cache,
        ),
        quiet=as_json,
    )
    said: str | None = None
    if autostop is not None:
        set_autostop(result.config, autostop)
        said = f"{what_happens(result.config, autostop)}, acted on by the head"
    elif result.config.autostop is not None:
        apply_config_autostop(result.config)
        said = (
            f"{result.config.autostop.describe()} (metadata.launcher.autostop), "
            "acted on by the head"
        )
    if as_json:
        settings.output.json(up_json(result, said))
    elif said is not None:
        settings.output.line(f"Autostop: {said}.")


@cli.command()
@config_argument
@click.option("--workers-only", is_flag=True, help="Terminate only workers; keep the head.")
@click.option(
    "--keep-min-workers", is_flag=True, help="Keep min_workers workers of each type running."
)
@click.option(
    "--purge",
    is_flag=True,
    help="Also remove what `up` reuses across clusters (cloud key pair, security group, IAM role).",
)
@log_options
@json_option
@yes_option
@name_option
@click.pass_obj
def down(
    settings: Settings,
    cluster_config_file: str,
    workers_only: bool,
    keep_min_workers: bool,
    purge: bool,
    as_json: bool,
    yes: bool,
    cluster_name: str | None,
) -> None:
    """Terminate the cluster's nodes and remove what the launcher created for it."""
    down_cluster(
        settings,
        cluster_config_file,
        cluster_name,
        workers_only=workers_only,
        keep_min_workers=keep_min_workers,
        yes=yes,
        purge=purge,
        as_json=as_json,
    )


def run_with_lifecycle(
    settings: Settings,
    path: str,
    cluster_name: str | None,
    start: bool,
    stop: bool | Callable[[], bool],
    action: Callable[[ClusterConfig], int],
    head_env: Mapping[str, str] | None = None,
    env_options: tuple[str, ...] = (),
) -> int:
    """Start the cluster first if asked (`head_env` for the head's commands, `env_options`
    for `up --env`); always take it down after if asked (`stop`, or what it says once the
    action is over), even on Ctrl-C or a failure while starting."""
    try:
        if start:
            options = lifecycle.UpOptions(extra_env=dict(head_env or {}), env_options=env_options)
            _up(settings, path, Overrides(cluster_name=cluster_name), True, options)
        return action(cli_config(path, cluster_name))
    finally:
        if stop() if callable(stop) else stop:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the teardown
            try:
                down_cluster(settings, path, cluster_name)
            finally:
                signal.signal(signal.SIGINT, previous)


def report_session(settings: Settings, name: str | None, how: str) -> None:
    if name:
        settings.output.line(
            f"Running in {how} session {name} on the head; see it with "
            f"`launcher attach --{how} CLUSTER.yaml`."
        )


@cli.command(name="exec")
@config_argument
@click.argument("cmd")
@click.option(
    "--run-env",
    type=click.Choice(["auto", "host", "docker"]),
    default="auto",
    show_default=True,
    help="Where on the head the command runs: in its container when it has one (auto, "
    "docker) or on its host.",
)
@click.option("--start", is_flag=True, help="Start the cluster first if needed.")
@click.option("--stop", is_flag=True, help="Take the cluster down after the command.")
@session_options
@port_option
@env_option
@usage_stats_option
@log_options
@name_option
@cache_option
@click.pass_obj
def exec_command(
    settings: Settings,
    cluster_config_file: str,
    cmd: str,
    run_env: str,
    start: bool,
    stop: bool,
    screen: bool,
    tmux: bool,
    port_forward: tuple[tuple[int, int], ...],
    env: tuple[str, ...],
    disable_usage_stats: bool,
    cluster_name: str | None,
    no_config_cache: bool,
) -> None:
    """Run a shell command on the head node, with RAY_ADDRESS set; exits with its code."""
    env = checked(env)
    usage_env = usage_stats_env(disable_usage_stats)
    options = ops.RunOptions(
        screen=screen,
        tmux=tmux,
        port_forward=port_forward,
        run_env=run_env,
        extra_env=usage_env,
    )

    def action(config: ClusterConfig) -> int:
        values = values_for(config, env)
        with_env = dataclasses.replace(options, secret_env=values)
        code, session = ops.exec_on_head(config, cmd, with_env, echo_line)
        report_session(settings, session, "tmux" if tmux else "screen")
        return code

    sys.exit(
        run_with_lifecycle(
            settings,
            cluster_config_file,
            cluster_name,
            start,
            stop,
            action,
            usage_env,
            env,
        )
    )


@cli.command()
@config_argument
@click.option("--start", is_flag=True, help="Start the cluster first if needed.")
@session_options
@click.option("-N", "--new", is_flag=True, help="Start a new tmux/screen session.")
@click.option(
    "--node-ip",
    default=None,
    metavar="IP",
    help="Attach to the node with this IP (as `launcher get-worker-ips` prints) instead "
    "of the head.",
)
@port_option
@log_options
@name_option
@cache_option
@click.pass_obj
def attach(
    settings: Settings,
    cluster_config_file: str,
    start: bool,
    screen: bool,
    tmux: bool,
    new: bool,
    node_ip: str | None,
    port_forward: tuple[tuple[int, int], ...],
    cluster_name: str | None,
    no_config_cache: bool,
) -> None:
    """Open an interactive shell on the head node (or, with --node-ip, another node)."""
    if new and not (screen or tmux):
        raise UsageError("--new needs --tmux or --screen")

    def action(config: ClusterConfig) -> int:
        return ops.attach(
            config,
            screen=screen,
            tmux=tmux,
            new=new,
            port_forward=port_forward,
            node_ip=node_ip,
        )

    sys.exit(run_with_lifecycle(settings, cluster_config_file, cluster_name, start, False, action))


def _rsync(up: bool) -> Callable[..., None]:
    def command(
        settings: Settings,
        cluster_config_file: str,
        source: str,
        target: str,
        cluster_name: str | None,
        all_nodes: bool = False,
    ) -> None:
        config = cli_config(cluster_config_file, cluster_name)
        for line in ops.rsync(config, source, target, up=up, all_nodes=all_nodes):
            settings.output.line(line)

    if up:
        command = click.option(
            "-A",
            "--all-nodes",
            is_flag=True,
            help="Copy to every running node (the head and each worker), not the head only.",
        )(command)
    return config_argument(
        click.argument("source")(
            click.argument("target")(log_options(name_option(click.pass_obj(command))))
        )
    )


cli.command(name="rsync-up", help="Copy SOURCE on this machine to TARGET on the head node.")(
    _rsync(True)
)
cli.command(name="rsync-down", help="Copy SOURCE on the head node to TARGET on this machine.")(
    _rsync(False)
)


@cli.command(name="get-head-ip")
@config_argument
@json_option
@name_option
@click.pass_obj
def get_head_ip(
    settings: Settings, cluster_config_file: str, as_json: bool, cluster_name: str | None
) -> None:
    """Print the head node's IP."""
    ip = ops.head_ip(cli_config(cluster_config_file, cluster_name))
    if as_json:
        settings.output.json({"head_ip": ip})
    else:
        click.echo(ip)


@cli.command(name="get-worker-ips")
@config_argument
@json_option
@name_option
@click.pass_obj
def get_worker_ips(
    settings: Settings, cluster_config_file: str, as_json: bool, cluster_name: str | None
) -> None:
    """Print the workers' IPs, one per line."""
    ips = ops.worker_ips(cli_config(cluster_config_file, cluster_name))
    if as_json:
        settings.output.json({"worker_ips": ips})
        return
    for ip in ips:
        click.echo(ip)


@cli.command()
@config_argument
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--address",
    default=None,
    metavar="HOST:PORT",
    help="Not supported: `ray status --address` reads a running Ray cluster by its GCS "
    "address; this reads the cluster CLUSTER.yaml names (its nodes, runs and autoscaler).",
)
@log_options
@name_option
@click.pass_obj
def status(
    settings: Settings,
    cluster_config_file: str,
    as_json: bool,
    address: str | None,
    cluster_name: str | None,
) -> None:
    """Show the cluster's nodes: kind, type, IP, state and resources."""
    if address is not None:
        raise UsageError(
            "--address is not supported: `launcher status` reads the cluster CLUSTER.yaml "
            "names; for a Ray cluster known only by its address run `ray status --address "
            f"{address}` on a machine with Ray"
        )
    config = cli_config(cluster_config_file, cluster_name)
    result = ops.status(config)
    # The recovering runs not ended yet: from any machine with the config, as the nodes
    # keep them (a run nobody supervises is taken up with `launcher jobs supervise`).
    runs = [r for r in known_runs(config, from_cluster=bool(result.nodes)) if not r.state.ended]
    if as_json:
        now = time.time()
        runs_json = [{"id": r.id, "state": state_of(r, now), "script": r.script} for r in runs]
        settings.output.json({**result.to_json(), "runs": runs_json})
        return
    from launcher.cli.render_status import render_runs, render_status

    render_status(settings.output.console, result)
    render_runs(settings.output.console, runs, cluster_config_file)


@cli.command()
@config_argument
@click.option(
    "--lines",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="How many lines of the log to show first.",
)
@click.option("--no-follow", is_flag=True, help="Print the lines and exit instead of following.")
@log_options
@name_option
@click.pass_obj
def monitor(
    settings: Settings,
    cluster_config_file: str,
    lines: int,
    no_follow: bool,
    cluster_name: str | None,
) -> None:
    """Show the autoscaler's log on the head node (following it until Ctrl-C)."""
    sys.exit(
        ops.monitor(cli_config(cluster_config_file, cluster_name), lines, not no_follow, echo_line)
    )


@cli.command()
@config_argument
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Workload trace, one JSON object per line (tasks or placement groups).",
)
@click.option(
    "--launch-delay-s",
    type=FiniteFloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds from launching a node to it joining the cluster.",
)
@click.option(
    "--preempt-rate",
    type=FiniteFloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Preemptions per spot node per hour.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed for the random preemptions, for repeatable runs.",
)
@click.option(
    "--capacity",
    "capacities",
    multiple=True,
    metavar="TYPE=N",
    help="At most N nodes of TYPE at once; launches beyond fail as for lack of capacity, "
    "and its fallbacks are used. Repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def simulate(
    settings: Settings,
    cluster_config_file: str,
    trace_path: str,
    launch_delay_s: float,
    preempt_rate: float,
    seed: int,
    capacities: tuple[str, ...],
    as_json: bool,
) -> None:
    """Replay a workload trace through the autoscaler's planner, offline, and report
    node-hours, cost, peak nodes and how long work waited."""
    from launcher.autoscaler.decide.view import planner_settings
    from launcher.autoscaler.simulator import Simulation, read_trace
    from launcher.cli.render_simulation import render_simulation
    from launcher.pricing import load_prices
    from launcher.pricing.live import live_prices
    from launcher.providers.registry import SPECS

    config = load_config(cluster_config_file)
    capacity = _capacities(capacities, config.node_types)
    trace = read_trace(trace_path)
    spec = SPECS[config.provider.type]
    prices = live_prices(config, spec, load_prices())  # as `plan` prices the cluster
    spot = [
        name for name, t in config.node_types.items() if spec.node_offer(config, t, prices).spot
    ]
    simulation = Simulation(
        config,
        planner_settings(config, spec, prices),
        spot,
        launch_delay_s,
        preempt_rate,
        seed,
        capacity=capacity,
    )
    report = simulation.run(trace)
    source = prices.live_notes.get(spec.type) or prices.static_source(spec.type)
    if as_json:
        settings.output.json({**report.to_json(), "prices": source})
        return
    render_simulation(settings.output.console, report, source)


def _capacities(values: tuple[str, ...], node_types: Mapping[str, object]) -> dict[str, int]:
    out = {}
    for value in values:
        name, _, number = value.partition("=")
        if name not in node_types:
            known = ", ".join(node_types)
            raise UsageError(f"--capacity {value}: no node type {name!r}; use one of: {known}")
        if not number.isdigit():
            raise UsageError(
                f"--capacity {value}: write TYPE=N with N a whole number, e.g. {name}=4"
            )
        out[name] = int(number)
    return out
