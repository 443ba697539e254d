from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli.main import cli

REPO = Path(__file__).resolve().parent.parent
RAY_EXAMPLES = REPO.parent / "shared" / "ray-example-configs"

# Tests interrupt launcher processes with SIGINT (Ctrl-C). Run in the background of a shell
# without job control (`pytest &` in a script), this process would start with SIGINT
# ignored, which every child inherits: Ctrl-C would do nothing to them. A handler instead of
# "ignore" is reset to the default in each child, so they get Ctrl-C as at a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None


def run_cli(*args: str) -> CliResult:
    """Run the launcher CLI in-process, as a user would, and capture both streams."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    exception = result.exception
    if isinstance(exception, SystemExit):
        exception = None
    return CliResult(result.exit_code, result.stdout, result.stderr, exception)


@pytest.fixture
def cli_runner() -> Callable[..., CliResult]:
    return run_cli


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str, name: str = "cluster.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def ray_examples() -> Path:
    if not RAY_EXAMPLES.is_dir():
        pytest.fail(
            f"Ray's example configs are expected at {RAY_EXAMPLES} (shared/ beside the repo)"
        )
    return RAY_EXAMPLES


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert os.path.expanduser("~") == str(home)
    return home


# Run in parallel (`pytest -n 2 --dist loadgroup`, as scripts/test does), each test module
# stays on one worker (its module-scoped clusters are made once), and every module that
# runs test hosts (sshd hosts, moto or fake GCE instances served by them, the fake
# Kubernetes' pods, podman hosts) shares one worker: their Ray heads use Ray's default ports
# on this machine's network, which two at once would share. Modules on the localhost
# provider claim their own addresses and ports, so they run beside them.
_HOST_MODULES = (
    "ssh_hosts",
    "aws_hosts",
    "aws_clusters",
    "gce_hosts",
    "gcp_clusters",
    "kube_fake",
    "podman_hosts",
    "container_hosts",
    "harnesses",  # the provider contract's: moto, the fake GCE and API server, sshd hosts
)


def pytest_configure(config: pytest.Config) -> None:
    # Known without pytest-xdist too (`-p no:xdist`), where the groups mean nothing.
    config.addinivalue_line("markers", "xdist_group(name): run with the group's other tests")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[Path, str] = {}
    for item in items:
        path = Path(str(item.fspath))
        if path not in groups:
            try:
                source = path.read_text()
            except OSError:
                source = ""
            uses_hosts = any(name in source for name in _HOST_MODULES)
            groups[path] = "test-hosts" if uses_hosts else str(path.relative_to(REPO))
        item.add_marker(pytest.mark.xdist_group(groups[path]))
