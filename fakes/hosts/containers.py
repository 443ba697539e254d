"""Test machines with a stand-in container engine: fakes/hosts/fake_docker.py, for `docker` and
`podman`, installed on an isolated host (fakes/hosts/ssh.py), and what it recorded there.
(fakes/hosts/podman.py gives hosts the real podman.)"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from fakes.hosts.ssh import IsolatedHost

FAKE_DOCKER = Path(__file__).resolve().parent / "fake_docker.py"


def equip(host: IsolatedHost, key: Path | None = None) -> None:
    """Make `host` a machine with a container engine (the stand-in) on its PATH, whose Ray
    finds its own address, and, given `key`, that key in its ~/.ssh."""
    bin_dir = host.home / "bin"
    bin_dir.mkdir()
    for name in ("docker", "podman"):
        (bin_dir / name).symlink_to(FAKE_DOCKER)
    # These machines share one network: Ray on each is told its address and given a
    # dashboard agent port of its own (on a machine of its own it finds both by itself).
    ray = shlex.quote(str(Path(sys.executable).parent / "ray"))
    port = 52000 + int(host.ip.rsplit(".", 1)[1])
    flags = f"--node-ip-address={host.ip} --dashboard-agent-listen-port={port}"
    (bin_dir / "ray").write_text(
        f'#!/bin/sh\nif [ "$1" = start ]; then shift; exec {ray} start {flags} "$@"; fi\n'
        f'exec {ray} "$@"\n'
    )
    (bin_dir / "ray").chmod(0o755)
    for rc in (".profile", ".bashrc"):
        with (host.home / rc).open("a") as out:
            out.write("PATH=/root/bin:$PATH; export PATH\n")
    if key is not None:
        ssh = host.home / ".ssh"
        ssh.mkdir(mode=0o700)
        (ssh / "id_ed25519").write_bytes(key.read_bytes())
        (ssh / "id_ed25519").chmod(0o600)


def calls(root: Path) -> list[list[str]]:
    """The argv of every call the stand-in engine with state in `root` recorded."""
    log = root / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["argv"] for line in lines]


def engine_calls(host: IsolatedHost) -> list[list[str]]:
    return calls(host.path("~/fake-docker"))


def containers_on(host: IsolatedHost) -> list[str]:
    return sorted(p.stem for p in host.path("~/fake-docker/containers").glob("*.json"))
