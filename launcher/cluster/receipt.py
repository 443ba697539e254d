"""What the last `up` of a cluster bootstrapped: a receipt in the cluster's directory, so a
no-op `up` need not bootstrap again (for EC2: the subnets, VPC, security group, key pair and
the head's role, nine calls and three API clients on every `up`).

The receipt names a key: the digest of the cluster's YAML as given and of the launcher that
read it. `up` writes it once it has brought the cluster up; the next `up` skips its provider's
bootstrap when the key is the same and the listing shows the head running with nothing to
update (its tags carry the hashes of its setup and Ray start). Anything else (a changed file,
another launcher, no head, a head to update, `up --no-config-cache`) bootstraps as before.
`down` removes the cluster's directory, and the receipt with it.
"""

from __future__ import annotations

import contextlib
import hashlib

from launcher.cluster.install import package_digest
from launcher.files import write_whole
from launcher.paths import cluster_dir

RECEIPT = "bootstrapped"


def bootstrap_key(config_text: str, cluster_name: str) -> str:
    """The key of a bootstrap of `config_text` (as named `cluster_name`) by this launcher."""
    hasher = hashlib.sha256()
    for part in (package_digest(), cluster_name, config_text):
        hasher.update(part.encode() + b"\0")
    return hasher.hexdigest()


def read_receipt(cluster_name: str) -> str | None:
    try:
        return (cluster_dir(cluster_name) / RECEIPT).read_text().strip() or None
    except OSError:
        return None


def write_receipt(cluster_name: str, key: str) -> None:
    path = cluster_dir(cluster_name) / RECEIPT
    with contextlib.suppress(OSError):  # without it the next up bootstraps: no harm
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, key + "\n", mode=0o600)
