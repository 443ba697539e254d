"""The `launcher` command group and its error handling."""

from __future__ import annotations

import importlib
import math
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import click

from launcher import __version__
from launcher.cli.output import Output
from launcher.errors import ConfigError, LauncherError


@dataclass
class Settings:
    verbose: bool
    output: Output


# The module that defines each command, imported when the command is asked for (listing
# them, for --help or completion, imports them all): `launcher up` does not load what
# `check`, `jobs` or `dump` need (~40 ms of a no-op `up`'s 0.67 s). tests/test_cli_lazy.py
# checks that this names every command, and each where it is defined.
COMMAND_MODULES = {
    "attach": "cluster_commands",
    "autostop": "autostop_command",
    "check": "check_command",
    "cluster-dump": "dump_command",
    "cost-report": "records_commands",
    "dashboard": "node_commands",
    "down": "cluster_commands",
    "exec": "cluster_commands",
    "get-head-ip": "cluster_commands",
    "get-worker-ips": "cluster_commands",
    "jobs": "jobs_commands",
    "kill-random-node": "node_commands",
    "list": "records_commands",
    "logs": "dump_command",
    "monitor": "cluster_commands",
    "plan": "commands",
    "rsync-down": "cluster_commands",
    "rsync-up": "cluster_commands",
    "simulate": "cluster_commands",
    "status": "cluster_commands",
    "submit": "submit_command",
    "up": "cluster_commands",
    "validate": "commands",
}


class LauncherGroup(click.Group):
    """Turns library errors into one clear line and an exit code; tracebacks only with -v.
    Commands register themselves when their module is imported (`COMMAND_MODULES`)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"launcher.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in sorted(set(COMMAND_MODULES.values())):
            importlib.import_module(f"launcher.cli.{module}")
        return super().list_commands(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            settings = ctx.find_object(Settings)
            out = settings.output if settings else Output()
            out.problems(exc.source, exc.problems)
            if settings and settings.verbose:
                traceback.print_exc()
            ctx.exit(exc.exit_code)
        except LauncherError as exc:
            _fail(ctx, f"error: {exc}", exc.exit_code)
        except KeyboardInterrupt:
            _fail(ctx, "interrupted", 130)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            _fail(
                ctx,
                f"internal error: {type(exc).__name__}: {exc} "
                "(run with -v for the traceback, and please report it)",
                1,
            )


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange that also refuses nan and inf (`nan < 0` is false, so a range
    alone lets nan through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def _fail(ctx: click.Context, message: str, code: int) -> None:
    settings = ctx.find_object(Settings)
    if settings and settings.verbose:
        traceback.print_exc()
    click.echo(message, err=True)
    ctx.exit(code)


@click.group(cls=LauncherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and more detail on errors.")
@click.version_option(
    __version__, "--version", prog_name="launcher", help="Show the launcher's version and exit."
)
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Launch and autoscale Ray clusters from Ray-compatible cluster YAML files."""
    ctx.obj = Settings(verbose=verbose, output=Output())


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="launcher")
