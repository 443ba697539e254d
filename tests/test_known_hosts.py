"""The cluster's known_hosts file: keys pinned per machine, in OpenSSH's format."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import paramiko
import pytest

from launcher.runners.known_hosts import KnownHosts, parse_line


def _make(path: Path) -> Path:
    path.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path


@pytest.fixture
def keys(tmp_path: Path) -> list[paramiko.PKey]:
    made = []
    for n in range(3):
        path = _make(tmp_path / f"key{n}")
        made.append(paramiko.Ed25519Key.from_private_key_file(str(path)))
    return made


def test_a_key_is_pinned_as_its_machines_and_readable_by_openssh(
    tmp_path: Path, keys: list[paramiko.PKey]
) -> None:
    known = KnownHosts(tmp_path / "known_hosts")
    known.record("10.0.0.5", keys[0], "i-aaa")
    text = known.path.read_text()
    assert text == f"10.0.0.5 ssh-ed25519 {keys[0].get_base64()} launcher-node=i-aaa\n"
    assert stat.S_IMODE(known.path.stat().st_mode) == 0o600
    # OpenSSH takes the mark for a comment: it finds the key for the address.
    found = subprocess.run(
        ["ssh-keygen", "-F", "10.0.0.5", "-f", str(known.path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0 and keys[0].get_base64() in found.stdout
    entry = parse_line(text)
    assert entry is not None and entry.node == "i-aaa" and entry.names == ("10.0.0.5",)
    assert [k.get_base64() for k in known.keys_for("10.0.0.5", "i-aaa")] == [keys[0].get_base64()]
    known.record("10.0.0.5", keys[1], "i-aaa")  # already pinned for that machine: kept
    assert known.path.read_text() == text


def test_a_new_machine_at_a_reused_address_drops_the_gone_ones_key(
    tmp_path: Path, keys: list[paramiko.PKey]
) -> None:
    known = KnownHosts(tmp_path / "known_hosts")
    known.record("10.0.0.5", keys[0], "i-aaa")
    known.record("10.0.0.6", keys[1], "i-bbb")
    assert known.keys_for("10.0.0.5", "i-ccc") == []  # nothing to check i-ccc against
    assert "i-aaa" not in known.path.read_text()  # i-aaa's address is i-ccc's now
    assert "i-bbb" in known.path.read_text()  # other addresses untouched
    known.record("10.0.0.5", keys[2], "i-ccc")
    assert [k.get_base64() for k in known.keys_for("10.0.0.5", "i-ccc")] == [keys[2].get_base64()]


def test_keys_without_a_machine_stay_strict(tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    known = KnownHosts(tmp_path / "known_hosts")
    known.record("10.0.0.7", keys[0])  # an on-prem machine known by its address only
    assert [k.get_base64() for k in known.keys_for("10.0.0.7", "i-any")] == [keys[0].get_base64()]
    assert [k.get_base64() for k in known.keys_for("10.0.0.7")] == [keys[0].get_base64()]
    known.record("10.0.0.7", keys[1], "i-any")  # the recorded key decides, not a new one
    assert known.path.read_text().count("10.0.0.7") == 1


def test_forgetting_a_machine_or_an_address(tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("# a comment\n\n@cert-authority * ssh-ed25519 AAAA\n")
    known = KnownHosts(path)
    known.record("10.0.0.5", keys[0], "i-aaa")
    known.record("[10.0.0.6]:2222", keys[1], "i-bbb")
    known.record("10.0.0.7", keys[2])
    known.forget_nodes({"i-bbb"})
    assert "i-bbb" not in path.read_text() and "i-aaa" in path.read_text()
    known.forget("10.0.0.7")
    lines = path.read_text().splitlines()
    assert lines[:3] == ["# a comment", "", "@cert-authority * ssh-ed25519 AAAA"]
    assert [line.split()[0] for line in lines[3:]] == ["10.0.0.5"]
    assert KnownHosts.entry_name("10.0.0.6", 2222) == "[10.0.0.6]:2222"
