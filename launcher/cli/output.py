"""Everything the CLI shows goes through here: rich for tables, plain lines for problems."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

import click
from rich.console import Console

from launcher.config.problems import Problem


class Output:
    def __init__(self) -> None:
        # Consoles are made per command run and follow sys.stdout/sys.stderr as they are then.
        self.console = Console(highlight=False, soft_wrap=True)
        self.err_console = Console(stderr=True, highlight=False, soft_wrap=True)

    def problems(self, source: str, problems: Iterable[Problem]) -> None:
        """One line per problem on stderr; red for errors, yellow for warnings on a terminal."""
        color = sys.stderr.isatty()
        for problem in problems:
            line = problem.render(source)
            if color:
                line = click.style(line, fg="red" if problem.is_error else "yellow")
            click.echo(line, err=True)

    def json(self, data: Any) -> None:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))

    def line(self, text: str = "") -> None:
        self.console.print(text, markup=False)
