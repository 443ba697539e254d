"""Real podman on isolated test hosts (fakes/hosts/ssh.py), images from a real registry.

No registry on the internet is reachable, so tests build tiny images here and serve them
from Debian's `docker-registry` on a loopback address (`Registry`):

- An image is a rootfs tarball of a few directories, /etc/passwd and /etc/group, a marker
  file /etc/test-image holding what the test named it (so a test can tell which image a
  container came from), and a `ray` wrapper in /opt/launcher-test/bin. `podman import` turns
  it into an image (in a builder store of the test's own) and `podman push` sends it to the
  registry. The software is the "machine's": each host's containers.conf mounts this box's
  /usr and this interpreter's directories (its venv, its base installation) read-only at the
  same paths, and the image's PATH puts the venv's bin first, so `python3` and `ray` in a
  container are the test venv's. The hosts share one network, so the `ray` wrapper starts
  Ray with the node's own address and dashboard agent port (TEST_NODE_IP, which each host's
  containers.conf sets in its containers); everything else passes through.
- Each host (`equip_podman`) gets its own containers.conf, storage.conf and registries.conf,
  named to every SSH session by sshd's `SetEnv` (login shells or not): its own store under
  its directory (deleted with it), its own run and lock state on its own /dev/shm (gone when
  it powers off, as /run on a machine), the registry's address as the one search registry
  (insecure: plain HTTP), so `rayproject/ray-ml:latest-gpu` pulls from it. Three hosts are
  three machines: each pulls for itself, and sees only its own containers.

`Machine.podman` runs podman in a host's namespaces with its configuration (from this box:
inspecting, loading an image as if built there); `Machine.container_processes` lists this
box's PIDs of the processes in a host's containers.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from fakes.hosts.ssh import IsolatedHost, isolation_unavailable

PODMAN = shutil.which("podman") or "/usr/bin/podman"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
VENV_BIN = str(Path(sys.executable).parent)
TEST_BIN = "/opt/launcher-test/bin"
IMAGE_PATH = f"{TEST_BIN}:{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Containers get at most the limits this process has: raising a hard limit needs
# CAP_SYS_RESOURCE, which the test machines' root lacks (podman's own defaults, 1048576
# processes and open files, are refused there).
NOFILE_MAX = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
NPROC_MAX = resource.getrlimit(resource.RLIMIT_NPROC)[1]
DEFAULT_ULIMITS = (f"nofile={min(1024, NOFILE_MAX)}:{NOFILE_MAX}", f"nproc={NPROC_MAX}:{NPROC_MAX}")


@functools.cache
def podman_unavailable() -> str | None:
    """Why real podman cannot run here (absent, or no isolated hosts), or None."""
    for tool, package in ((PODMAN, "podman"), (RUNC, "runc")):
        if not Path(tool).exists():
            return f"real-engine tests need {package} (apt-get install podman runc)"
    return isolation_unavailable()


def real_engine_unavailable() -> str | None:
    """Why the tests with real podman and a registry cannot run here, or None."""
    if not Path(REGISTRY).exists():
        return "real-engine tests need docker-registry (apt-get install docker-registry)"
    return podman_unavailable()


def skip_without_podman() -> None:
    reason = real_engine_unavailable()
    if reason is not None:
        pytest.skip(reason)


def python_dirs() -> list[str]:
    """This interpreter's directories outside /usr (the venv, its base installation),
    resolved, without those nested in another."""
    found: list[str] = []
    for path in sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}):
        if path == "/usr" or path.startswith("/usr/"):
            continue
        if not any(path.startswith(parent + "/") for parent in found):
            found.append(path)
    return found


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def write_engine_config(
    directory: Path, *, graphroot: str, runroot: str, registry: str, env: dict[str, str]
) -> dict[str, str]:
    """containers.conf, storage.conf and registries.conf in `directory`; returns the
    environment that points podman at them."""
    directory.mkdir(parents=True, exist_ok=True)
    volumes = ["/usr:/usr:ro", *(f"{p}:{p}:ro" for p in python_dirs())]
    (directory / "containers.conf").write_text(
        "[containers]\n"
        f"default_ulimits = {_toml_list(list(DEFAULT_ULIMITS))}\n"
        f"volumes = {_toml_list(volumes)}\n"
        f"env = {_toml_list([f'{k}={v}' for k, v in env.items()])}\n"
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{runroot}/libpod"\n'
    )
    (directory / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{graphroot}"\nrunroot = "{runroot}"\n'
    )
    (directory / "registries.conf").write_text(
        f'unqualified-search-registries = ["{registry}"]\n'
        'short-name-mode = "disabled"\n'
        f'[[registry]]\nlocation = "{registry}"\ninsecure = true\n'
    )
    return {
        "CONTAINERS_CONF": str(directory / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(directory / "registries.conf"),
    }


# -- images and the registry ----------------------------------------------------------------
def image_tar(path: Path, marker: str) -> Path:
    """A rootfs tarball whose /etc/test-image says `marker`."""
    ray = str(Path(VENV_BIN) / "ray")
    wrapper = (
        "#!/bin/sh\n"
        "# Hosts share one network: each Ray node names its address and agent port.\n"
        'if [ "$1" = start ] && [ -n "$TEST_NODE_IP" ]; then\n'
        f"  shift; exec {shlex.quote(ray)} start --node-ip-address=$TEST_NODE_IP "
        '--dashboard-agent-listen-port=$((52000 + ${TEST_NODE_IP##*.})) "$@"\n'
        "fi\n"
        f'exec {shlex.quote(ray)} "$@"\n'
    )
    files = {
        "etc/passwd": Path("/etc/passwd").read_bytes(),
        "etc/group": Path("/etc/group").read_bytes(),
        "etc/test-image": f"{marker}\n".encode(),
        f"{TEST_BIN[1:]}/ray": wrapper.encode(),
    }
    dirs = ["etc", "root", "tmp", "var/tmp", "proc", "sys", "dev", "run", "usr", "opt", TEST_BIN]
    with tarfile.open(path, "w") as tar:
        for name in dirs:
            info = tarfile.TarInfo(name.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if "tmp" in name else 0o755
            tar.addfile(info)
        for link in ("bin", "lib", "lib64", "sbin"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith("/ray") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def import_args(name: str) -> list[str]:
    """`podman import` of a tarball read from stdin as image `name`."""
    return [
        "import",
        "--change",
        f"ENV=PATH={IMAGE_PATH}",
        "--change",
        "ENV=HOME=/root",
        "-",
        name,
    ]


class Registry:
    """Debian's docker-registry on `address` (plain HTTP), storage and access log in
    `root`. `push(marker, name)` builds an image whose marker is `marker` and stores it
    as `name`; `manifest_gets(name)` counts the pulls of `name` the registry served."""

    def __init__(self, root: Path, address: str) -> None:
        self.root, self.address = root, address
        root.mkdir(parents=True, exist_ok=True)
        self.log = root / "registry.log"
        config = root / "registry.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn, accesslog: {disabled: false}}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
            f"http: {{addr: {address}}}\n"
        )
        self.builder_env = {
            **os.environ,
            **write_engine_config(
                root / "builder",
                graphroot=str(root / "builder/storage"),
                runroot=str(root / "builder/run"),
                registry=address,
                env={},
            ),
        }
        ip, port = address.rsplit(":", 1)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [REGISTRY, "serve", str(config)], stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + 30
        while not _listening(ip, int(port)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"docker-registry did not start: {self.log.read_text()}")
            time.sleep(0.05)

    def push(self, marker: str, name: str) -> None:
        tar = image_tar(self.root / "image.tar", marker)
        local = f"localhost/{name}"
        with tar.open("rb") as data:
            _check([PODMAN, *import_args(local)], self.builder_env, stdin=data)
        push = [PODMAN, "push", "--tls-verify=false", local, f"{self.address}/{name}"]
        _check(push, self.builder_env)

    def manifest_gets(self, name: str) -> int:
        """How many times the registry served `name`'s manifest (a pull), counted after a
        request of this test's own is logged: every request before it is logged by then."""
        sentinel = f"/v2/launcher-test-sentinel-{time.monotonic_ns()}/tags/list"
        with contextlib.suppress(OSError):
            socket_get(self.address, sentinel)
        deadline = time.monotonic() + 30
        while sentinel not in (text := self.log.read_text(errors="replace")):
            if time.monotonic() > deadline:
                raise AssertionError(f"the registry never logged {sentinel}")
            time.sleep(0.02)
        return len(re.findall(rf'"GET /v2/{re.escape(name)}/manifests/[^ ]+ HTTP', text))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def socket_get(address: str, path: str) -> None:
    ip, port = address.rsplit(":", 1)
    with socket.create_connection((ip, int(port)), 5) as conn:
        conn.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n".encode()
        )
        while conn.recv(4096):
            pass


@contextlib.contextmanager
def registry(root: Path, address: str) -> Iterator[Registry]:
    made = Registry(root, address)
    try:
        yield made
    finally:
        made.close()


def _listening(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), 0.5):
            return True
    except OSError:
        return False


def _check(argv: list[str], env: dict[str, str], stdin: IO[bytes] | None = None) -> str:
    result = subprocess.run(
        argv, check=False, env=env, stdin=stdin, capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout


# -- hosts ----------------------------------------------------------------------------------
@dataclass
class Machine:
    """An isolated host with podman of its own; `env` names its engine configuration."""

    host: IsolatedHost
    env: dict[str, str]

    @property
    def ip(self) -> str:
        return self.host.ip

    def podman(
        self, *args: str, stdin: IO[bytes] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`podman ARGS` in the host's namespaces with its configuration."""
        init = self.host.processes()[0]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **self.env}
        argv = [NSENTER, "--target", str(init), "--mount", "--pid", "--", PODMAN, *args]
        result = subprocess.run(
            argv,
            check=False,
            env=env,
            cwd="/",
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"podman {shlex.join(args)} on {self.ip}: {result.stderr}")
        return result

    def inspect(self, name: str, template: str) -> str:
        return self.podman("container", "inspect", "--format", template, name).stdout.strip()

    def containers(self) -> list[str]:
        """The names of all the host's containers, running or not."""
        listed = self.podman("ps", "--all", "--format", "{{.Names}}").stdout
        return sorted(listed.split())

    def load_image(self, marker: str, name: str, workdir: Path) -> None:
        """Put an image named `name` whose marker is `marker` in the host's own store (as
        if built there), without any registry."""
        tar = image_tar(workdir / f"{self.ip}-local.tar", marker)
        with tar.open("rb") as data:
            self.podman(*import_args(name), stdin=data)

    def release(self) -> None:
        """Remove every container of the running host, so nothing of them (their cgroups)
        is left when it powers off."""
        if self.host.running:
            self.podman("rm", "--all", "--force", "--time", "0", check=False)

    def container_processes(self) -> dict[int, str]:
        """This box's PID and command name of each process in the host's containers:
        those descending from the host's PID 1 in a PID namespace other than the host's."""
        pids = self.host.processes()
        if not pids:
            return {}
        own = os.readlink(f"/proc/{pids[0]}/ns/pid")
        found = {}
        for pid in _descendants(pids[0]):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/pid") != own:
                    found[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        return found


def equip_podman(host: IsolatedHost, registry_address: str, key: Path | None = None) -> Machine:
    """Make the (not yet started) `host` a machine with podman of its own, and, given
    `key`, that key in its ~/.ssh."""
    if host.running:
        raise RuntimeError("equip_podman needs a host that has not started yet")
    env = write_engine_config(
        host.root / "podman",
        graphroot=str(host.root / "podman" / "storage"),
        runroot="/dev/shm/podman",  # the host's own tmpfs
        registry=registry_address,
        env={"TEST_NODE_IP": host.ip},
    )
    host.sshd_options.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
    if key is not None:
        ssh = host.home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "id_ed25519").write_bytes(key.read_bytes())
        (ssh / "id_ed25519").chmod(0o600)
    return Machine(host, env)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        children = parents.get(queue.pop(), [])
        found += children
        queue += children
    return found
