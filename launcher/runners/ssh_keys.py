"""The private key an SSH runner signs in with, read once per process.

paramiko reads a key file on every connection, and for an RSA key cryptography then checks
the key's arithmetic (its primes and exponents), which costs about 0.1 s of CPU: a no-op
`up` spent a seventh of its time there, and an `up` that sets up nodes paid it for every
connection. The key files here are the user's own (`auth.ssh_private_key`, or the one the
launcher made), read as they are: an RSA key is loaded once per file and content, without
that check (cryptography's `unsafe_skip_rsa_key_validation`, meant for keys from a trusted
source); a key of any other kind, or one that does not load so (a passphrase), is left to
paramiko as before.
"""

from __future__ import annotations

import functools
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from launcher.runners.paramiko_lib import paramiko


def rsa_key(path: str) -> paramiko.PKey | None:
    """The RSA key in `path`, loaded once per content; None when it is another kind of key
    or cannot be read without help (paramiko's own loading then applies)."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return _load(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> paramiko.PKey | None:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    load = (
        serialization.load_ssh_private_key
        if b"BEGIN OPENSSH PRIVATE KEY" in data
        else serialization.load_pem_private_key
    )
    try:
        key: object = load(data, None, unsafe_skip_rsa_key_validation=True)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None
    if not isinstance(key, rsa.RSAPrivateKey):
        return None
    return paramiko.RSAKey(key=key)
