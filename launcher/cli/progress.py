"""The live per-node progress view of `up` and `down` (plain lines when not on a terminal)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from launcher.events import Event, Message, NodeProgress


class ProgressView:
    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self.console = console
        self.live_enabled = sys.stderr.isatty() if live is None else live
        self.rows: dict[str, NodeProgress] = {}
        self.started: dict[str, float] = {}
        self.lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.live_enabled:
            self._live = Live(
                self._table(), console=self.console, refresh_per_second=8, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(kind, error, trace)
            self._live = None

    def __call__(self, event: Event) -> None:
        with self.lock:
            if isinstance(event, Message):
                self._message(event)
                return
            self.rows[event.node_id] = event
            self.started.setdefault(event.node_id, time.monotonic())
            if self._live is not None:
                self._live.update(self._table())
            else:
                mark = "failed: " if event.failed else ""
                detail = f" ({event.detail})" if event.failed and event.detail else ""
                click.echo(
                    f"[{event.kind} {event.node_id} {event.ip or ''}] {mark}{event.stage}{detail}",
                    err=True,
                )

    def _message(self, event: Message) -> None:
        line = f"{'warning: ' if event.level == 'warning' else ''}{event.text}"
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            click.echo(line, err=True)

    def _table(self) -> Table:
        table = Table(show_edge=False, box=None, pad_edge=False)
        for column in ("node", "kind", "type", "ip", "stage", "time"):
            table.add_column(column)
        now = time.monotonic()
        for node_id, row in self.rows.items():
            style = "red" if row.failed else ("green" if row.done else "")
            elapsed = now - self.started.get(node_id, now)
            # A failed node keeps why in its row (as the plain lines and the final error say).
            stage = f"{row.stage}: {row.detail}" if row.failed and row.detail else row.stage
            table.add_row(
                node_id,
                row.kind,
                row.node_type,
                row.ip or "-",
                stage,
                f"{elapsed:4.0f}s",
                style=style,
            )
        return table
