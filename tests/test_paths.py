"""The launcher's own files named after a cluster are the cluster's own, also on a file
system that ignores case (macOS), and the same whatever the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.ledger.store import record_path
from launcher.paths import cluster_dir, launcher_home
from launcher.providers.keyfiles import key_path

NAMES = ("ML-prod", "ml-prod", "Ml-Prod", "ml-prod-00696b36")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_names_differing_in_case_never_share_a_file() -> None:
    for made in (cluster_dir, record_path, lambda name: key_path(f"launcher-{name}-us-west-2")):
        paths = [made(name) for name in NAMES]
        folded = {str(p).lower() for p in paths}
        assert len(folded) == len(NAMES), paths
    assert cluster_dir("demo").name == "demo"  # a plain name stays as it is


def test_a_directory_an_earlier_version_made_is_still_used(home: Path) -> None:
    (home / "clusters" / "ML-prod").mkdir(parents=True)
    assert cluster_dir("ML-prod") == home / "clusters" / "ML-prod"
    assert cluster_dir("Ml-Prod") != home / "clusters" / "ML-prod"


def test_a_relative_home_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What is derived from the home (a cluster's process key, its Ray temp dir) names the
    directory the files are in, not a text that depends on where the launcher started."""
    monkeypatch.setenv("LAUNCHER_HOME", "rel-home")
    monkeypatch.chdir(tmp_path)
    assert launcher_home() == tmp_path / "rel-home"
    assert cluster_dir("demo").is_absolute()
