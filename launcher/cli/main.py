"""Entry point of the `launcher` command: the group with every command registered."""

from launcher.cli import autostop_command as _autostop_command  # noqa: F401 - registers it
from launcher.cli import check_command as _check_command  # noqa: F401 - registers it
from launcher.cli import cluster_commands as _cluster_commands  # noqa: F401 - registers them
from launcher.cli import commands as _commands  # noqa: F401 - registers the commands
from launcher.cli import dump_command as _dump_command  # noqa: F401 - registers it
from launcher.cli import jobs_commands as _jobs_commands  # noqa: F401 - registers them
from launcher.cli import node_commands as _node_commands  # noqa: F401 - registers them
from launcher.cli import records_commands as _records_commands  # noqa: F401 - registers them
from launcher.cli import submit_command as _submit_command  # noqa: F401 - registers it
from launcher.cli.app import cli, main

__all__ = ["cli", "main"]
