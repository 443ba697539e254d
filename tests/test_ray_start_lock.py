"""The localhost provider's `ray start` lock: held by a worker's start only until that node
has named and made its own sockets (Ray names them by counting the files there), so workers
joining one head start side by side, and never let go earlier."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from launcher.errors import ProviderError
from launcher.providers.localhost.machine import held_until_sockets, machine_lock


def _free(name: str) -> bool:
    """Whether another holder could take the machine lock `name` now."""
    try:
        with machine_lock(name, wait_s=0):
            return True
    except ProviderError:
        return False


def _until(condition: object, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


@pytest.fixture(autouse=True)
def _machine_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_MACHINE_DIR", str(tmp_path / "machine"))


def test_the_lock_goes_once_the_nodes_own_sockets_are_there(tmp_path: Path) -> None:
    sockets = tmp_path / "session_latest" / "sockets"
    sockets.mkdir(parents=True)
    (sockets / "raylet").touch()  # the head's
    (sockets / "plasma_store").touch()
    entered, leave = threading.Event(), threading.Event()

    def start() -> None:
        with held_until_sockets(machine_lock("start.lock"), sockets, poll_s=0.01):
            entered.set()
            leave.wait(60)

    thread = threading.Thread(target=start)
    thread.start()
    try:
        assert entered.wait(30)
        assert not _free("start.lock")
        (sockets / "raylet.1").touch()  # one of its two sockets: still held
        time.sleep(0.1)
        assert not _free("start.lock")
        (sockets / "plasma_store.1").touch()
        assert _until(lambda: _free("start.lock"))  # let go while the start goes on
        assert thread.is_alive()
    finally:
        leave.set()
        thread.join()
    assert _free("start.lock")


def test_without_its_sockets_the_lock_is_held_until_the_start_ends(tmp_path: Path) -> None:
    sockets = tmp_path / "missing"  # no session yet, or a start that failed early
    with held_until_sockets(machine_lock("start.lock"), sockets, poll_s=0.01):
        time.sleep(0.1)
        assert not _free("start.lock")
    assert _free("start.lock")
