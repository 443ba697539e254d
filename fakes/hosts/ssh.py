"""Real sshd test hosts, each on its own loopback address.

`SSHHost` (127.0.5.x, port 22): a plain sshd on this machine. As root, hosts log in a
dedicated user (`launcher-test`) whose home and shell rc files are empty, so a session
starts cheaply; otherwise the current user. Keys, host keys and configs live in the test's
temp directory; every process started here is stopped.

`IsolatedHost` (root only): a "machine" for on-prem cluster tests. Its sshd runs as PID 1
of its own PID and mount namespaces, with its own /root, /tmp and /dev/shm, so sessions see
only that host's processes and files, and stopping the host kills everything started
through it. `isolated_hosts()` makes a few of them for a test.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import ipaddress
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

TEST_USER = "launcher-test"
# sshd settings every test host shares: key logins only, a cheap session, many at once.
SSHD_COMMON = (
    "PasswordAuthentication no",
    "KbdInteractiveAuthentication no",
    "UsePAM no",
    "StrictModes no",
    "PermitRootLogin prohibit-password",
    "Subsystem sftp internal-sftp",
    "MaxSessions 64",
    "MaxStartups 64",
    "LogLevel ERROR",
    "",
)
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def ensure_user() -> str:
    """The user test hosts log in as."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.getuid()).pw_name
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        home = Path("/var/tmp") / TEST_USER
        subprocess.run(
            [
                "useradd",
                "--create-home",
                "--home-dir",
                str(home),
                "--shell",
                "/bin/bash",
                TEST_USER,
            ],
            check=True,
            capture_output=True,
        )
    # Not locked (a locked account may not log in even with a key), no password.
    subprocess.run(["usermod", "-p", "*", TEST_USER], check=True, capture_output=True)
    entry = pwd.getpwnam(TEST_USER)
    home = Path(entry.pw_dir)
    for rc in (".bashrc", ".profile", ".bash_profile"):
        (home / rc).write_text("")
        os.chown(home / rc, entry.pw_uid, entry.pw_gid)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    return TEST_USER


def user_home(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir)


def clean_home(user: str) -> None:
    """Empty the test user's home except its rc files (only for the dedicated user)."""
    if user != TEST_USER:
        return
    home = user_home(user)
    for child in home.iterdir():
        if child.name in (".bashrc", ".profile", ".bash_profile", ".ssh"):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def authorize(user: str, public_key: str, fallback_dir: Path) -> Path:
    """Where sshd finds `user`'s authorized keys: the dedicated user's ~/.ssh (sshd reads it
    as that user, who cannot enter root's temp directories), else `fallback_dir`."""
    if user != TEST_USER:
        path = fallback_dir / "authorized_keys"
        path.write_text(public_key)
        return path
    entry = pwd.getpwnam(user)
    ssh_dir = Path(entry.pw_dir) / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    path = ssh_dir / "authorized_keys"
    path.write_text(public_key)
    for item in (ssh_dir, path):
        os.chown(item, entry.pw_uid, entry.pw_gid)
    path.chmod(0o600)
    return path


def make_key(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


@dataclass
class SSHHost:
    ip: str
    root: Path
    user: str
    authorized_keys: Path
    port: int = 22
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host_key(self) -> Path:
        return self.root / "host_ed25519"

    def write_config(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.host_key.exists():
            make_key(self.host_key)
        config = self.root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.ip}:{self.port}",
                    f"HostKey {self.host_key}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    f"PidFile {self.root / 'sshd.pid'}",
                    f"AllowUsers {self.user}",
                    *SSHD_COMMON,
                ]
            )
        )
        return config

    def start(self) -> None:
        config = self.write_config()
        log = (self.root / "sshd.log").open("ab")
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log, start_new_session=True
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((self.ip, self.port), 0.2):
                return
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"sshd on {self.ip} exited: {(self.root / 'sshd.log').read_text()}"
                )
            time.sleep(0.05)
        raise RuntimeError(f"sshd on {self.ip} did not start listening")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(5)
        self.process = None

    def drop_sessions(self) -> int:
        """Kill the sshd processes serving connections (the listener stays): a dropped
        connection as the client sees it. Returns how many were killed."""
        if self.process is None:
            return 0
        killed = 0
        for child in _descendants(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
                killed += 1
        return killed

    def new_host_key(self) -> None:
        """The machine was rebuilt: another host key."""
        self.stop()
        self.host_key.unlink()
        Path(str(self.host_key) + ".pub").unlink()
        self.start()


def _descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        children = _children(queue.pop())
        found += children
        queue += children
    return found


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


# -- isolated hosts -------------------------------------------------------------------------

HOSTS_DIR = Path("/var/tmp/launcher-test-hosts")  # not under /tmp: each host has its own /tmp
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
SSHD_NAMES = frozenset({"sshd", "sshd-session", "sshd-auth"})  # the binaries sshd runs as
REPO = Path(__file__).resolve().parent.parent
# A child of unshare is PID 1 of new PID and mount namespaces, with a /proc of its own, and
# gets SIGKILL when unshare exits (so a killed unshare takes the whole host down).
NAMESPACES = [UNSHARE, "--mount", "--pid", "--fork", "--mount-proc", "--kill-child"]


@functools.cache
def isolation_unavailable() -> str | None:
    """Why isolated hosts cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "isolated test hosts need root (mount and PID namespaces)"
    for tool in (SSHD, UNSHARE):
        if not Path(tool).exists():
            return f"isolated test hosts need {tool}"
    probe = subprocess.run([*NAMESPACES, "true"], check=False, capture_output=True)
    if probe.returncode != 0:
        return f"unshare cannot make namespaces here: {probe.stderr.decode().strip()}"
    return None


class IsolatedHost:
    """A test machine at `ip`:22 that logs in root with `public_key`, while sharing this
    box's network, users and most of its filesystem.

    Its sshd is PID 1 of its own PID and mount namespaces (`unshare --pid --mount
    --mount-proc`), so `ps`, `pkill` and `ray stop` in a session see only this host's
    processes, and `stop()` (SIGKILL to that PID 1) makes the kernel kill every process
    started through the host, daemons included. /root, /tmp and /dev/shm are its own:
    `home/` and `tmp/` of its directory under /var/tmp/launcher-test-hosts (read them from
    here with `path()`) and a fresh tmpfs. The directories of this interpreter, its venv
    and this repository that lie under /root are bound back in, and the login shell puts
    the test venv's bin first on PATH, so `python3`, `ray` and `pip` are the venv's.

    Created stopped; `start()` boots it, `stop()` powers it off (home and /tmp stay, like a
    disk), `close()` also deletes its directory.

    As PID 1, sshd reaps the orphans reparented to it (OpenSSH 9.2's SIGCHLD handler waits
    for any child), ignores `kill -9 1` from inside, and shuts the host down on SIGTERM.
    The network is this box's: what binds a wildcard address or 127.0.0.1 clashes between
    hosts (Ray's GCS on *:6379, its dashboard on 127.0.0.1:8265), so run one Ray head with
    default ports at a time and pass --node-ip-address (the host's ip).
    """

    user = "root"
    port = 22

    def __init__(self, ip: str, public_key: str) -> None:
        _sweep_stale()
        HOSTS_DIR.mkdir(parents=True, exist_ok=True)
        self.ip = ip
        self.root = Path(tempfile.mkdtemp(prefix=f"{ip}-", dir=HOSTS_DIR))
        (self.root / "owner").write_text(_identity(os.getpid()) or "")
        self.home = self.root / "home"
        self.tmp = self.root / "tmp"
        self.home.mkdir(mode=0o700)
        self.tmp.mkdir()
        self.tmp.chmod(0o1777)
        self._kept = _kept_under_root()
        for target, _ in self._kept:  # mount points for them inside the host's home or /tmp
            self._inside(target).mkdir(parents=True, exist_ok=True)
        venv_bin = shlex.quote(str(Path(sys.executable).parent))
        rc = f'case ":$PATH:" in *:{venv_bin}:*) ;; *) PATH={venv_bin}:"$PATH" ;; esac\n'
        for name in (".profile", ".bashrc"):
            (self.home / name).write_text(rc + "export PATH\n")
        (self.root / "authorized_keys").write_text(public_key)
        make_key(self.host_key)
        # More sshd_config lines (e.g. `SetEnv NAME=value` for every session), read when
        # the host starts.
        self.sshd_options: list[str] = []
        # More addresses its sshd listens on (port 22), e.g. a cloud VM's public IP; read
        # when the host starts.
        self.extra_ips: list[str] = []
        # The users sshd lets in (root's aliases a host's /etc/passwd adds), and files of
        # this box bound over the host's own paths, e.g. {"/etc/passwd": copy}; read when
        # the host starts.
        self.logins: list[str] = ["root"]
        self.overlays: dict[str, str] = {}
        self._unshare: subprocess.Popen[bytes] | None = None
        self._init_pid: int | None = None  # this box's PID of the host's PID 1 (sshd)
        self._pid_ns: str | None = None

    def __repr__(self) -> str:
        return f"IsolatedHost({self.ip}, {self.root})"

    def _inside(self, target: str) -> Path:
        """Where a directory of this box under /root or /tmp is mounted in the host."""
        if target.startswith("/tmp/"):
            return self.tmp / os.path.relpath(target, "/tmp")
        return self.home / os.path.relpath(target, "/root")

    @property
    def host_key(self) -> Path:
        return self.root / "host_ed25519"

    @property
    def running(self) -> bool:
        return self._unshare is not None and self._unshare.poll() is None

    def start(self) -> None:
        """Boot the host: returns once its sshd accepts connections (no-op if running)."""
        if self.running:
            return
        self.stop()  # reap an earlier run that died by itself
        if _listening(self.ip, self.port):
            raise RuntimeError(f"{self.ip}:{self.port} is already taken (a stale host?)")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        with (self.root / "sshd.log").open("ab") as log:
            self._unshare = subprocess.Popen(
                [*NAMESPACES, "--propagation", "private", "sh", "-c", self._boot_script()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        _live.append(self)
        (self.root / "unshare.pid").write_text(_identity(self._unshare.pid) or "")
        deadline = time.monotonic() + 15
        while not all(_listening(ip, self.port) for ip in (self.ip, *self.extra_ips)):
            if self._unshare.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log_text = (self.root / "sshd.log").read_text(errors="replace")
                raise RuntimeError(f"host {self.ip} did not come up: {log_text}")
            time.sleep(0.02)
        (self._init_pid,) = _children(self._unshare.pid)
        self._pid_ns = os.readlink(f"/proc/{self._init_pid}/ns/pid")

    def _boot_script(self) -> str:
        """The mounts, made inside the new namespaces (private: none reaches this box), then
        sshd in place of the shell, as PID 1."""
        q = shlex.quote
        steps = ["set -e"]
        for target, source in self._kept:  # before /root and /tmp are covered
            inside = self._inside(target)
            steps.append(f"mount --rbind {q(source)} {q(str(inside))}")
        steps += [
            f"mount --rbind {q(str(self.home))} /root",
            f"mount --rbind {q(str(self.tmp))} /tmp",
            "mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm",
            *(f"mount --bind {q(src)} {q(target)}" for target, src in self.overlays.items()),
            f"exec {q(SSHD)} -D -e -f {q(str(self._write_config()))}",
        ]
        return "\n".join(steps)

    def _write_config(self) -> Path:
        config = self.root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.ip}:{self.port}",
                    *(f"ListenAddress {ip}:{self.port}" for ip in self.extra_ips),
                    f"HostKey {self.host_key}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "PidFile none",
                    f"AllowUsers {' '.join(self.logins)}",
                    *self.sshd_options,
                    *SSHD_COMMON,
                ]
            )
        )
        return config

    def processes(self) -> list[int]:
        """This box's PIDs of the host's live processes, its PID 1 (sshd) first."""
        if not self.running or self._pid_ns is None:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "pid") == self._pid_ns:
                        found.append(int(entry.name))
        return sorted(found, key=lambda pid: pid != self._init_pid)

    def stop(self) -> None:
        """Power off: SIGKILL the host's PID 1, so the kernel kills all its processes;
        returns once none is left. Idempotent."""
        if self._unshare is None:
            return
        before = [_identity(pid) for pid in self.processes()]
        if self._unshare.poll() is None:
            # Without a PID 1 yet, unshare's --kill-child passes the SIGKILL on.
            victim = self._init_pid or self._unshare.pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        self._unshare.wait(30)
        if not _wait_gone([i for i in before if i], 15):
            raise RuntimeError(f"processes of {self.ip} outlived it: {before}")
        self._unshare = self._init_pid = self._pid_ns = None
        (self.root / "unshare.pid").unlink(missing_ok=True)
        with contextlib.suppress(ValueError):
            _live.remove(self)

    def close(self) -> None:
        """Stop the host and delete its directory."""
        self.stop()
        if self.root.exists():
            _remove(self.root)

    def drop_sessions(self) -> int:
        """Kill the sshd processes serving connections, not the listener nor anything else
        (commands they ran, daemons): a dropped connection as the client sees it. Returns
        how many were killed."""
        killed = 0
        for pid in self.processes():
            if pid == self._init_pid:
                continue
            with contextlib.suppress(OSError):
                if Path(os.readlink(f"/proc/{pid}/exe")).name in SSHD_NAMES:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        return killed

    def new_host_key(self) -> None:
        """The machine was rebuilt: another host key (and, as after any reboot, none of its
        processes). Restarts the host."""
        self.stop()
        self.host_key.unlink()
        Path(f"{self.host_key}.pub").unlink()
        make_key(self.host_key)
        self.start()

    def path(self, remote: str) -> Path:
        """Where the host's file `remote` lives on this box: "~/x", "x" and "/root/x" are
        in its home/, "/tmp/x" in its tmp/. Other paths are this box's own, except while the
        host runs, when they are read through its root (so "/dev/shm/x" works)."""
        if remote == "~" or remote.startswith("~/"):
            remote = "/root" + remote[1:]
        path = PurePosixPath("/root", remote)  # relative paths are in the home directory
        for mount, local in (("/root", self.home), ("/tmp", self.tmp)):
            if path.is_relative_to(mount):
                return local / path.relative_to(mount)
        if self.running:
            return Path(f"/proc/{self._init_pid}/root") / path.relative_to("/")
        return Path(path)


@contextlib.contextmanager
def isolated_hosts(
    key: Path, first_ip: str, count: int, *, start: bool = True
) -> Iterator[list[IsolatedHost]]:
    """`count` isolated hosts at `first_ip` and the addresses after it, authorizing the
    private `key` (its .pub), started unless `start` is false, closed afterwards. Skips the
    test where isolated hosts cannot run."""
    reason = isolation_unavailable()
    if reason is not None:
        pytest.skip(reason)
    public_key = Path(f"{key}.pub").read_text()
    first = ipaddress.ip_address(first_ip)
    with contextlib.ExitStack() as closing:
        hosts = []
        for offset in range(count):
            host = IsolatedHost(str(first + offset), public_key)
            closing.callback(host.close)
            hosts.append(host)
            if start:
                host.start()
        yield hosts


_live: list[IsolatedHost] = []  # started and not stopped: closed when the tests exit


@atexit.register
def _close_live() -> None:
    for host in list(_live):
        with contextlib.suppress(Exception):
            host.close()


def _kept_under_root() -> list[tuple[str, str]]:
    """(path, real path) of the directories under /root and /tmp (both covered in a host)
    that Python here needs: its prefixes, its binary's directory and this repository (CI
    may clone it under /tmp), each as given and as resolved.
    Nested ones are dropped: their parent's bind brings them."""
    given = [
        sys.prefix,
        sys.base_prefix,
        str(Path(sys.executable).parent),
        os.path.dirname(os.path.realpath(sys.executable)),
        str(REPO),
    ]
    wanted: dict[str, str] = {}
    for path in given:
        real = os.path.realpath(path)
        for target in (os.path.abspath(path), real):
            if target.startswith(("/root/", "/tmp/")):
                wanted.setdefault(target, real)
    kept: list[tuple[str, str]] = []
    for target in sorted(wanted):  # a parent sorts before what is under it
        if not any(target.startswith(parent + "/") for parent, _ in kept):
            kept.append((target, wanted[target]))
    return kept


def _listening(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), 0.5):
            return True
    except OSError:
        return False


def _identity(pid: int) -> str | None:
    """`pid` with its start time, so a reused PID is not taken for it; None once it has
    exited (a zombie counts as exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else f"{pid} {fields[19]}"


def _alive(identity: str) -> bool:
    return _identity(int(identity.split(maxsplit=1)[0])) == identity


def _wait_gone(identities: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(i) for i in identities):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _remove(root: Path) -> None:
    """Delete a stopped host's directory. Its binds existed only in its own mount
    namespace, so it is plain here; refuse if anything is mounted under it all the same."""
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            mount_point = line.split()[4]
            if mount_point == str(root) or mount_point.startswith(f"{root}/"):
                raise RuntimeError(f"{mount_point} is mounted; not deleting {root}")
    shutil.rmtree(root)


def _sweep_stale() -> None:
    """Delete host directories whose test process is gone (a crashed run), first killing
    any host still running from them."""
    if not HOSTS_DIR.is_dir():
        return
    for root in HOSTS_DIR.iterdir():
        with contextlib.suppress(OSError):
            owner = (root / "owner").read_text()
            if not owner or _alive(owner):  # in use, or being made right now
                continue
            pid_file = root / "unshare.pid"
            unshare = pid_file.read_text() if pid_file.exists() else ""
            if unshare and _alive(unshare):
                pid = int(unshare.split(maxsplit=1)[0])
                inside = [i for i in map(_identity, _children(pid)) if i]
                os.kill(pid, signal.SIGKILL)  # --kill-child takes the host's PID 1 along
                if not _wait_gone(inside, 15):
                    continue
            _remove(root)


def ray_start_commands(num_cpus: int) -> str:
    """The start-ray commands (YAML) of clusters whose machines are isolated hosts: they
    share this box's network, so each Ray node names its own address and agent port; the
    rest is Ray's usual start."""
    options = (
        "--node-ip-address=$LAUNCHER_NODE_IP --object-store-memory=100000000 "
        f"--num-cpus={num_cpus} --dashboard-agent-listen-port=$((52000 + ${{LAUNCHER_NODE_IP##*.}})) "
        "--disable-usage-stats"
    )
    return (
        "head_start_ray_commands:\n"
        "  - ray stop\n"
        f"  - ray start --head --port=6379 --include-dashboard=false {options}\n"
        "worker_start_ray_commands:\n"
        "  - ray stop\n"
        f"  - ray start --address=$RAY_HEAD_IP:6379 {options}\n"
    )


# `launcher exec` command printing how many Ray nodes are alive ("alive N").
COUNT_NODES = (
    'python -c \'import ray; ray.init(); print("alive", sum(n["Alive"] for n in ray.nodes()))\''
)
