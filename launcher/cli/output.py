"""Everything the CLI shows goes through here: rich for tables, plain lines for problems."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any

import click
from rich.console import Console

from launcher.config.problems import Problem


def _no_color() -> bool:
    """NO_COLOR set to anything but the empty string turns colors off."""
    return bool(os.environ.get("NO_COLOR"))


class Output:
    """`color`: None follows the terminal and NO_COLOR (https://no-color.org), else forced
    on or off (`--log-color`); `live`: None shows live views on a terminal, False plain
    lines only (`--log-style record`), True live views where rich can draw them."""

    def __init__(self, color: bool | None = None, live: bool | None = None) -> None:
        self.color = color
        self.live = live
        self._consoles()

    def _consoles(self) -> None:
        # Consoles are made per command run and follow sys.stdout/sys.stderr as they are then.
        forced = True if self.color else None  # colors also off a terminal
        off = self.color is False or (self.color is None and _no_color())
        self.console = Console(highlight=False, soft_wrap=True, no_color=off, force_terminal=forced)
        self.err_console = Console(
            stderr=True, highlight=False, soft_wrap=True, no_color=off, force_terminal=forced
        )

    def set_color(self, color: bool | None) -> None:
        self.color = color
        self._consoles()

    def set_live(self, live: bool | None) -> None:
        self.live = live

    def colors(self, stream: Any) -> bool:
        """Whether lines written to `stream` get colors."""
        if self.color is not None:
            return self.color
        return not _no_color() and bool(getattr(stream, "isatty", lambda: False)())

    def live_view(self) -> bool | None:
        """For ProgressView: False for plain lines, else None (a terminal decides)."""
        return False if self.live is False else None

    def problems(self, source: str, problems: Iterable[Problem]) -> None:
        """One line per problem on stderr; red for errors, yellow for warnings, where colors
        are wanted (a terminal without NO_COLOR, or --log-color true)."""
        color = self.colors(sys.stderr)
        for problem in problems:
            line = problem.render(source)
            if color:
                line = click.style(line, fg="red" if problem.is_error else "yellow")
            click.echo(line, err=True)

    def json(self, data: Any) -> None:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))

    def line(self, text: str = "") -> None:
        self.console.print(text, markup=False)
