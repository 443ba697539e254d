"""A timed-out command in a node's container is stopped in the container too: stopping the
`podman exec` that runs it (what the host's runner kills) leaves it running there.

Real podman on this machine, with the tiny test image of fakes/hosts/podman.py (its
store and configuration the test's own, as in tests/test_localhost_containers.py)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from launcher.runners.container import ContainerRunner, ContainerSpec
from launcher.runners.local import LocalProcessRunner
from tests.test_localhost_containers import IMAGE, Engine, engine

__all__ = ["engine"]  # the fixture, used below


def test_a_timed_out_command_is_killed_inside_the_container(engine: Engine, tmp_path: Path) -> None:
    name = f"bounded-{uuid.uuid4().hex[:8]}"
    made = engine.podman("run", "-d", "--name", name, "--net=host", IMAGE, "sleep", "infinity")
    assert made.returncode == 0, made.stderr
    try:
        (tmp_path / "home").mkdir()
        host = LocalProcessRunner(tmp_path / "home", engine.env, tmp_path / "node.log")
        spec = ContainerSpec(engine="podman", name=name, image=IMAGE, pull_before_run=False)
        runner = ContainerRunner(host, spec)
        result = runner.run("sleep 300 & echo $! > /tmp/pid; wait", timeout=1)
        assert result.timed_out
        alive = "p=$(cat /tmp/pid) && test -d /proc/$p && ! grep -q ') Z' /proc/$p/stat"
        deadline = time.monotonic() + 30
        while engine.podman("exec", name, "sh", "-c", alive).returncode == 0:
            assert time.monotonic() < deadline, "the command still runs in the container"
            time.sleep(0.2)
    finally:
        engine.podman("rm", "-f", "-t", "0", name)
