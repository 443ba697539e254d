"""Progress events the library emits; the CLI decides how to show them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeProgress:
    node_id: str
    kind: str
    node_type: str
    ip: str | None
    stage: str
    detail: str = ""
    failed: bool = False
    done: bool = False


@dataclass(frozen=True)
class Message:
    """A line for the user about the cluster as a whole."""

    text: str
    level: str = "info"  # info | warning


Event = NodeProgress | Message
EventSink = Callable[[Event], None]


def ignore(_: Event) -> None:
    """An event sink that drops everything."""
