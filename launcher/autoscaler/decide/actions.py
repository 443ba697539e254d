"""The kinds of decision the autoscaler logs, typed.

A decision's kind is an `Action`; its text (`str(decision)`) is what the log and the state
file show, unchanged from when kinds were plain strings: an `Action` is a `StrEnum`, so it
also compares equal to, and renders as, its old string.
"""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    LAUNCH = "launch"
    TERMINATE = "terminate"
    INFEASIBLE = "infeasible"
    WAIT = "wait"
    FALLBACK = "fallback"
    CAPACITY = "capacity"  # a type and zone avoided after a capacity failure or preemption
    BACKOFF = "backoff"  # a type waiting after repeated failures
    ERROR = "error"  # a launch that failed


# The kinds kept in the state file's recent decisions (what `launcher status` shows).
RECORDED: frozenset[Action] = frozenset(
    {
        Action.LAUNCH,
        Action.TERMINATE,
        Action.INFEASIBLE,
        Action.FALLBACK,
        Action.CAPACITY,
        Action.BACKOFF,
    }
)
