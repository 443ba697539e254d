"""`launcher jobs`: the runs `launcher submit --recover` started, as SkyPilot's managed jobs
(`sky jobs queue/logs/cancel`) are: they outlive any one head, so they are listed, followed
and cancelled from outside the cluster, not through Ray's job server on the head (which
`ray job` talks to, and which goes with the head)."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from types import FrameType

import click

from launcher import secret_env
from launcher.cli.app import Settings, cli
from launcher.cli.cluster_commands import (
    cli_config,
    config_argument,
    confirmer,
    down_cluster,
    echo_line,
    name_option,
    yes_option,
)
from launcher.cli.progress import ProgressView
from launcher.cluster.head import connect
from launcher.config.loader import Overrides
from launcher.config.model import ClusterConfig, ControllerSettings
from launcher.errors import LauncherError, NoClusterError, UsageError
from launcher.providers.factory import make_provider
from launcher.runs import controller as remote
from launcher.runs import driver, replica, store
from launcher.runs.listing import controller_for, known_runs, state_of
from launcher.runs.model import Run, RunState, this_host
from launcher.runs.supervisor import SuperviseOptions, Supervisor


@cli.group()
def jobs() -> None:
    """Runs started with `launcher submit --recover`: list, logs, cancel, supervise."""


def run_exit_code(run: Run) -> int:
    if run.state is RunState.SUCCEEDED:
        return 0
    if run.state is RunState.CANCELLED:
        return 130
    code = run.attempt.exit_code if run.attempt else None
    return code if code else 1


def _summary(run: Run) -> str:
    recoveries = len(run.recoveries)
    noun = "recovery" if recoveries == 1 else "recoveries"
    return (
        f"{len(run.attempts)} attempt(s), {recoveries} head {noun}, "
        f"{run.time_lost(time.time()):.0f} s lost"
    )


def say_run_end(settings: Settings, run: Run) -> None:
    line = f"Run {run.id} {run.state.value}: {_summary(run)}."
    if run.state is not RunState.SUCCEEDED and run.message:
        line += f" {run.message}"
    settings.output.line(line)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Released()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Released(Exception):
    """SIGTERM to a supervisor: it lets go of the run (another may take it up)."""


def supervise_here(
    settings: Settings,
    run: Run,
    config: ClusterConfig,
    overrides: Overrides,
    *,
    cancel: bool = True,
    secrets: Mapping[str, str] | None = None,
) -> Run:
    """Supervise `run` from this process until it ends. Ctrl-C cancels it (`cancel`) or
    only lets go of it; SIGTERM lets go of it (the run goes on, unsupervised). `secrets`:
    the variables for its drivers (`submit --env`)."""
    with ProgressView(settings.output.err_console, live=settings.output.live_view()) as view:
        options = SuperviseOptions(secret_env=dict(secrets or {}))
        supervisor = Supervisor(
            run, config, overrides, settings.output.line, echo_line, view, options
        )
        try:
            with _sigterm_as_interrupt():
                return supervisor.supervise()
        except KeyboardInterrupt:
            if not cancel:
                settings.output.line(f"Stopped supervising run {run.id}; it goes on.")
                raise
            settings.output.line(f"Interrupted: cancelling run {run.id}.")
            supervisor.cancel()
            return supervisor.run
        except _Released:
            settings.output.line(f"Stopped supervising run {run.id} (SIGTERM); it goes on.")
            raise SystemExit(143) from None


def _pick(config: ClusterConfig, run_id: str | None) -> Run:
    runs = known_runs(config)
    if run_id is None:
        if not runs:
            raise LauncherError(
                f"cluster {config.cluster_name} has no runs (on this machine or its nodes); "
                f"start one with `launcher submit {config.source} SCRIPT --recover`"
            )
        return runs[-1]
    found = next((r for r in runs if r.id == run_id), None)
    if found is None:
        raise LauncherError(
            f"cluster {config.cluster_name} has no run {run_id}; see its runs with "
            f"`launcher jobs list {config.source}`"
        )
    return found


def _as_json(run: Run, now: float) -> dict[str, object]:
    return {
        "id": run.id,
        "cluster_name": run.cluster_name,
        "state": run.state.value,
        "supervised": bool(run.supervisor and run.supervisor.live(now)),
        "script": run.script,
        "args": list(run.args),
        "attempts": len(run.attempts),
        "recoveries": len(run.recoveries),
        "restarts_on_errors": run.restarts_on_errors,
        "time_lost_s": round(run.time_lost(now), 1),
        "created_at": run.created_at,
        "ended_at": run.ended_at,
        "storage_path": run.storage_path,
        "message": run.message,
        "recoveries_detail": [
            {
                "lost_head": r.lost_head,
                "why": r.why,
                "new_head": r.new_head,
                "new_head_type": r.new_head_type,
                "kept_workers": list(r.adopted),
                "phases_s": dict(r.phases),
            }
            for r in run.recoveries
        ],
    }


@jobs.command(name="list")
@config_argument
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@name_option
@click.pass_obj
def list_runs(
    settings: Settings, cluster_config_file: str, as_json: bool, cluster_name: str | None
) -> None:
    """The cluster's runs: state, attempts, head recoveries and time lost."""
    config = cli_config(cluster_config_file, cluster_name)
    runs = known_runs(config)
    now = time.time()
    if as_json:
        settings.output.json([_as_json(r, now) for r in runs])
        return
    if not runs:
        settings.output.line(f"Cluster {config.cluster_name} has no runs.")
        return
    from rich.table import Table

    table = Table(box=None)
    for column in ("RUN", "STATE", "ATTEMPTS", "RECOVERIES", "LOST", "STARTED"):
        table.add_column(column, no_wrap=True)
    table.add_column("SCRIPT", no_wrap=True, overflow="ellipsis")
    for run in runs:
        table.add_row(
            run.id,
            state_of(run, now),
            str(len(run.attempts)),
            str(len(run.recoveries)),
            f"{run.time_lost(now):.0f} s",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created_at)),
            " ".join([run.script, *run.args]),
        )
    settings.output.console.print(table)


run_argument = click.argument("run_id", metavar="[RUN]", required=False)


@jobs.command()
@config_argument
@run_argument
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the output as JSON, per attempt.")
@name_option
@click.pass_obj
def logs(
    settings: Settings,
    cluster_config_file: str,
    run_id: str | None,
    follow: bool,
    as_json: bool,
    cluster_name: str | None,
) -> None:
    """The driver's output, every attempt one after the other (the latest run by default).
    With --follow, a run nobody supervises is taken up from here."""
    if follow and as_json:
        raise UsageError("--follow and --json do not go together")
    config = cli_config(cluster_config_file, cluster_name)
    run = _pick(config, run_id)
    where = controller_for(config, run)
    if where is not None and follow and _unsupervised(run):
        _controller_answers(where, run)  # else its supervisor may well be at work there
    elif where is not None:
        _controller_logs(settings, where, run, follow, as_json)
        return
    if as_json:
        settings.output.json({"id": run.id, "state": run.state.value, "attempts": _texts(run)})
        return
    here = store.load(run.cluster_name, run.id) is not None
    offset = _print_local_log(run, 0)
    if not here and not follow:
        _print_head_logs(config, run)
    if not follow or run.state.ended:
        return
    now = time.time()
    if run.supervisor is not None and run.supervisor.live(now) and not run.supervisor.is_mine():
        if here and run.supervisor.host == _host():
            _tail_local(settings, run, offset)
        else:
            _follow_elsewhere(settings, config, run)
        return
    settings.output.line(f"No supervisor is at work on run {run.id}: supervising it from here.")
    _take_up(settings, run, config, cluster_name)


def _controller_answers(where: ControllerSettings, run: Run) -> None:
    """Before a run a controller supervised is taken up here: that controller answers
    (and so its lapsed lease is its word that no supervisor runs there). LauncherError
    when it does not: a second supervisor of the run is not started on a guess."""
    ctl = remote.Controller(where)
    try:
        remote.status(ctl, run, 1 << 62)
    except LauncherError as exc:
        raise LauncherError(
            f"{exc}; run {run.id} may still be supervised there: follow it once the controller "
            f"answers, or take it up here with `launcher jobs supervise {run.config_path} "
            f"{run.id}` if the controller is gone for good"
        ) from exc
    finally:
        ctl.close()


def _unsupervised(run: Run) -> bool:
    return not run.state.ended and (run.supervisor is None or not run.supervisor.live(time.time()))


def _controller_logs(
    settings: Settings, where: ControllerSettings, run: Run, follow: bool, as_json: bool
) -> None:
    """`jobs logs` of a run a controller supervises: its log and record as the controller
    keeps them (right after `--stop` took the nodes too)."""
    ctl = remote.Controller(where)
    try:
        text = remote.log_text(ctl, run)  # LauncherError when the controller does not answer
        if as_json:
            attempts = _texts(run, text)
            settings.output.json({"id": run.id, "state": run.state.value, "attempts": attempts})
            return
        if not follow or run.state.ended:
            write_out(text)
            return
        # The log from its start as it grows (by byte offset: nothing skipped).
        sys.exit(follow_controller(settings, ctl, run))
    finally:
        ctl.close()


def follow_controller(
    settings: Settings, ctl: remote.Controller, run: Run, *, hint: str = "", keep_here: bool = False
) -> int:
    """Print the run's driver output from its controller until the run ends there, then
    say its end and return its exit code (`keep_here`: its record kept on this machine
    too). Ctrl-C stops following, not the run: 130."""
    try:
        ended = remote.follow_to_end(ctl, run, write_out, settings.output.line, keep_here=keep_here)
    except KeyboardInterrupt:
        settings.output.line(
            f"Stopped following run {run.id}; the controller {ctl.name} goes on supervising it"
            + (f" ({hint})." if hint else ".")
        )
        return 130
    say_run_end(settings, ended)
    return run_exit_code(ended)


def write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _texts(run: Run, text: str | None = None) -> list[dict[str, object]]:
    """Each attempt's output from this machine's log, or `text` (split at the attempts'
    banners)."""
    if text is None:
        try:
            text = store.log_path(run.cluster_name, run.id).read_text(errors="replace")
        except OSError:
            text = ""
    parts = re.split(r"^=== launcher: attempt (\d+) .*===\n", text, flags=re.MULTILINE)
    found = {int(n): body for n, body in zip(parts[1::2], parts[2::2], strict=False)}
    return [
        {
            "number": a.number,
            "head": a.head_id,
            "end": None if a.end is None else a.end.value,
            "exit_code": a.exit_code,
            "output": found.get(a.number, ""),
        }
        for a in run.attempts
    ]


def _follow_elsewhere(settings: Settings, config: ClusterConfig, run: Run) -> None:
    """Follow a run another machine supervises: each attempt's output from its head, as
    the cluster's copy of the run names them, until the run ends."""
    followed = 0
    while not run.state.ended:
        attempt = run.attempt
        if attempt is not None and attempt.number > followed and attempt.ended_at is None:
            try:
                session = connect(config)
                driver.follow(session.runner, session.env, run.id, attempt.number, 0, echo_line)
                followed = attempt.number
            except LauncherError:
                pass  # the head went: its successor is followed once the run names it
        time.sleep(2.0)
        run = next((r for r in known_runs(config) if r.id == run.id), run)
    say_run_end(settings, run)
    sys.exit(run_exit_code(run))


def _host() -> str:
    return this_host()


def _print_local_log(run: Run, offset: int) -> int:
    path = store.log_path(run.cluster_name, run.id)
    try:
        with path.open("rb") as log:
            log.seek(offset)
            data = log.read()
    except OSError:
        return offset
    if data:
        sys.stdout.write(data.decode("utf-8", errors="replace"))
        sys.stdout.flush()
    return offset + len(data)


def _print_head_logs(config: ClusterConfig, run: Run) -> None:
    """A run this machine has no log of: its attempts' output as the head keeps it."""
    try:
        session = connect(config)
    except NoClusterError:
        return
    folder = driver.head_run_dir(run.id)
    session.runner.run(
        f'for f in $(ls {folder}/attempt-*.log 2>/dev/null | sort -V); do echo "=== $f ==="; '
        'cat "$f"; done',
        session.env,
        echo=echo_line,
    )


def _tail_local(settings: Settings, run: Run, offset: int) -> None:
    """Follow the run's log here while its supervisor (on this machine) writes it."""
    try:
        while True:
            offset = _print_local_log(run, offset)
            current = store.load(run.cluster_name, run.id) or run
            if current.state.ended:
                _print_local_log(current, offset)
                say_run_end(settings, current)
                sys.exit(run_exit_code(current))
            time.sleep(0.5)
    except KeyboardInterrupt:
        settings.output.line(f"Stopped following run {run.id}; it goes on.")


def _take_up(settings: Settings, run: Run, config: ClusterConfig, cluster_name: str | None) -> None:
    """Supervise `run` here until it ends, then take the cluster down if it was to be."""
    if not store.script_path(run).is_file() and not replica.fetch_script(
        make_provider(config), config, run
    ):
        raise LauncherError(
            f"run {run.id}'s script {run.script} is neither on this machine nor on any node; "
            "it cannot be started again from here"
        )
    store.save(run)
    try:
        ended = supervise_here(
            settings,
            run,
            config,
            Overrides(cluster_name=cluster_name),
            cancel=False,
            # Given by the `submit` that spawned this supervisor, else the config's names.
            secrets=secret_env.inherited(os.environ, config.env_names),
        )
    except KeyboardInterrupt:
        sys.exit(130)
    say_run_end(settings, ended)
    if ended.stop:
        down_cluster(settings, config.source or run.config_path, cluster_name)
    sys.exit(run_exit_code(ended))


@jobs.command()
@config_argument
@run_argument
@name_option
@click.pass_obj
def supervise(
    settings: Settings, cluster_config_file: str, run_id: str | None, cluster_name: str | None
) -> None:
    """Supervise a run from here until it ends (what `submit --recover --detach` runs):
    take it up after its supervisor was stopped, or from another machine."""
    config = cli_config(cluster_config_file, cluster_name)
    run = _pick(config, run_id)
    if run.state.ended:
        raise LauncherError(f"run {run.id} has already ended ({run.state.value})")
    now = time.time()
    if run.supervisor is not None and run.supervisor.live(now) and not run.supervisor.is_mine():
        raise LauncherError(
            f"run {run.id} is supervised on {run.supervisor.host} by process "
            f"{run.supervisor.pid}; stop that one first"
        )
    _take_up(settings, run, config, cluster_name)


@jobs.command()
@config_argument
@run_argument
@click.option("--stop", is_flag=True, help="Take the cluster down too.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@yes_option
@name_option
@click.pass_obj
def cancel(
    settings: Settings,
    cluster_config_file: str,
    run_id: str | None,
    stop: bool,
    as_json: bool,
    yes: bool,
    cluster_name: str | None,
) -> None:
    """Cancel a run: its driver is stopped and it is not started again."""
    config = cli_config(cluster_config_file, cluster_name)
    run = _pick(config, run_id)
    if run.state.ended:
        raise LauncherError(
            f"run {run.id} has already ended ({run.state.value}); nothing to cancel"
        )
    question = f"Cancel run {run.id} of cluster {config.cluster_name}" + (
        " and take the cluster down?" if stop else "?"
    )
    if not confirmer(yes)(question):
        raise click.exceptions.Exit(1)
    where = controller_for(config, run)
    supervised = run.supervisor is not None and run.supervisor.live(time.time())
    if where is not None and supervised:
        # Its supervisor there stops the driver (it reads the request at its next look).
        stopped = remote.cancel_remote(where, run)
    else:
        store.request_cancel(run.cluster_name, run.id)  # for a supervisor on this machine
        stopped = _stop_driver(config, run)
    if not supervised:
        ended = _ended(run, stopped)
        store.save(ended)
        with suppress(LauncherError):
            replica.push(make_provider(config), config, ended)
    elif where is None and run.supervisor is not None and run.supervisor.host == _host():
        _wait_cancelled(run)
    if as_json:
        settings.output.json({"id": run.id, "state": "cancelled", "driver_stopped": stopped})
    else:
        settings.output.line(
            f"Cancelled run {run.id}"
            + ("; its driver is stopped." if stopped else " (its driver was not reached).")
        )
    if stop:
        down_cluster(settings, cluster_config_file, cluster_name)
    if not stopped:
        sys.exit(1)


def _stop_driver(config: ClusterConfig, run: Run) -> bool:
    """Stop the run's driver on the head; whether it is stopped."""
    attempt = run.attempt
    if attempt is None or attempt.ended_at is not None:
        return True
    try:
        session = connect(config, any_status=True)
        return driver.cancel(session.runner, session.env, run.id, attempt.number)
    except LauncherError as exc:
        click.echo(f"could not reach the head to stop the driver: {exc}", err=True)
        return False


def _ended(run: Run, stopped: bool) -> Run:
    return dataclasses.replace(
        run,
        state=RunState.CANCELLED,
        cancel_requested=True,
        message="cancelled" if stopped else "cancelled (driver unreached)",
        ended_at=time.time(),
        updated_at=time.time(),
    )


def _wait_cancelled(run: Run, timeout_s: float = 60.0) -> None:
    """Until the run's supervisor (on this machine) has seen it cancelled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = store.load(run.cluster_name, run.id)
        if current is None or current.state.ended:
            return
        time.sleep(0.3)
