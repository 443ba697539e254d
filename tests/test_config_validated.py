"""`up` skips the schema validation of a config that passed it before with this launcher
(launcher/config/validated.py), and imports no jsonschema then; anything else about the
config (another text, the command line's overrides, a missing file) is judged as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config import loader, validated
from launcher.config.loader import Overrides, parse_config
from launcher.errors import ConfigError

TEXT = """cluster_name: v
provider: {type: local, head_ip: 127.0.0.2, worker_ips: [127.0.0.3]}
auth: {ssh_user: me}
"""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    return tmp_path


def count_validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = loader._validate

    def counted(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(loader, "_validate", counted)
    return calls


def test_a_config_that_passed_is_not_validated_again_and_a_changed_one_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = count_validations(monkeypatch)
    first = parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True)
    assert calls == [1]
    again = parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True)
    assert calls == [1] and again == first
    # Any change to what is validated: validated again.
    parse_config(TEXT + "idle_timeout_minutes: 7\n", "c.yaml", cwd=tmp_path, validated_before=True)
    parse_config(TEXT, "c.yaml", Overrides(cluster_name="w"), tmp_path, validated_before=True)
    assert len(calls) == 3
    # Without validated_before (every command but up, and up --no-config-cache): always.
    parse_config(TEXT, "c.yaml", cwd=tmp_path)
    assert len(calls) == 4


def test_a_config_that_failed_is_refused_every_time(tmp_path: Path) -> None:
    bad = TEXT + "max_workers: -1\n"
    for _ in range(2):
        with pytest.raises(ConfigError, match="max_workers"):
            parse_config(bad, "c.yaml", cwd=tmp_path, validated_before=True)


def test_the_checks_of_local_files_run_every_time(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    text = TEXT + "file_mounts: {/remote: data}\n"
    parse_config(text, "c.yaml", cwd=tmp_path, validated_before=True)
    (tmp_path / "data").rmdir()
    with pytest.raises(ConfigError, match="file_mounts"):
        parse_config(text, "c.yaml", cwd=tmp_path, validated_before=True)


def test_another_launcher_validates_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = count_validations(monkeypatch)
    parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True)
    monkeypatch.setattr("launcher.cluster.install.package_digest", lambda: "another")
    parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True)
    assert len(calls) == 2


def test_only_the_last_configs_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validated, "KEEP", 3)
    for n in range(5):
        validated.remember(f"k{n}")
    assert [validated.passed_before(f"k{n}") for n in range(5)] == [False, False, True, True, True]


def test_jsonschema_is_imported_only_to_validate(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(TEXT)
    check = f"""
import sys
from launcher.config.loader import parse_config
text = open({str(config)!r}).read()
parse_config(text, "c.yaml", validated_before=True)
assert "jsonschema" in sys.modules  # the first time
"""
    skip = f"""
import sys
from launcher.config.loader import parse_config
text = open({str(config)!r}).read()
parse_config(text, "c.yaml", validated_before=True)
assert "jsonschema" not in sys.modules, "validated again"
"""
    for script in (check, skip):
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr


def test_a_pending_validation_is_kept_only_when_the_command_accepts_the_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `up` refuses some configs after loading them (a key not on this machine): what their
    # validation found is left pending, and nothing is written unless `up` keeps it.
    calls = count_validations(monkeypatch)
    refused = validated.Pending()
    parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True, pending=refused)
    assert refused.key is not None
    assert not (tmp_path / "home").exists()  # nothing written yet
    parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True, pending=validated.Pending())
    assert len(calls) == 2  # the refused one was not remembered: validated again
    accepted = validated.Pending()
    parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True, pending=accepted)
    accepted.keep()
    parse_config(TEXT, "c.yaml", cwd=tmp_path, validated_before=True)
    assert len(calls) == 3
