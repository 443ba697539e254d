"""The on-prem records of which machines a cluster uses (launcher/providers/onprem/claims.py):
as files on the head (`FileRecords`, the autoscaler's) and over SSH to a real sshd
(`RemoteRecords`, the laptop's). Claiming is exclusive, and a claim that fails for any other
reason than "in use" says why instead of passing for a busy machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.ssh import SSHHost, authorize, clean_home, ensure_user, make_key, user_home
from launcher.errors import ProviderError
from launcher.providers.onprem.claims import FileRecords, Records, RemoteRecords
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget

HEAD_IP = "127.0.10.2"
CLUSTER = "records-test"


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[RemoteRecords, Path]]:
    """Records kept over SSH on a real sshd, and the home they live in."""
    user = ensure_user()
    clean_home(user)
    key = make_key(tmp_path / "id_ed25519")
    authorized = authorize(user, Path(f"{key}.pub").read_text(), tmp_path)
    host = SSHHost(HEAD_IP, tmp_path / "head", user, authorized)
    host.start()
    runner = SSHRunner(
        SSHTarget(HEAD_IP, user, key_path=str(key)),
        KnownHosts(tmp_path / "known_hosts"),
        tmp_path / "head.log",
    )
    try:
        yield RemoteRecords(CLUSTER, runner, HEAD_IP), user_home(user)
    finally:
        runner.close()
        host.stop()
        clean_home(user)


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FileRecords, Path]:
    monkeypatch.setenv("HOME", str(tmp_path))
    return FileRecords(CLUSTER), tmp_path


def _record(ip: str, node_type: str = "worker") -> dict[str, object]:
    return {"ip": ip, "kind": "worker", "node_type": node_type, "tags": {"a": "b"}}


def _claims_are_exclusive(records: Records) -> None:
    assert records.all() == []
    assert records.claim(_record("10.0.0.3"))
    assert not records.claim(_record("10.0.0.3", "other"))  # in use: the first claim stands
    assert records.get("10.0.0.3") == _record("10.0.0.3")
    assert records.claim(_record("10.0.0.4"))
    records.write({**_record("10.0.0.4"), "tags": {"a": "c"}})
    assert sorted((r["ip"], r["tags"]["a"]) for r in records.all()) == [
        ("10.0.0.3", "b"),
        ("10.0.0.4", "c"),
    ]
    records.remove("10.0.0.3")
    assert records.get("10.0.0.3") is None
    assert records.claim(_record("10.0.0.3"))
    assert records.remove_all()
    assert records.all() == [] and not records.remove_all()


def _unwritable(records: Records, home: Path) -> None:
    """The records directory cannot be made: a file stands where it should be."""
    (home / ".launcher").mkdir(exist_ok=True)
    (home / ".launcher" / "onprem").write_text("not a directory")
    with pytest.raises(ProviderError) as raised:
        records.claim(_record("10.0.0.3"))
    message = str(raised.value)
    assert "could not record that the cluster uses 10.0.0.3" in message
    assert "in use" not in message


def test_file_records_claim_once(local: tuple[FileRecords, Path]) -> None:
    _claims_are_exclusive(local[0])


def test_remote_records_claim_once_over_ssh(remote: tuple[RemoteRecords, Path]) -> None:
    _claims_are_exclusive(remote[0])


def test_file_records_say_why_a_claim_failed(local: tuple[FileRecords, Path]) -> None:
    _unwritable(*local)


def test_remote_records_say_why_a_claim_failed(remote: tuple[RemoteRecords, Path]) -> None:
    records, home = remote
    _unwritable(records, home)
