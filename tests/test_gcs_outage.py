"""The autoscaler outlives an outage of Ray's GCS on the head, and reads Ray's demand again
once the GCS is back (a real Ray head on the localhost provider).

Ray's GCS client blocks reads while its GCS is gone and ends its whole process after 60 s
without one; the autoscaler reads demand in a child process with a timeout (gcs.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.autoscaler.observe.gcs import (
    READ_TIMEOUT_ENV,
    READ_TIMEOUT_S,
    GcsDemandReader,
    read_timeout_s,
)
from launcher.paths import cluster_dir
from launcher.providers.localhost.processes import snapshot
from tests.cluster_helpers import cluster_config, key_of, kill_cluster, run, status, wait_for

NAME = "tgcs-outage"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "launcher-home"))
    # The head's reads of a hung GCS give up after 3 s, not 15: the same outage, sooner
    # (the localhost head inherits this environment).
    monkeypatch.setenv(READ_TIMEOUT_ENV, "3")
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config(NAME, min_workers=0))
    yield path
    run("down", "-y", str(path), timeout=120)
    kill_cluster(NAME)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_autoscaler_outlives_a_hung_then_a_dead_gcs(cluster: Path) -> None:
    assert run("up", "-y", str(cluster)).returncode == 0
    head = next(n for n in status(cluster)["nodes"] if n["kind"] == "head")
    files = cluster_dir(NAME) / "localhost" / "nodes" / head["id"] / "home" / ".launcher" / "head"
    daemon = int((files / "monitor.pid").read_text())
    log, state = files / "monitor.log", files / "autoscaler-state.json"
    ray = {
        Path(p.command.split(" ")[0]).name: p.pid
        for p in snapshot()
        if p.tagged(key_of(NAME), head["id"]) and p.command
    }

    def outages() -> int:
        return log.read_text().count("cannot read Ray's demand")

    def ticks_go_on() -> None:
        since = float(json.loads(state.read_text())["time"])
        wait_for(
            lambda: float(json.loads(state.read_text())["time"]) >= since + 3,
            60,
            "the autoscaler to go on ticking",
        )

    # A GCS that accepts connections but does not answer (stopped), then answers again.
    os.kill(ray["gcs_server"], signal.SIGSTOP)
    try:
        wait_for(lambda: outages() == 1, 90, "the outage in the autoscaler's log")
        ticks_go_on()
    finally:
        os.kill(ray["gcs_server"], signal.SIGCONT)
    wait_for(lambda: "answers again" in log.read_text(), 90, "demand to be read again")
    # A GCS that is gone (killed, with the head's raylet).
    for program in ("gcs_server", "raylet"):
        os.kill(ray[program], signal.SIGKILL)
    wait_for(lambda: outages() == 2, 60, "the second outage in the log")
    ticks_go_on()
    assert _alive(daemon) and int((files / "monitor.pid").read_text()) == daemon
    text = log.read_text()
    assert outages() == 2 and "not accepting connections" in text  # one line per outage


def test_a_gcs_that_accepts_but_never_answers_costs_one_bounded_read() -> None:
    """A GCS port that accepts connections but never answers (a hung GCS): the read gives up
    after its timeout, kills the reading process, and waits before trying again."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.9.8", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    said: list[str] = []
    refused = GcsDemandReader("127.0.9.8:1", said.append)  # nothing listens there
    assert refused.read() is None and refused.read() is None and refused.child is None
    assert len(said) == 1 and "connection refused" in said[0]
    said.clear()
    reader = GcsDemandReader(f"127.0.9.8:{server.getsockname()[1]}", said.append, 3.0)
    try:
        assert reader.read() is None
        assert reader.child is None  # the reading process was killed, not left blocked
        before = len(accepted)
        assert reader.read() is None  # waiting before trying again: nothing was tried
        assert reader.child is None and len(accepted) == before
        assert len(said) == 1 and "no answer within 3 s" in said[0]
    finally:
        reader.close()
        server.close()
        for conn in accepted:
            conn.close()


def test_the_read_timeout_is_the_heads_setting_when_it_is_a_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(READ_TIMEOUT_ENV, raising=False)
    assert read_timeout_s() == READ_TIMEOUT_S
    for given, expected in (
        ("3", 3.0),
        ("0.5", 0.5),
        ("0", READ_TIMEOUT_S),
        ("x", READ_TIMEOUT_S),
        ("nan", READ_TIMEOUT_S),
        ("-1", READ_TIMEOUT_S),
    ):
        monkeypatch.setenv(READ_TIMEOUT_ENV, given)
        assert read_timeout_s() == expected, given
