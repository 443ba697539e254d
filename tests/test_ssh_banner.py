"""A host that accepts TCP connections but does not speak SSH: one bounded wait, one line
naming the host and what it did, no paramiko traceback (issue 25, part 3)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import LauncherError
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget

HOST = "127.0.9.1"


class SilentServer:
    """Accepts connections on a loopback port and holds them; sends `greeting` first (b"":
    nothing at all)."""

    def __init__(self, greeting: bytes = b"") -> None:
        self.greeting = greeting
        self.listener = socket.create_server((HOST, 0))
        self.port: int = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.greeting:
                conn.sendall(self.greeting)
            self.held.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def _runner(port: int, tmp_path: Path) -> SSHRunner:
    # A key file to sign in with (never reached: these hosts stall before that).
    key = tmp_path / "key"
    key.write_text("never read\n")
    target = SSHTarget(HOST, "nobody", port=port, key_path=str(key))
    known = KnownHosts(tmp_path / "known_hosts")
    return SSHRunner(target, known, tmp_path / "node.log", connect_timeout_s=1.0)


def test_a_host_that_sends_no_banner_is_named_once_not_retried(
    silent: SilentServer, tmp_path: Path
) -> None:
    runner = _runner(silent.port, tmp_path)
    expected = f"{HOST}:{silent.port} accepted the connection but sent no SSH banner within 1 s"
    assert expected in (runner.check_ready() or "")
    started = time.monotonic()
    with pytest.raises(LauncherError, match="sent no SSH banner within 1 s") as caught:
        runner.run("true")
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(OSError, match="sent no SSH banner"):
        runner.capture("true")  # what the on-prem provider reads its records with
    # One wait each, not three connection attempts with backoff between them (was >9 s).
    assert time.monotonic() - started < 8
    assert silent.accepted == 3  # check_ready, run, capture: one connection each


def test_a_host_that_stalls_after_its_banner_is_named(tmp_path: Path) -> None:
    server = SilentServer(b"SSH-2.0-OpenSSH_9.2\r\n")
    try:
        runner = _runner(server.port, tmp_path)
        with pytest.raises(LauncherError, match="did not finish the SSH handshake within 1 s"):
            runner.run("true")
        assert server.accepted == 1
    finally:
        server.close()


SCRIPT = """
import sys
from pathlib import Path
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget
key = Path(sys.argv[1]) / "key"
key.write_text("never read")  # (these hosts stall before it would be)
for port in sys.argv[2:]:
    target = SSHTarget("{host}", "nobody", port=int(port), key_path=str(key))
    runner = SSHRunner(target, KnownHosts(Path(sys.argv[1]) / "kh"), Path(sys.argv[1]) / "log",
                       connect_timeout_s=1.0)
    try:
        runner.run("true")
    except Exception as exc:
        print(type(exc).__name__, exc)
"""


def test_no_paramiko_traceback_reaches_stderr(silent: SilentServer, tmp_path: Path) -> None:
    """In a process of its own (pytest captures logging): paramiko's transport thread logs a
    failed handshake with its traceback, which Python prints on stderr when nothing else
    handles it."""
    stalls = SilentServer(b"SSH-2.0-OpenSSH_9.2\r\n")
    try:
        result = subprocess.run(
            [
                *(sys.executable, "-c", SCRIPT.format(host=HOST), str(tmp_path)),
                *(str(silent.port), str(stalls.port)),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        stalls.close()
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and "no SSH banner" in lines[0] and "handshake" in lines[1], lines
