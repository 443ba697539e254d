"""Commands and file copies on a node over SSH (paramiko).

One connection per node, opened on first use and reused for every command and copy; a
connection that drops is opened again and the interrupted command run again (setup
commands are meant to be safe to repeat, as in Ray). Commands run in a login shell, so
PATH set up in the user's profile (conda, pyenv) applies, and environment values are
passed as shell-quoted `env` arguments, never spliced into the command text.

Host keys are pinned per cluster (launcher/runners/known_hosts.py): the first contact
records the node's key in the cluster's known_hosts file, and every later connection to the
same machine must present the same key.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from launcher.errors import HostKeyError, LauncherError
from launcher.runners.base import CommandResult, OutputSink, expand_home
from launcher.runners.copy import (
    CopySize,
    copy_over_rsync,
    copy_over_sftp,
    local_copy_size,
    remote_copy_size,
    rsync_available,
    sftp_is_cheaper,
    ssh_command,
)
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.paramiko_lib import paramiko
from launcher.runners.shell import (
    LineBuffer,
    OutputLines,
    PidReport,
    append_to_log,
    kill_group_argv,
    login_shell_argv,
    reporting_pid,
)
from launcher.runners.ssh_keys import rsa_key
from launcher.runners.ssh_target import SSHTarget

__all__ = ["SSHNotAnsweringError", "SSHRunner", "SSHTarget"]


class KeyFileMissing(FileNotFoundError):
    """The runner's SSH key file is not on this machine: no connection is tried, and a
    command is not tried again (as after a dropped connection)."""


COMMAND_ATTEMPTS = 3  # a command whose connection drops is run again, this many times in all
KILL_WAIT_S = 10.0  # the longest a timed-out command's kill may take on the node
CopyMethod = Literal["auto", "rsync", "sftp"]
_T = TypeVar("_T")

# paramiko's transport thread logs a failed handshake with its traceback at ERROR level; with
# no handler anywhere, Python's last resort prints that on stderr. The launcher reports the
# failure itself, in one line (a handler the user configures still receives these).
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class SSHNotAnsweringError(LauncherError, OSError):
    """A host accepted the TCP connection but sent no SSH banner in time (or closed it), or
    did not finish the SSH handshake in time. Not tried again at once: the host is there,
    but what listens does not work as an SSH server. An OSError to the wait-until-ready
    loops (a booting machine may get there), a LauncherError to everything else."""


class SSHRunner:
    """A `CommandRunner` for one node over SSH."""

    def __init__(
        self,
        target: SSHTarget,
        known_hosts: KnownHosts,
        log_path: Path,
        base_env: Mapping[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        node: str | None = None,
    ) -> None:
        self.target = target
        self.known_hosts = known_hosts
        self.node = node  # the machine expected at the address (its host key is pinned as its)
        self.log_path = log_path
        self.base_env = dict(base_env or {})
        self.connect_timeout_s = connect_timeout_s
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.RLock()
        self.copy_method: CopyMethod = "auto"  # or always "rsync" / "sftp" (tests)
        self._home: str | None = None
        self._remote_rsync: bool | None = None  # whether the node has rsync (asked once)
        self._setsid: bool | None = None  # whether the node has setsid -w (learned)
        self._sftp_lock = threading.Lock()
        self._sftp_client: paramiko.SFTPClient | None = None  # of the current connection
        self._rtt: float | None = None  # of the current connection

    # -- connection -----------------------------------------------------------------
    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self.close()
            client = paramiko.SSHClient()
            name = self.known_hosts.entry_name(self.target.host, self.target.port)
            for key in self.known_hosts.keys_for(name, self.node):
                client.get_host_keys().add(name, key.get_name(), key)
            client.set_missing_host_key_policy(_RecordFirstContact(self.known_hosts, self.node))
            path = self.target.key_path
            key_file = str(Path(path).expanduser()) if path else None
            if key_file and not Path(key_file).is_file():
                raise KeyFileMissing(
                    f"the SSH key {key_file} for {self.target.host} is not on this machine "
                    "(auth.ssh_private_key, or the key `launcher up` made for the cluster "
                    "where it ran); copy it here, or point auth.ssh_private_key at it"
                )
            pkey = rsa_key(key_file) if key_file else None
            sock = self._open_socket()
            try:
                client.connect(
                    self.target.host,
                    port=self.target.port,
                    username=self.target.user,
                    pkey=pkey,
                    key_filename=key_file if pkey is None else None,
                    look_for_keys=self.target.key_path is None,
                    allow_agent=self.target.key_path is None,
                    timeout=self.connect_timeout_s,
                    banner_timeout=self.connect_timeout_s,
                    auth_timeout=self.connect_timeout_s,
                    sock=sock,
                    transport_factory=_transport,
                )
            except paramiko.BadHostKeyException as exc:
                client.close()
                raise HostKeyError(
                    f"{name}: its host key changed since the launcher first connected "
                    f"(recorded in {self.known_hosts.path}); if the machine was rebuilt, "
                    f"forget the old key with `ssh-keygen -R '{name}' -f "
                    f"{self.known_hosts.path}` and run again"
                ) from exc
            except paramiko.SSHException as exc:
                client.close()
                sock.close()
                if str(exc) != "No existing session":  # paramiko: the handshake did not end
                    raise
                raise SSHNotAnsweringError(
                    f"{self.target.host}:{self.target.port} sent an SSH banner but did not "
                    f"finish the SSH handshake within {self.connect_timeout_s:g} s (a hung "
                    "or overloaded sshd?)"
                ) from None
            except BaseException:
                client.close()
                sock.close()
                raise
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(15)
            self._client = client
            return client

    def _open_socket(self) -> socket.socket | paramiko.ProxyCommand:
        """The connection's byte stream: the proxy command's, or a TCP socket that neither
        holds back small writes (TCP_NODELAY, set before the key exchange, whose small
        packets otherwise waited ~40 ms each on loopback) nor delays its ACKs (below)."""
        if self.target.proxy_command:
            return paramiko.ProxyCommand(self._proxy_command())
        sock = socket.create_connection(
            (self.target.host, self.target.port), timeout=self.connect_timeout_s
        )
        try:
            self._await_banner(sock)
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not hasattr(socket, "TCP_QUICKACK"):  # Linux only
            return sock
        quick = _QuickAckSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        quick.settimeout(self.connect_timeout_s)
        quick.acknowledge_at_once()
        return quick

    def _await_banner(self, sock: socket.socket) -> None:
        """Wait (at most connect_timeout_s) for the server's first bytes, its SSH banner,
        without taking them: a host that accepts connections and then says nothing is named
        as such, instead of paramiko's handshake failing in its own thread."""
        where = f"{self.target.host}:{self.target.port}"
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            raise SSHNotAnsweringError(
                f"{where} accepted the connection but sent no SSH banner within "
                f"{self.connect_timeout_s:g} s (a hung or overloaded sshd, or another "
                "program on that port?)"
            ) from None
        if not first:
            raise SSHNotAnsweringError(
                f"{where} accepted the connection and closed it without sending an SSH "
                "banner (sshd refusing this machine, or another program on that port?)"
            )

    def _proxy_command(self) -> str:
        command = self.target.proxy_command or ""
        return command.replace("%h", self.target.host).replace("%p", str(self.target.port))

    def close(self) -> None:
        with self._lock:
            if self._sftp_client is not None:
                with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                    self._sftp_client.close()
                self._sftp_client = None
            self._rtt = None
            if self._client is not None:
                self._client.close()
                self._client = None

    def check_ready(self) -> str | None:
        try:
            self._connect()  # a HostKeyError is not caught here: waiting cannot fix it
        except KeyFileMissing as exc:  # nor can it bring the key
            raise LauncherError(str(exc)) from None
        except SSHNotAnsweringError as exc:
            return str(exc)  # names the host
        except (OSError, EOFError, paramiko.SSHException) as exc:
            return f"ssh {self.target}: {_why(exc)}"
        return None

    # -- commands -------------------------------------------------------------------
    def command_line(self, command: str, env: Mapping[str, str] | None = None) -> str:
        """What is sent to the node: `env` with quoted NAME=value arguments, then a login
        shell that also reads ~/.bashrc (as Ray's launcher does), running `command`."""
        return shlex.join(login_shell_argv(command, self.base_env, env))

    def run(
        self,
        command: str,
        env: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        echo: OutputSink | None = None,
        interactive: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        line = self.command_line(command, env)
        self._log(f"$ {command}\n")
        if interactive:
            return self._run_in_terminal(line)
        if timeout is not None:
            # Reports its process group first, so that a timeout can kill it on the node.
            argv = login_shell_argv(command, self.base_env, env)
            line = shlex.join(reporting_pid(argv, self._setsid))
        deadline = None if timeout is None else time.monotonic() + timeout
        last: Exception | None = None
        for attempt in range(1, COMMAND_ATTEMPTS + 1):
            try:
                return self._run_once(line, deadline, timeout, echo, stdin)
            except SSHNotAnsweringError:
                self.close()
                raise
            except KeyFileMissing as exc:  # no connection was made: trying again cannot help
                self._log(f"({exc})\n")
                return CommandResult(255, str(exc))
            except (OSError, EOFError, paramiko.SSHException) as exc:
                last = exc
                self._dropped(attempt, exc, "")
        return CommandResult(255, f"connection to {self.target} kept dropping: {_why(last)}")

    def _dropped(self, attempt: int, exc: BaseException | None, during: str) -> None:
        """The connection dropped in attempt `attempt`: close it, say so in the node's log,
        and wait before the next attempt."""
        self.close()
        self._log(
            f"(connection to {self.target} lost{during}: {_why(exc)}; "
            f"attempt {attempt} of {COMMAND_ATTEMPTS})\n"
        )
        time.sleep(_backoff_s(attempt))

    def _run_in_terminal(self, line: str) -> CommandResult:
        """The command on this terminal (a shell, tmux), through the OpenSSH client with the
        same key, proxy and pinned host keys; paramiko has no terminal handling of its own."""
        self._connect()  # records the host key on first contact, refuses a changed one
        args = [*ssh_command(self.target, self.known_hosts.path), "-tt", self.target.host, line]
        args[args.index("BatchMode=yes")] = "BatchMode=no"
        code = subprocess.run([args[0], "-l", self.target.user, *args[1:]], check=False).returncode
        return CommandResult(code, "")

    def open_tunnel(self, port: int) -> paramiko.Channel:
        """A stream to `localhost:port` as the node sees it, over this connection."""
        transport = self._connect().get_transport()
        assert transport is not None
        return transport.open_channel("direct-tcpip", ("localhost", port), ("127.0.0.1", 0))

    def capture(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        """Run a short `sh` command quietly (not logged, no login shell) and return its
        exit code and whole standard output: for the launcher's own bookkeeping."""
        for attempt in range(1, COMMAND_ATTEMPTS + 1):
            try:
                client = self._connect()
                _, stdout, _ = client.exec_command(f"sh -c {shlex.quote(command)}", timeout=timeout)
                output = stdout.read().decode("utf-8", errors="replace")
                return stdout.channel.recv_exit_status(), output
            except (SSHNotAnsweringError, KeyFileMissing):
                self.close()
                raise
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self.close()
                if attempt == COMMAND_ATTEMPTS:
                    raise OSError(f"ssh {self.target}: {_why(exc)}") from exc
                time.sleep(_backoff_s(attempt))
        raise AssertionError("unreachable")

    def _run_once(
        self,
        line: str,
        deadline: float | None,
        timeout: float | None,
        echo: OutputSink | None,
        stdin: bytes | None = None,
    ) -> CommandResult:
        client = self._connect()
        transport = client.get_transport()
        assert transport is not None
        if deadline is not None and time.monotonic() > deadline:
            # The time ran out while connecting (or between attempts): never start it.
            note = f"(not started: its {timeout:g} s ran out before it could start)"
            self._log(note + "\n")
            return CommandResult(124, note, timed_out=True)
        channel = transport.open_session(timeout=self.connect_timeout_s)
        report = PidReport() if deadline is not None else None
        with channel, self.log_path.open("a", encoding="utf-8") as log:
            output = OutputLines(log, echo)
            channel.set_combine_stderr(True)
            channel.settimeout(1.0)
            channel.exec_command(line)
            if stdin is not None:
                channel.sendall(stdin)
                channel.shutdown_write()
            lines = LineBuffer(output)
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    if report is not None and report.pid is None:
                        _await_pid(channel, report, lines)  # it started; it will say its pid
                    channel.close()
                    self._learn(report)
                    self._stop_remote(transport, report.pid if report else None)
                    output.tail.append(f"(stopped after {timeout:g} s)")
                    return CommandResult(124, output.text(), timed_out=True)
                try:
                    chunk = channel.recv(65536)
                except TimeoutError:
                    if transport.is_active():
                        continue
                    raise EOFError("the connection closed") from None
                if not chunk:
                    break
                lines.feed(report.feed(chunk) if report else chunk)
            lines.feed(report.finish() if report else b"")
            lines.finish()
            self._learn(report)
            if not channel.exit_status_ready() and not transport.is_active():
                raise EOFError("the connection closed before the command finished")
            code = channel.recv_exit_status()
        if code == -1:
            raise EOFError("the command ended without an exit status")
        return CommandResult(code, output.text())

    def _learn(self, report: PidReport | None) -> None:
        """Keep what a command's report said of setsid: the next start without asking."""
        if report is not None and report.in_session is not None:
            self._setsid = report.in_session

    def _stop_remote(self, transport: paramiko.Transport, pid: int | None) -> None:
        """Kill a timed-out command's process group on the node: closing its channel does
        not stop it (sshd gives a command without a terminal no hangup). Best effort, said
        in the node's log when it cannot be done."""
        if pid is None:
            self._log(f"(could not stop the command on {self.target}: it reported no process)\n")
            return
        try:
            with transport.open_session(timeout=self.connect_timeout_s) as channel:
                channel.exec_command(shlex.join(kill_group_argv(pid)))
                if channel.status_event.wait(KILL_WAIT_S):
                    return
            problem = f"no answer within {KILL_WAIT_S:g} s"
        except (OSError, EOFError, paramiko.SSHException) as exc:
            problem = _why(exc)
        self._log(f"(could not stop process group {pid} on {self.target}: {problem})\n")

    def _log(self, text: str) -> None:
        append_to_log(self.log_path, text)

    # -- files ----------------------------------------------------------------------
    def remote_path(self, path: str) -> str:
        return expand_home(path, self._remote_home)

    def _remote_home(self) -> str:
        if self._home is None:
            self._home = self._with_sftp(lambda sftp: sftp.normalize("."))
        return self._home

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        target = self.remote_path(remote)
        if not self._by_sftp(lambda: local_copy_size(local, excludes)):
            parent = str(PurePosixPath(target.rstrip("/") or "/").parent)
            # One round trip: the parent made, and rsync looked for (once per node).
            probe = "" if self._remote_rsync else "; command -v rsync >/dev/null 2>&1 || exit 3"
            code = self._quiet(f"mkdir -p {shlex.quote(parent)} || exit 2{probe}")
            if code not in (0, 3):
                raise OSError(f"cannot create {parent} on {self.target}")
            self._remote_rsync = code == 0
            if self._remote_rsync:
                known = self.known_hosts.path
                copy_over_rsync(self.target, known, local, target, excludes, up=True)
                return
        self._with_sftp(lambda sftp: copy_over_sftp(sftp, local, target, excludes, up=True))

    def get(self, remote: str, local: str) -> None:
        source = self.remote_path(remote)
        if not self._by_sftp(lambda: self._with_sftp(lambda s: remote_copy_size(s, source))):
            if self._remote_rsync is None:
                self._remote_rsync = self._quiet("command -v rsync") == 0
            if self._remote_rsync:
                copy_over_rsync(self.target, self.known_hosts.path, source, local, (), up=False)
                return
        self._with_sftp(lambda sftp: copy_over_sftp(sftp, source, local, (), up=False))

    def _by_sftp(self, size: Callable[[], CopySize | None]) -> bool:
        """Whether a copy goes over SFTP on this connection rather than by rsync."""
        if self._remote_rsync is False or not rsync_available():
            return True
        if self.copy_method != "auto":
            return self.copy_method == "sftp"
        return sftp_is_cheaper(size(), lambda: self._with_sftp(self._round_trip_s))

    def _round_trip_s(self, sftp: paramiko.SFTPClient) -> float:
        """This connection's round trip time (the faster of two tiny requests: the first
        after logging in can wait for the server to finish setting the session up)."""
        if self._rtt is None:
            timings = []
            for _ in range(2):
                started = time.perf_counter()
                sftp.stat(".")
                timings.append(time.perf_counter() - started)
            self._rtt = min(timings)
        return self._rtt

    def _with_sftp(self, work: Callable[[paramiko.SFTPClient], _T]) -> _T:
        """`work` on this connection's SFTP session (opened once; one user at a time). A
        connection that drops is opened again and `work` done again (copies are safe to
        repeat); an error the server reports (a missing file) is raised as it is."""
        last: BaseException | None = None
        for attempt in range(1, COMMAND_ATTEMPTS + 1):
            with self._sftp_lock:
                try:
                    return work(self._sftp_session())
                except (SSHNotAnsweringError, KeyFileMissing):
                    raise
                except (EOFError, paramiko.SSHException, OSError) as exc:
                    transport = self._client.get_transport() if self._client else None
                    if isinstance(exc, OSError) and transport is not None and transport.is_active():
                        raise
                    last = exc
            self._dropped(attempt, last, " while copying")
        raise OSError(f"ssh {self.target}: the connection kept dropping: {_why(last)}")

    def _sftp_session(self) -> paramiko.SFTPClient:
        client = self._connect()
        with self._lock:
            channel = self._sftp_client.get_channel() if self._sftp_client else None
            if self._sftp_client is None or channel is None or channel.closed:
                self._sftp_client = client.open_sftp()
            return self._sftp_client

    def _quiet(self, command: str) -> int:
        return self.capture(command)[0]


class _QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges what it receives at once. sshd leaves Nagle's
    algorithm on for sessions without a terminal, so its reply to a command waits for the
    ACK of its previous small packet, which Linux delays by up to 40 ms: the first command
    after logging in waited ~45 ms for the ACK of the server's host-keys notice."""

    def acknowledge_at_once(self) -> None:
        self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)

    def recv(self, bufsize: int, flags: int = 0, /) -> bytes:
        data = super().recv(bufsize, flags)
        self.acknowledge_at_once()  # Linux leaves quick-ACK mode by itself: set it again
        return data


# AES-GCM first: one authenticated-encryption pass per packet instead of AES-CTR and a
# separate HMAC (paramiko's own order). Servers without it get paramiko's usual choice.
_PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def _transport(
    sock: Any,
    /,
    *,
    gss_kex: bool = False,
    gss_deleg_creds: bool = False,
    disabled_algorithms: Mapping[str, Iterable[str]] | None = None,
) -> paramiko.Transport:
    # GSS-API is never asked for (older paramiko passes its flags, off; newer ones do not).
    transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
    options = transport.get_security_options()
    known = tuple(options.ciphers)
    preferred = tuple(c for c in _PREFERRED_CIPHERS if c in known)
    options.ciphers = preferred + tuple(c for c in known if c not in preferred)
    return transport


class _RecordFirstContact(paramiko.MissingHostKeyPolicy):
    """paramiko's policy for a host with no recorded key: record it (trust on first use)."""

    def __init__(self, known_hosts: KnownHosts, node: str | None) -> None:
        self.known_hosts = known_hosts
        self.node = node

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        self.known_hosts.record(hostname, key, self.node)
        client.get_host_keys().add(hostname, key.get_name(), key)


def _backoff_s(attempt: int) -> float:
    """The wait after a connection dropped in attempt `attempt` (1, 2, ...)."""
    return min(2.0**attempt, 10.0)


def _why(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        causes = list(exc.errors.values())
        if causes and all(isinstance(c, ConnectionRefusedError) for c in causes):
            return "connection refused (is sshd running and listening there?)"
        return "; ".join(_why(c) for c in causes) or "cannot connect"
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ConnectionRefusedError) or "Connection refused" in text:
        return "connection refused"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    return text


def _await_pid(channel: paramiko.Channel, report: PidReport, lines: LineBuffer) -> None:
    """Read on (at most KILL_WAIT_S) until a command that timed out before it said its
    process id says it, so it can be killed; what it prints meanwhile is output as usual."""
    give_up = time.monotonic() + KILL_WAIT_S
    while report.pid is None and time.monotonic() < give_up:
        try:
            chunk = channel.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            return
        lines.feed(report.feed(chunk))
