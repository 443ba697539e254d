"""`launcher submit`: Ray's verb and flags, plus recovering runs (`--recover`, see runs/)."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from launcher.cli.app import Settings, cli
from launcher.cli.cluster_commands import (
    cache_option,
    config_argument,
    echo_line,
    name_option,
    port_option,
    report_session,
    run_with_lifecycle,
    session_options,
)
from launcher.cli.env_option import checked, env_option, values_for
from launcher.cli.jobs_commands import (
    follow_controller,
    run_exit_code,
    say_run_end,
    supervise_here,
)
from launcher.cli.ray_options import log_options, usage_stats_env, usage_stats_option
from launcher.cluster import ops
from launcher.cluster.head import connect
from launcher.config.loader import Overrides, load_config
from launcher.config.model import ClusterConfig, ControllerSettings, RecoverSettings
from launcher.errors import UsageError
from launcher.runs import controller as remote
from launcher.runs import launch
from launcher.runs.model import Run
from launcher.runs.storage import check_storage


class SubmitCommand(click.Command):
    """Options the script does not know are passed to it, but only after SCRIPT: before it,
    an option `submit` does not know is refused as click refuses any ("no such option"),
    not taken for the script's path."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {
            name: not (param.is_flag or param.count)
            for param in self.get_params(ctx)
            if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)
        }
        positionals, i = 0, 0
        while i < len(args) and positionals < 2:  # CLUSTER.yaml and SCRIPT
            word = args[i]
            if word == "--":
                break
            if word.startswith("-") and word != "-":
                name = word.split("=", 1)[0]
                if name not in takes_value:
                    raise click.NoSuchOption(name, ctx=ctx)
                if takes_value[name] and "=" not in word:
                    i += 1
            else:
                positionals += 1
            i += 1
        return super().parse_args(ctx, args)


@cli.command(cls=SubmitCommand, context_settings={"ignore_unknown_options": True})
@config_argument
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--start", is_flag=True, help="Start the cluster first if needed.")
@click.option(
    "--stop",
    is_flag=True,
    help="Take the cluster down after the script, even if it fails or is interrupted "
    "(with --recover: once the run has ended).",
)
@click.option(
    "--recover/--no-recover",
    default=None,
    help="Survive the loss of any node, the head included: a supervisor outside the head "
    "brings up a new head, keeps the workers that live and starts the script again, which "
    "resumes from its storage (Tune's storage_path) [default: metadata.launcher.recover].",
)
@click.option(
    "--recover-storage",
    "storage_path",
    metavar="PATH",
    help="With --recover: where the run keeps its checkpoints, reached by every node and "
    "outliving the head (s3://, gs://, a shared file system); checked before the run starts "
    "and given to the script as LAUNCHER_STORAGE_PATH.",
)
@click.option(
    "--max-restarts-on-errors",
    type=click.IntRange(0, 1000),
    default=None,
    help="With --recover: start the script again this often after it fails by itself (no "
    "node lost) [default: 0, or metadata.launcher.recover's].",
)
@click.option(
    "--detach",
    is_flag=True,
    help="With --recover: supervise the run from a process of its own and return once it "
    "has started; follow it with `launcher jobs logs --follow`.",
)
@click.option(
    "--controller",
    metavar="[USER@]HOST[:PORT]",
    help="With --recover: supervise the run from this always-on machine, over SSH, so it "
    "outlives this one (closed, asleep, gone); the launcher, the run and the provider's "
    "credentials are put there [default: metadata.launcher.recover.controller].",
)
@click.option(
    "--args",
    "joined_args",
    default=None,
    metavar="'ARG ...'",
    help="(deprecated in `ray` too) The script's arguments as one string, split as a shell "
    "would; give them after SCRIPT instead.",
)
@click.option(
    "--extra-screen-args",
    default=None,
    metavar="ARGS",
    help="With --screen: added to the `screen` command (e.g. '-L' to log the session).",
)
@session_options
@port_option
@env_option
@usage_stats_option
@log_options
@name_option
@cache_option
@click.pass_obj
def submit(
    settings: Settings,
    cluster_config_file: str,
    script: str,
    script_args: tuple[str, ...],
    start: bool,
    stop: bool,
    recover: bool | None,
    storage_path: str | None,
    max_restarts_on_errors: int | None,
    detach: bool,
    controller: str | None,
    joined_args: str | None,
    extra_screen_args: str | None,
    screen: bool,
    tmux: bool,
    port_forward: tuple[tuple[int, int], ...],
    env: tuple[str, ...],
    disable_usage_stats: bool,
    cluster_name: str | None,
    no_config_cache: bool,
) -> None:
    """Copy a Python script to the head node and run it there; exits with its code."""
    if extra_screen_args is not None and not screen:
        raise UsageError("--extra-screen-args goes with --screen")
    if joined_args is not None:
        if script_args:
            raise UsageError(
                "give the script's arguments either after SCRIPT or with --args, not both"
            )
        try:
            script_args = tuple(shlex.split(joined_args))
        except ValueError as exc:
            raise UsageError(f"--args {joined_args!r}: {exc}") from exc
    env = checked(env)
    usage_env = usage_stats_env(disable_usage_stats)
    options = ops.RunOptions(
        screen=screen,
        tmux=tmux,
        port_forward=port_forward,
        extra_env=usage_env,
        extra_screen_args=extra_screen_args or "",
    )
    recovering = recover is True or (recover is None and _config_recovers(cluster_config_file))
    if not recovering:
        if detach or storage_path or max_restarts_on_errors is not None or controller:
            raise UsageError(
                "--detach, --recover-storage, --max-restarts-on-errors and --controller go "
                "with --recover"
            )

        def action(config: ClusterConfig) -> int:
            values = values_for(config, env)
            with_env = dataclasses.replace(options, secret_env=values)
            code, session = ops.submit_script(config, script, script_args, with_env, echo_line)
            report_session(settings, session, "tmux" if tmux else "screen")
            return code

        sys.exit(
            run_with_lifecycle(
                settings, cluster_config_file, cluster_name, start, stop, action, usage_env, env
            )
        )
    _refuse_with_recover(screen or tmux or bool(port_forward), storage_path)
    overrides = Overrides(cluster_name=cluster_name, controller=controller)
    # Refused before anything starts (a bad host, a provider no controller can serve).
    with_overrides = load_config(cluster_config_file, overrides)
    on_controller = with_overrides.recover.controller is not None
    handed_off: list[Run] = []  # a supervisor on the controller took the run (and its --stop)

    def recovering_action(config: ClusterConfig) -> int:
        if controller:
            config = with_overrides  # the --controller host (the lifecycle's load has none)
        chosen = launch.settings_for(config, True, storage_path, max_restarts_on_errors)
        assert chosen is not None
        secrets = values_for(config, env)
        _say_storage(settings, config, chosen)
        new = _NewRun(config, chosen, Path(script), script_args, stop, cluster_name)
        if chosen.controller is not None:
            return _on_controller(
                settings, new, chosen.controller, cluster_config_file, detach, handed_off, secrets
            )
        run = launch.create_run(config, Path(script), script_args, chosen, stop=stop)
        if detach:
            process = launch.spawn_supervisor(run, cluster_name, secrets)
            started = launch.wait_first_attempt(run, process)
            settings.output.line(
                f"Run {run.id} started (attempt {len(started.attempts)}); supervised from this "
                f"machine by process {process.pid}, which outlives this command. Follow it with "
                f"`launcher jobs logs {cluster_config_file} {run.id} --follow`"
                + (" ; the cluster goes down once it ends." if stop else ".")
            )
            return 0
        ended = supervise_here(
            settings, run, config, Overrides(cluster_name=cluster_name), secrets=secrets
        )
        say_run_end(settings, ended)
        return run_exit_code(ended)

    sys.exit(
        run_with_lifecycle(
            settings,
            cluster_config_file,
            cluster_name,
            start,
            # A supervisor of the run's own takes the cluster down once the run has ended.
            lambda: stop and not handed_off and not (detach and not on_controller),
            recovering_action,
            usage_env,
            env,
        )
    )


def _config_recovers(path: str) -> bool:
    """Whether the config turns recovery on (read again by the command itself)."""
    return load_config(path, Overrides()).recover.enabled


def _refuse_with_recover(session_options: bool, storage_path: str | None) -> None:
    if session_options:
        raise UsageError(
            "--screen, --tmux and --port-forward do not go with --recover: the run is "
            "detached on the head already (follow it with `launcher jobs logs --follow`)"
        )
    if (
        storage_path is not None
        and "://" not in storage_path
        and not storage_path.startswith(("/", "~"))
    ):
        raise UsageError(
            f"--recover-storage {storage_path} is relative: give an absolute path every node "
            "reaches, or a URI such as s3://BUCKET/PATH"
        )


def _say_storage(settings: Settings, config: ClusterConfig, chosen: RecoverSettings) -> None:
    if chosen.storage_path:
        settings.output.line(check_storage(connect(config), chosen.storage_path))
    else:
        settings.output.line(
            "warning: no storage path (--recover-storage, metadata.launcher.recover."
            "storage_path): after a lost head the script starts again from what it keeps "
            "itself; Tune and Train resume only from storage every node reaches"
        )


@dataclasses.dataclass(frozen=True)
class _NewRun:
    config: ClusterConfig
    chosen: RecoverSettings
    script: Path
    args: tuple[str, ...]
    stop: bool
    cluster_name: str | None


def _on_controller(
    settings: Settings,
    new: _NewRun,
    where: ControllerSettings,
    path: str,
    detach: bool,
    handed_off: list[Run],
    secrets: Mapping[str, str],
) -> int:
    """The run supervised from its controller, reached before the run is made here: with
    `detach`, return once the supervisor there has started it, else follow the driver's
    output from there until the run ends (Ctrl-C leaves the run with the controller). The
    run goes into `handed_off` once that supervisor has started it."""
    ctl = remote.reach(where)
    try:
        run = launch.create_run(
            new.config, new.script, new.args, new.chosen, stop=new.stop, controller=ctl.name
        )
        pid, started = remote.supervise_remote(
            ctl, new.config, run, new.cluster_name, settings.output.line, secrets
        )
        handed_off.append(run)
        follow_hint = f"`launcher jobs logs {path} {run.id} --follow`"
        if detach:
            settings.output.line(
                f"Run {run.id} started (attempt {len(started.attempts)}); supervised by the "
                f"controller {ctl.name} (process {pid} there), with this machine closed too. "
                f"Follow it with {follow_hint}"
                + (" ; the cluster goes down once it ends." if run.stop else ".")
            )
            return 0
        settings.output.line(
            f"Run {run.id} started on the controller {ctl.name}; following its output "
            "(Ctrl-C stops following, not the run)."
        )
        return follow_controller(settings, ctl, run, hint=follow_hint, keep_here=True)
    finally:
        ctl.close()
