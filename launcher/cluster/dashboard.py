"""`launcher dashboard`: Ray's dashboard on the head, reached from this machine.

Which port the dashboard listens on is read from the head's start commands (Ray's own
`--include-dashboard` and `--dashboard-port`, default 8265); the forward is reported ready
only once an HTTP answer came back through it.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from launcher.cluster.head import HeadSession
from launcher.errors import LauncherError, UsageError
from launcher.runners.container import host_runner
from launcher.runners.forward import forwarding
from launcher.runners.ray_node import option_values

RAY_DASHBOARD_PORT = 8265
READY_WAIT_S = 20.0  # a dashboard just started takes a few seconds to answer

_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


class NoDashboardError(LauncherError):
    """The cluster's Ray runs without a dashboard, or nothing answers on its port."""


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _option(words: Sequence[str], name: str) -> str | None:
    """The value of `--name=V` or `--name V` (the last one given), else None."""
    values = option_values(words, name)
    return values[-1] if values else None


def dashboard_port(head_commands: Sequence[str], env: Mapping[str, str]) -> int | None:
    """The head's dashboard port as its `ray start --head` command gives it (variables
    expanded with `env`), or None when that command turns the dashboard off."""
    for command in head_commands:
        words = _words(command)
        if "--head" not in words:
            continue
        include = _option(words, "--include-dashboard")
        if include is not None and include.lower() in ("false", "0", "no"):
            return None
        port = _option(words, "--dashboard-port")
        if port is None:
            return RAY_DASHBOARD_PORT
        expanded = _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), port)
        if not expanded.isdigit():
            raise UsageError(
                f"the head starts Ray with --dashboard-port={port}, which is not a port "
                "here; pass the port with --remote-port"
            )
        return int(expanded)
    return RAY_DASHBOARD_PORT


def http_answer(port: int, timeout_s: float = 5.0) -> str | None:
    """The status line of an HTTP answer from 127.0.0.1:`port`, None when none came."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
            head = conn.recv(256)
    except OSError:
        return None
    if not head.startswith(b"HTTP/"):
        return None
    return head.split(b"\r\n", 1)[0].decode(errors="replace")


@contextlib.contextmanager
def forwarded_dashboard(
    session: HeadSession,
    local_port: int,
    remote_port: int | None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[tuple[str, int]]:
    """Forward 127.0.0.1:`local_port` to the head's dashboard while the context is open.
    Yields the local URL and the head's port, once the dashboard has answered through it."""
    config = session.config
    if remote_port is None:
        remote_port = dashboard_port(config.head_start_ray_commands, session.env)
    if remote_port is None:
        raise NoDashboardError(
            f"cluster {config.cluster_name} runs Ray without a dashboard (its head starts "
            "Ray with --include-dashboard=false); remove that flag from "
            "head_start_ray_commands and run `launcher up` again"
        )
    opener = session.provider.access.port_opener(session.head, host_runner(session.runner))
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(forwarding([(local_port, remote_port)], opener))
        except OSError as exc:
            raise UsageError(
                f"cannot listen on 127.0.0.1:{local_port} here ({exc.strerror or exc}); "
                "pick another port with --port"
            ) from None
        deadline = clock() + READY_WAIT_S
        while http_answer(local_port) is None:
            if clock() >= deadline:
                raise NoDashboardError(
                    f"nothing answers HTTP on port {remote_port} of the head of cluster "
                    f"{config.cluster_name} after {READY_WAIT_S:g} s: its dashboard is not "
                    "running (see `launcher exec CLUSTER.yaml 'ray status'`), or listens "
                    "on another port (pass it with --remote-port)"
                )
            sleep(0.5)
        yield f"http://127.0.0.1:{local_port}", remote_port
