from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
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

# Prices from the shipped tables only: live prices would call the clouds' public price APIs
# (tests/test_live_prices*.py point them at loopback fakes and set "live" themselves).
os.environ.setdefault("LAUNCHER_PRICES", "static")

# Every autoscaler the suite runs (in this process, and on the localhost heads it starts,
# which inherit this environment) decides every tick and compares with the choice the gate
# (launcher/autoscaler/decide/gate.py) would have kept; a difference is appended here, and
# fails the session (pytest_sessionfinish).
AUDIT_FILE = Path(tempfile.mkdtemp(prefix="launcher-audit-")) / "mismatches.jsonl"
os.environ.setdefault("LAUNCHER_DECISION_AUDIT", str(AUDIT_FILE))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    try:
        found = AUDIT_FILE.read_text().strip()
    except OSError:
        found = ""
    shutil.rmtree(AUDIT_FILE.parent, ignore_errors=True)
    if found:
        print(f"\nan autoscaler kept a choice that deciding again did not give:\n{found}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


EXAMPLES_MISSING = (
    f"needs Ray's example configs at {RAY_EXAMPLES} (the shared/ directory beside the repo, "
    "with ray-example-configs/ from Ray's repository), which this machine lacks"
)


def _uses_ray_examples(item: pytest.Item) -> bool:
    """Whether the test may read Ray's example configs: it takes the fixture, or its module
    names them (a module's helpers and fixtures read them in ways a test does not show, so
    the whole module goes)."""
    if "ray_examples" in getattr(item, "fixturenames", ()):
        return True
    module = getattr(item, "module", None)
    try:
        text = Path(getattr(module, "__file__", "") or "").read_text()
    except OSError:
        return False
    return "RAY_EXAMPLES" in text or "ray-example-configs" in text


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without Ray's example configs, the tests that read them are skipped, each saying
    what is missing, instead of failing."""
    if RAY_EXAMPLES.is_dir():
        return
    skip = pytest.mark.skip(reason=EXAMPLES_MISSING)
    for item in items:
        if _uses_ray_examples(item):
            item.add_marker(skip)


@pytest.fixture
def ray_examples() -> Path:
    if not RAY_EXAMPLES.is_dir():
        pytest.skip(EXAMPLES_MISSING)
    return RAY_EXAMPLES


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert os.path.expanduser("~") == str(home)
    return home


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every test host and pod reaches at the same path: under /var/tmp, since
    /root, /tmp and /dev/shm are each host's own (a run's storage, for instance)."""
    path = Path(tempfile.mkdtemp(prefix="launcher-shared-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
