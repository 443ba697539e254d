"""The SSH runner's key, read once per file and content (launcher/runners/ssh_keys.py): an
RSA key as paramiko reads it, without cryptography's ~0.1 s check of its arithmetic; other
kinds, and keys that need a passphrase, left to paramiko."""

from __future__ import annotations

import os
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from launcher.runners.ssh_keys import rsa_key


def _write(
    path: Path, key: object, form: serialization.PrivateFormat, password: bytes = b""
) -> Path:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, form, encryption)  # type: ignore[attr-defined]
    )
    return path


def test_an_rsa_key_loads_as_paramiko_loads_it_once_per_content(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forms = {
        "pem": serialization.PrivateFormat.TraditionalOpenSSL,
        "openssh": serialization.PrivateFormat.OpenSSH,
    }
    for name, form in forms.items():
        path = _write(tmp_path / name, key, form)
        loaded = rsa_key(str(path))
        assert isinstance(loaded, paramiko.RSAKey)
        assert loaded == paramiko.RSAKey.from_private_key_file(str(path))
        assert rsa_key(str(path)) is loaded  # read once
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(path, other, serialization.PrivateFormat.OpenSSH)
    os.utime(path, ns=(1, 1))  # another content: read again
    again = rsa_key(str(path))
    assert again is not None and again != loaded
    assert again == paramiko.RSAKey.from_private_key_file(str(path))


def test_other_keys_are_left_to_paramiko(tmp_path: Path) -> None:
    edwards = _write(
        tmp_path / "ed", ed25519.Ed25519PrivateKey.generate(), serialization.PrivateFormat.OpenSSH
    )
    assert rsa_key(str(edwards)) is None
    locked = _write(
        tmp_path / "locked",
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        serialization.PrivateFormat.TraditionalOpenSSL,
        b"secret",
    )
    assert rsa_key(str(locked)) is None  # paramiko asks for its passphrase as before
    assert rsa_key(str(tmp_path / "missing")) is None
    (tmp_path / "junk").write_text("not a key")
    assert rsa_key(str(tmp_path / "junk")) is None
