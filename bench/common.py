"""What the bench scripts share: stopping on a failed check, waiting, showing a time,
keeping Ray's log lines off the tables."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class BenchError(RuntimeError):
    """The run cannot go on (a step failed or timed out)."""


def expect(what: str, ok: bool) -> None:
    """Stop the bench, saying `what` after the script's name, unless `ok`."""
    if not ok:
        raise SystemExit(f"{Path(sys.argv[0]).stem}: {what}")


def wait_for(
    check: Callable[[], T],
    what: str,
    timeout: float,
    *,
    poll_s: float = 0.1,
    alive: Callable[[], None] | None = None,
) -> T:
    """Poll `check` until it answers something true, and return that. `alive` (called
    between polls) raises when the run cannot go on; after `timeout` s, BenchError."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll_s)


def show_time(seconds: float) -> str:
    """A duration as the tables show it: us below a millisecond, ms below a second."""
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def silence_ray_logs(stack: contextlib.ExitStack) -> None:
    """Ray's loggers write to this process's stderr (Ray's autoscaler: to monitor.log): send
    them to /dev/null instead, still formatted and written."""
    sink = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
    for handler in logging.getLogger("ray").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)


def show_calls(calls: Mapping[str, int], short: Mapping[str, str], per: int = 1) -> str:
    """`calls` (operation -> count) as "2 list + 1 delete", per `per` actions, in the order
    of `short` (operation -> its short name), the others after."""
    order = list(short)
    parts = []
    for operation, n in sorted(
        calls.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)
    ):
        if n:
            value = n / per
            text = f"{value:g}" if value == int(value) else f"{value:.1f}"
            parts.append(f"{text} {short.get(operation, operation)}")
    return " + ".join(parts) or "none"


@contextlib.contextmanager
def muted(quiet: bool) -> Iterator[None]:
    """With `quiet`, what the code inside prints (a provider's own lines, such as Ray's
    cli_logger line per instance) is kept off the tables."""
    if not quiet:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def counts(
    text: str, option: str, *, prog: str, example: str, top: int = 200, zero_is_none: bool = True
) -> list[int]:
    """A `1,10,50` option's numbers, each from 1 to `top` (`0`: none, where `zero_is_none`);
    anything else ends the run with one line naming the option."""
    if zero_is_none and text.strip() == "0":
        return []
    try:
        found = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise SystemExit(f"{prog}: {option} {text!r}: give numbers like {example}") from None
    if not found or min(found) < 1 or max(found) > top:
        raise SystemExit(f"{prog}: {option} {text!r}: give numbers from 1 to {top}")
    return found


def ray_update(provider: Any) -> None:
    """The provider calls of one update of Ray's v1 autoscaler (StandardAutoscaler.update,
    ray/autoscaler/_private/autoscaler.py) with nothing to change: NonTerminatedNodes lists
    once and reads every node's tags (its kind); the config and update checks read every
    worker's tags twice more; the unhealthy-node check and the LoadMetrics pruning read
    every node's internal_ip. Providers that cache their listing (AWS, GCP, KubeRay's
    BatchingNodeProvider) answer all but the listing from it; Ray 1.x's Kubernetes
    provider sent a GET for each. A batching provider's post_process ends the update."""
    ids = provider.non_terminated_nodes({})
    for node_id in ids:
        provider.node_tags(node_id)
    for node_id in ids:
        provider.node_tags(node_id)
        provider.node_tags(node_id)
        provider.internal_ip(node_id)
    for node_id in ids:
        provider.internal_ip(node_id)
    if hasattr(provider, "post_process"):
        provider.post_process()


TICKS_OURS = 60  # an idle minute of our daemon: one tick a second


class FakeClock:
    """A clock that moves only when told (`now`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def daemon_minute(provider: Any) -> tuple[Any, float]:
    """Our autoscaler daemon (launcher/autoscaler/daemon.py) over `provider` for an idle
    minute: TICKS_OURS ticks at its 1 s interval on a clock moving 1 s per tick. Returns
    the daemon (its executor shut down) and the seconds its ticks took."""
    from launcher.autoscaler.daemon import Daemon

    clock = FakeClock()
    daemon = Daemon(provider, provider.config, clock=clock)
    started = time.perf_counter()
    try:
        for _ in range(TICKS_OURS):
            daemon.tick()
            clock.now += 60.0 / TICKS_OURS
        return daemon, time.perf_counter() - started
    finally:
        daemon.executor.shutdown()
