"""Real sshd test hosts, each on its own loopback address (127.0.5.x, port 22).

As root, hosts log in a dedicated user (`launcher-test`) whose home and shell rc files are
empty, so a session starts cheaply; otherwise the current user. Keys, host keys and
configs live in the test's temp directory; every process started here is stopped.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TEST_USER = "launcher-test"
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
