"""launcher/providers/keyfiles.py: a key the launcher makes has its public half written
beside it (read instead of deriving it again from the private key); any other key's public
half is derived from the key itself, never read from a `.pub` that may not be its pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.providers.keyfiles import (
    _derive,
    ensure_key,
    key_path,
    new_private_key,
    public_key,
    write_private,
)


def test_a_made_key_has_its_public_half_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    path = key_path("launcher-azure-c")
    assert ensure_key(path) and not ensure_key(path)
    written = path.with_suffix(".pub")
    derived = _derive(path.read_text())
    assert written.read_text().strip() == derived
    assert public_key(path) == derived
    written.write_text("ssh-rsa AAAAread-from-the-file\n")
    assert public_key(path) == "ssh-rsa AAAAread-from-the-file"  # the file is what is read


def test_a_users_key_is_derived_never_read_from_its_pub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    path = tmp_path / "id_rsa"
    write_private(path, new_private_key())
    path.with_suffix(".pub").write_text("ssh-rsa AAAAnot-its-pair\n")
    assert public_key(path) == _derive(path.read_text())
