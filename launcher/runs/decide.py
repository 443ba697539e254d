"""What the supervisor makes of what it sees: pure functions, no I/O.

- Is the head lost? A head the provider no longer lists, lists as taken back (preempted)
  or as dead (its Ray gone), or that has not answered for a while.
- How did an attempt end? Its driver's exit code, whether a node was lost while it ran, and
  what its last output says: Ray's errors for a lost node make a failure recoverable.
- What next? Start the driver again (a lost node always may; the user's own failure only
  `max_restarts_on_errors` times), or end the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.providers.base import Node, NodeState
from launcher.runs.model import AttemptEnd, Run, RunState

# Ray's errors that say a node (not the user's code) was lost.
_NODE_LOST = re.compile(
    r"ray\.exceptions\.(NodeDiedError|OwnerDiedError|ObjectLostError|"
    r"ObjectReconstructionFailed\w*|RaySystemError|GcsUnavailable\w*)"
    r"|because its node has died|node .* has been marked dead|"
    r"Failed to connect to GCS|GCS has (been )?(down|unavailable)",
    re.IGNORECASE,
)


def head_lost(head: Node | None, silent_s: float, silence_limit_s: float) -> str | None:
    """Why the head counts as lost (one phrase), or None while it is not. `silent_s`: how
    long it has not answered a command while listed running."""
    if head is None:
        return "it is no longer listed"
    if head.state is NodeState.PREEMPTED:
        return "it was taken back (preempted)"
    if head.state is NodeState.DEAD:
        return "its Ray died"
    if head.state is NodeState.STOPPED:
        return "it was stopped"
    if silent_s >= silence_limit_s:
        return f"it has not answered for {silent_s:.0f} s"
    return None


def node_lost_in_output(output_tail: str) -> bool:
    return _NODE_LOST.search(output_tail) is not None


def attempt_end(
    exit_code: int | None, cancelled: bool, nodes_lost: bool, output_tail: str
) -> AttemptEnd:
    """How an attempt whose driver is gone (the head still up) ended. A driver gone
    without an exit code was killed: by a lost node's doing unless cancelled."""
    if cancelled:
        return AttemptEnd.CANCELLED
    if exit_code == 0:
        return AttemptEnd.SUCCEEDED
    if exit_code is None or nodes_lost or node_lost_in_output(output_tail):
        return AttemptEnd.NODE_LOST
    return AttemptEnd.USER_ERROR


# A driver that keeps failing as if a node were lost, with every node seen up, is not
# started again for ever: after this many such attempts in a row, the run fails.
UNEXPLAINED_LOSSES = 3


def _unexplained(run: Run) -> int:
    """How many attempts in a row, the last included, ended "node lost" with no node seen
    lost by the supervisor."""
    count = 0
    for attempt in reversed(run.attempts):
        if attempt.end is not AttemptEnd.NODE_LOST or attempt.saw_node_lost:
            break
        count += 1
    return count


@dataclass(frozen=True)
class Next:
    """After an attempt: start another (`again`), or end the run in `state` saying `why`."""

    again: bool
    state: RunState
    why: str
    counts_as_error: bool = False


def after_attempt(run: Run, end: AttemptEnd, exit_code: int | None) -> Next:
    attempt = len(run.attempts)
    if end is AttemptEnd.SUCCEEDED:
        return Next(False, RunState.SUCCEEDED, f"the driver exited 0 (attempt {attempt})")
    if end is AttemptEnd.CANCELLED:
        return Next(False, RunState.CANCELLED, "cancelled")
    if end is AttemptEnd.NODE_LOST and _unexplained(run) > UNEXPLAINED_LOSSES:
        return Next(
            False,
            RunState.FAILED,
            f"the driver failed {_unexplained(run)} times in a row with Ray's errors for a lost "
            "node (or was killed) while no node was seen lost and Ray on the head answered; "
            f"see its output with `launcher jobs logs {run.config_path} {run.id}`",
        )
    if end in (AttemptEnd.NODE_LOST, AttemptEnd.HEAD_LOST):
        return Next(True, RunState.RUNNING, f"attempt {attempt}: {end.value}; starting again")
    left = run.max_restarts_on_errors - run.restarts_on_errors
    code = f"exited {exit_code}" if exit_code is not None else "was killed"
    if left > 0:
        return Next(
            True,
            RunState.RUNNING,
            f"the driver {code} (attempt {attempt}); restarting it ({left} restart(s) on "
            "errors left)",
            counts_as_error=True,
        )
    allowed = run.max_restarts_on_errors
    return Next(
        False,
        RunState.FAILED,
        f"the driver {code} with no node lost (attempt {attempt}"
        + (f", after {allowed} restart(s) on errors" if allowed else "")
        + "); that is the script's own failure: see its output above or with `launcher jobs "
        f"logs {run.config_path} {run.id}`; allow restarts with --max-restarts-on-errors",
    )


def new_head_type(head_type: str, fallbacks: tuple[str, ...], preempted: bool, same: bool) -> str:
    """The type of the head that replaces a lost one: after a preemption, the head type's
    first fallback (a reclaimed spot head comes back on-demand) unless `same`."""
    if preempted and fallbacks and not same:
        return fallbacks[0]
    return head_type
