"""Private keys the launcher makes and keeps on this machine for clouds that log in with a
key it manages (`$LAUNCHER_HOME/keys/NAME.pem`, mode 0600, written once, never overwritten),
and the public half of any private key file.

A key is made and saved here before any cloud hears of it, so an interrupted `up` never
leaves a cloud holding a public key whose private half is lost."""

from __future__ import annotations

import io
import os
from pathlib import Path

from launcher.errors import ProviderError
from launcher.files import write_whole
from launcher.paths import launcher_home, named_file

KEY_BITS = 3072


def key_path(key_name: str) -> Path:
    return named_file(launcher_home() / "keys", key_name, ".pem", derived=True)


def write_private(path: Path, material: str) -> None:
    """Write `path` (0600) whole or not at all: a partial file is never left under its name,
    and an existing key is never overwritten (FileExistsError)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(material if material.endswith("\n") else material + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.link(partial, path)  # fails if the key exists: it is never overwritten
    finally:
        partial.unlink(missing_ok=True)


def new_private_key() -> str:
    from launcher.runners.paramiko_lib import paramiko

    text = io.StringIO()
    paramiko.RSAKey.generate(KEY_BITS).write_private_key(text)
    return text.getvalue()


def ensure_key(path: Path) -> bool:
    """Make the private key at `path` unless it exists, and its public half beside it (see
    public_key). Returns whether it was made."""
    if path.exists():
        return False
    material = new_private_key()
    try:
        write_private(path, material)
    except FileExistsError:
        return False  # made meanwhile by another command
    write_whole(_public_file(path), _derive(material) + "\n", 0o644)
    return True


def _public_file(path: Path) -> Path:
    return path.with_suffix(".pub")


def public_key(path: Path) -> str:
    """`TYPE BASE64` of the private key at `path`: for a key the launcher made, as written
    beside it then (reading a private key costs ~0.1 s: RSA's checks), else derived from the
    key itself (never from a user's `.pub`, which may not be its pair)."""
    path = path.expanduser()
    ours = _public_file(path)
    if path.parent.resolve() == (launcher_home() / "keys").resolve() and ours.is_file():
        words = ours.read_text().split()
        if len(words) >= 2:
            return f"{words[0]} {words[1]}"
    return _derive(path.read_text(), path)


def _derive(text: str, path: Path | None = None) -> str:
    from launcher.runners.paramiko_lib import paramiko

    for kind in (paramiko.RSAKey, paramiko.Ed25519Key, paramiko.ECDSAKey):
        try:
            key = kind.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError):
            continue
        return f"{key.get_name()} {key.get_base64()}"
    raise ProviderError(f"{path or 'the key'} is not a private key the launcher can read")
