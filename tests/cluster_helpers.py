"""Helpers for tests that run real clusters on the localhost provider."""

from __future__ import annotations

import json
import os
import pty
import random
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.providers.localhost.processes import cluster_processes, stop_processes

LAUNCHER = str(Path(sys.executable).parent / "launcher")


def cluster_config(name: str, *, min_workers: int = 1, extra: str = "") -> str:
    return (
        f"cluster_name: {name}\n"
        "max_workers: 3\n"
        "idle_timeout_minutes: 1\n"
        "provider: {type: localhost}\n"
        "available_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 2}, max_workers: 0}\n"
        f"  worker: {{node_config: {{}}, resources: {{CPU: 2}}, min_workers: {min_workers}, "
        "max_workers: 3}\n"
        "head_node_type: head\n" + extra
    )


def run(
    *args: str, timeout: float = 180, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAUNCHER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )


def start(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LAUNCHER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=env,
    )


def killed_after(delay: float, env: dict[str, str], *args: str) -> None:
    """Run the launcher with `args`, and SIGKILL it (its whole process group) if it has not
    ended after `delay` seconds."""
    process = subprocess.Popen(
        [LAUNCHER, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        process.wait(delay)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


@dataclass(frozen=True)
class KillPlan:
    """One seeded run of a kill-at-random test: `up` SIGKILLed after `up_delay` s, then,
    half the time, `down` after `down_delay` s; `what` says so, for failure messages."""

    up_delay: float
    down_delay: float | None
    what: str


def kill_plan(seed: int, index: int, up_max_s: float, down_max_s: float) -> KillPlan:
    rng = random.Random(seed * 1000 + index)
    up_delay = rng.uniform(0.3, up_max_s)
    down_delay = rng.uniform(0.3, down_max_s) if rng.random() < 0.5 else None
    what = f"seed {seed}, run {index}: up killed at {up_delay:.2f} s" + (
        f", down killed at {down_delay:.2f} s" if down_delay is not None else ""
    )
    return KillPlan(up_delay, down_delay, what)


def killed_then_up(
    plan: KillPlan, path: Path, env: dict[str, str], down_args: tuple[str, ...] = ()
) -> None:
    """Kill `up` (and `down DOWN_ARGS`) as `plan` says, then require an `up` to succeed."""
    killed_after(plan.up_delay, env, "up", "-y", str(path))
    if plan.down_delay is not None:
        killed_after(plan.down_delay, env, "down", "-y", *down_args, str(path))
    up = run("up", "-y", str(path), env=env, timeout=600)
    assert up.returncode == 0, f"{plan.what}: {up.stdout}{up.stderr}"


def purged_leaves_nothing(
    plan: KillPlan, path: Path, env: dict[str, str], left: Callable[[], list[str]]
) -> None:
    """Require `down --purge` to succeed and `left()` to find nothing of the cluster."""
    down = run("down", "-y", "--purge", str(path), env=env, timeout=600)
    assert down.returncode == 0, f"{plan.what}: {down.stdout}{down.stderr}"
    assert left() == [], plan.what


def status(config: Path) -> dict[str, Any]:
    result = run("status", "--json", str(config), timeout=60)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def temp_dir_of(name: str) -> str:
    from launcher.config.loader import parse_config
    from launcher.providers.localhost.provider import LocalhostProvider

    config = parse_config(cluster_config(name), "inline")
    return LocalhostProvider(config).temp_dir()


def key_of(name: str) -> str:
    """The process key of localhost cluster `name` in this test's home."""
    from launcher.providers.localhost.spec import process_key

    return process_key(name)


def leftover_processes(name: str) -> list[str]:
    found = cluster_processes(key_of(name), temp_dir_of(name))
    return [p.command or str(p.pid) for p in found]


def kill_cluster(name: str) -> None:
    """Last-resort cleanup after a test, whatever state it left."""
    stop_processes(p.pid for p in cluster_processes(key_of(name), temp_dir_of(name)))


def interrupt(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(timeout=120)


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def on_terminal(args: list[str], env: dict[str, str], typed: bytes) -> tuple[str, int]:
    """Run the launcher with `args` on a pseudo-terminal, type `typed` into it, and return
    what the terminal showed (within 120 s, after which it is killed) and the exit code."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the launcher on a terminal
        os.execve(sys.executable, [sys.executable, "-m", "launcher", *args], env)
    os.write(fd, typed)
    output = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    ended = time.monotonic() + 30
    while (found := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < ended:
        time.sleep(0.1)
    if found[0] == 0:  # it never ended the session: kill it, so the test fails, not hangs
        os.kill(pid, signal.SIGKILL)
        found = os.waitpid(pid, 0)
    return output.decode(errors="replace"), os.waitstatus_to_exitcode(found[1])
