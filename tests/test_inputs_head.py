"""The autoscaler's spec on the head holds the whole config, credentials included (issue 25):
it is written 0600 in a 0700 directory, through the session's own runner commands. Driven
through the localhost runner against a directory of the test's own: no cluster is started."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.autoscaler.spec import HEAD_DIR, SPEC_FILE, AutoscalerSpec
from launcher.cluster.head import HeadSession, ensure_daemon
from launcher.config.loader import Overrides, parse_config
from launcher.errors import LauncherError
from launcher.providers.base import Node, NodeKind, NodeState
from launcher.runners.local import LocalProcessRunner

SECRET_CONFIG = (
    "cluster_name: secret\nprovider: {type: localhost}\n"
    "setup_commands: ['export AWS_SECRET_ACCESS_KEY=do-not-share']\n"
)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask, under which files are made readable by everyone unless asked not."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _on_head(home: Path, path: str) -> Path:
    return home / path.removeprefix("~/")


@pytest.mark.parametrize("left_open", [False, True], ids=["new head", "left open before"])
def test_the_spec_is_private_on_the_head(tmp_path: Path, open_umask: None, left_open: bool) -> None:
    home = tmp_path / "head-home"
    home.mkdir()
    if left_open:  # as an earlier version left them: an open directory and an open spec
        (_on_head(home, HEAD_DIR)).mkdir(parents=True, mode=0o755)
        _on_head(home, SPEC_FILE).write_text("{}")
        _on_head(home, SPEC_FILE).chmod(0o644)
    runner = LocalProcessRunner(home, {}, tmp_path / "head.log")
    config = parse_config(SECRET_CONFIG, "secret.yaml")
    head = Node("head-1", NodeKind.HEAD, "head", "127.0.0.2", NodeState.RUNNING)
    session = HeadSession(config, None, head, runner, {}, runner)  # type: ignore[arg-type]
    spec = AutoscalerSpec(SECRET_CONFIG, "secret.yaml", Overrides())
    # `false` as the daemon's Python: it exits at once, so the start fails after the file
    # step, and nothing keeps running.
    with pytest.raises(LauncherError, match="could not start the autoscaler"):
        ensure_daemon(session, spec, "false")
    written = _on_head(home, SPEC_FILE)
    assert json.loads(written.read_text())["config_text"] == SECRET_CONFIG
    assert _mode(written) == 0o600
    assert _mode(_on_head(home, HEAD_DIR)) == 0o700
    assert _mode(_on_head(home, "~/.launcher")) == 0o700
