"""Entry point of the `launcher` command: the group, whose commands load when asked for
(`launcher.cli.app.COMMAND_MODULES`)."""

from launcher.cli.app import cli, main

__all__ = ["cli", "main"]
