"""Commands and file copies in one container of a pod, through the Kubernetes exec API
(no SSH, no kubectl): the `CommandRunner` of the Kubernetes provider.

Each command is an exec of its own (a websocket to the API server, relayed to the
kubelet). Commands run as the SSH runner runs them: a login shell that reads ~/.bashrc,
the environment given as `env NAME=value` arguments. They start under `setsid` (where
the image has util-linux's) and first report their process group, so a timeout can kill
the whole tree in the pod: closing an exec's connection does not stop its command. An
exec that fails to start for a reason that may pass (the API unreachable, a 5xx) is tried
again with backoff; a connection lost after the command started gives exit code 255, as
the command's fate is unknown. Files are copied as tar streams (kube_copy.py).
"""

from __future__ import annotations

import functools
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.runners.base import CommandResult, OutputSink, expand_home
from launcher.runners.forward import PortOpener
from launcher.runners.kube_copy import (
    PutPlan,
    UnsafeArchive,
    extract_tar,
    get_argv,
    plan_put,
    put_argv,
    write_tar,
)
from launcher.runners.kube_session import (
    ConnectionLost,
    ExecNotStarted,
    ExecSession,
    StdinWriter,
    StdoutReader,
    not_started,
)
from launcher.runners.shell import (
    LineBuffer,
    OutputLines,
    PidReport,
    append_to_log,
    kill_group_argv,
    login_shell_argv,
    reporting_pid,
)

__all__ = ["KubeExecRunner", "pod_port_opener"]

COMMAND_ATTEMPTS = 3  # an exec that does not start is tried this many times in all
TIMED_OUT = 124
CONNECTION_LOST = 255

Api = Any  # kubernetes.client.CoreV1Api
ApiSource = Any  # a CoreV1Api, or a function of no arguments that makes one


def _api_of(source: ApiSource) -> Api:
    return source() if callable(source) else source


class KubeExecRunner:
    """A `CommandRunner` for container `container` (None: the pod's default, its
    kubectl.kubernetes.io/default-container or first one) of pod `namespace/pod`."""

    def __init__(
        self,
        api: ApiSource,
        namespace: str,
        pod: str,
        container: str | None = None,
        base_env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self._api_source = api
        self._api: Api | None = None
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.base_env = dict(base_env or {})
        self.log_path = log_path or Path("/dev/null")
        self.attempts = COMMAND_ATTEMPTS
        self.backoff_s = 1.0  # the wait after the first failed attempt, doubling
        self.check_timeout_s = 30.0
        self._home: str | None = None
        self._setsid: bool | None = None  # whether the container has setsid -w (learned)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KubeExecRunner({self.where})"

    @property
    def where(self) -> str:
        container = f" container {self.container}" if self.container else ""
        return f"pod {self.namespace}/{self.pod}{container}"

    # -- the API ----------------------------------------------------------------------
    def api(self) -> Api:
        with self._lock:
            if self._api is None:
                self._api = _api_of(self._api_source)
            return self._api

    def _container(self) -> str | None:
        """The container to exec in: the one given, else the pod's default (asked once;
        a pod with one container needs no name)."""
        if self.container is not None:
            return self.container
        try:
            pod = self.api().read_namespaced_pod(self.pod, self.namespace)
        except Exception as exc:
            raise not_started(exc) from exc
        annotations = pod.metadata.annotations or {}
        chosen = annotations.get("kubectl.kubernetes.io/default-container")
        names = [c.name for c in pod.spec.containers or []]
        self.container = chosen if chosen in names else (names[0] if names else None)
        return self.container

    def open(self, argv: Sequence[str], *, stdin: bool = False, tty: bool = False) -> ExecSession:
        """An exec of `argv` (raises ExecNotStarted)."""
        return ExecSession.open(
            self.api(), self.namespace, self.pod, self._container(), argv, stdin=stdin, tty=tty
        )

    def _attempts(self) -> Iterator[int]:
        """Attempt numbers 1, 2, ..., with a wait (doubling) between them."""
        for attempt in range(1, self.attempts + 1):
            yield attempt
            if attempt < self.attempts:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))

    # -- readiness --------------------------------------------------------------------
    def check_ready(self) -> str | None:
        try:
            with self.open(["true"]) as session:
                deadline = time.monotonic() + self.check_timeout_s
                while session.is_open and time.monotonic() < deadline:
                    session.pump(deadline - time.monotonic())
                status = session.status()
        except ExecNotStarted as exc:
            return self._why_not_ready(exc.reason)
        except ConnectionLost as exc:
            return f"{self.where}: the connection was lost ({exc})"
        if status is None:
            return f"{self.where}: no answer to an exec of `true`"
        if status.exit_code != 0:
            return f"{self.where}: `true` failed: {status.message or status.exit_code}"
        return None

    def _why_not_ready(self, reason: str) -> str:
        """One line on why a pod takes no exec, from the pod's status when it can be read."""
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self.api().read_namespaced_pod(self.pod, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return f"pod {self.namespace}/{self.pod} not found"
            return f"{self.where}: {reason}"
        except Exception as exc:
            return f"cannot reach the Kubernetes API: {_first_line(exc)}"
        phase = pod.status.phase if pod.status else None
        if phase != "Running":
            why = _pod_waiting(pod) or (pod.status.reason if pod.status else None) or ""
            return f"pod {self.namespace}/{self.pod} is {phase or 'not running'}" + (
                f" ({why})" if why else ""
            )
        for status in pod.status.container_statuses or []:
            if self.container in (None, status.name) and not status.ready:
                waiting = status.state.waiting if status.state else None
                detail = f" ({waiting.reason})" if waiting and waiting.reason else ""
                pod_name = f"{self.namespace}/{self.pod}"
                return f"container {status.name} of pod {pod_name} is not ready{detail}"
        return f"{self.where}: {reason}"

    # -- commands ---------------------------------------------------------------------
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
        argv = login_shell_argv(command, self.base_env, env)
        self._log(f"$ {command}\n")
        if interactive:
            return self.terminal(argv)
        why = ""
        for attempt in self._attempts():
            try:
                return self._run_once(argv, timeout, echo, stdin)
            except ExecNotStarted as exc:
                why = f"cannot exec in {self.where}: {exc.reason}"
                self._log(f"({why}; attempt {attempt} of {self.attempts})\n")
                if not exc.retryable:
                    break
        return CommandResult(CONNECTION_LOST, why)

    def _run_once(
        self,
        argv: list[str],
        timeout: float | None,
        echo: OutputSink | None,
        stdin: bytes | None = None,
    ) -> CommandResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        with (
            self.open(reporting_pid(list(argv), self._setsid), stdin=stdin is not None) as session,
            self.log_path.open("a", encoding="utf-8") as log,
        ):
            output = OutputLines(log, echo)
            out, err = LineBuffer(output, hold_last=False), LineBuffer(output)
            report = PidReport()
            started = False  # the pid was reported, or output came: not to be retried
            if stdin is not None:
                session.write(0, stdin)
                session.close_stdin()
            while session.is_open:
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    session.close()
                    self._learn(report)
                    self._kill(report.pid)
                    output.tail.append(f"(stopped after {timeout:g} s)")
                    return CommandResult(TIMED_OUT, output.text(), timed_out=True)
                try:
                    stdout, stderr = session.pump(wait)
                except ConnectionLost as exc:
                    if not started:
                        raise ExecNotStarted(f"connection lost: {exc}", retryable=True) from exc
                    output.tail.append(f"(connection to {self.where} lost: {exc})")
                    return CommandResult(CONNECTION_LOST, output.text())
                own = report.feed(stdout)
                started = started or report.reported or bool(own) or bool(stderr)
                out.feed(own)
                err.feed(stderr)
            out.feed(report.finish())
            out.finish()
            err.finish()
            status = session.status()
        self._learn(report)
        if status is None:
            if not started:
                raise ExecNotStarted("the exec ended without a status", retryable=True)
            output.tail.append(f"(connection to {self.where} lost: no exit status came)")
            return CommandResult(CONNECTION_LOST, output.text())
        if status.message:
            output.tail.append(status.message)
        return CommandResult(status.exit_code, output.text())

    def _learn(self, report: PidReport) -> None:
        """Keep what a command's report said of setsid: the next start without asking."""
        if report.in_session is not None:
            self._setsid = report.in_session

    def _kill(self, pid: int | None) -> None:
        """Kill a timed-out command's process group in the pod (best effort)."""
        if pid is None:
            return
        try:
            with self.open(kill_group_argv(pid)) as session:
                deadline = time.monotonic() + 10
                while session.is_open and time.monotonic() < deadline:
                    session.pump(deadline - time.monotonic())
        except (ExecNotStarted, ConnectionLost) as exc:
            self._log(f"(could not stop process {pid} in {self.where}: {exc})\n")

    def capture(self, argv: Sequence[str], timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        """Run `argv` quietly (no shell, not logged): exit code, stdout, stderr. Raises
        OSError when it cannot be run."""
        for _attempt in self._attempts():
            try:
                return self._capture_once(argv, timeout)
            except ExecNotStarted as exc:
                if not exc.retryable or _attempt == self.attempts:
                    raise OSError(f"cannot exec in {self.where}: {exc.reason}") from exc
        raise AssertionError("unreachable")

    def _capture_once(self, argv: Sequence[str], timeout: float) -> tuple[int, bytes, bytes]:
        out, err = bytearray(), bytearray()
        with self.open(argv) as session:
            deadline = time.monotonic() + timeout
            while session.is_open:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OSError(f"{self.where}: {argv[0]} did not finish in {timeout:g} s")
                try:
                    stdout, stderr = session.pump(left)
                except ConnectionLost as exc:
                    raise OSError(f"connection to {self.where} lost: {exc}") from exc
                out += stdout
                err += stderr
            status = session.status()
        if status is None:
            raise ExecNotStarted("the exec ended without a status", retryable=True)
        return status.exit_code, bytes(out), bytes(err)

    def terminal(
        self, argv: Sequence[str], stdin_fd: int | None = None, stdout_fd: int | None = None
    ) -> CommandResult:
        """`argv` on this terminal (or the given descriptors) through a TTY in the pod."""
        from launcher.runners.kube_terminal import relay

        try:
            session = self.open(argv, stdin=True, tty=True)
        except ExecNotStarted as exc:
            return CommandResult(CONNECTION_LOST, f"cannot exec in {self.where}: {exc.reason}")
        with session:
            try:
                relay(session, stdin_fd, stdout_fd)
            except ConnectionLost as exc:
                return CommandResult(CONNECTION_LOST, f"connection to {self.where} lost: {exc}")
            status = session.status()
        if status is None:
            return CommandResult(CONNECTION_LOST, f"connection to {self.where} lost")
        return CommandResult(status.exit_code, status.message)

    def _log(self, text: str) -> None:
        append_to_log(self.log_path, text)

    # -- files ------------------------------------------------------------------------
    def remote_path(self, path: str) -> str:
        return expand_home(path, self._remote_home)

    def _remote_home(self) -> str:
        if self._home is None:
            code, out, err = self.capture(["sh", "-c", 'printf %s "$HOME"'])
            if code != 0 or not out.startswith(b"/"):
                raise OSError(f"{self.where}: cannot tell its home directory: {err!r}")
            self._home = out.decode()
        return self._home

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        plan = plan_put(local)
        argv = put_argv(plan, self.remote_path(remote))
        send = functools.partial(_send_tar, plan=plan, excludes=excludes, local=local)
        self._copy(f"{local} to {self.where}", argv, send, stdin=True)

    def get(self, remote: str, local: str) -> None:
        source = self.remote_path(remote)
        argv = get_argv(source)
        receive = functools.partial(_receive_tar, remote=source, local=local)
        self._copy(f"{remote} from {self.where}", argv, receive, stdin=False)

    def _copy(
        self,
        what: str,
        argv: list[str],
        transfer: Callable[[ExecSession], None],
        *,
        stdin: bool,
    ) -> None:
        """Run a copy's exec; one that cannot start or whose connection drops is done
        again (a copy is safe to repeat), as the SSH runner does."""
        for attempt in self._attempts():
            try:
                with self.open(argv, stdin=stdin) as session:
                    transfer(session)
                    return
            except (ExecNotStarted, ConnectionLost) as exc:
                why = exc.reason if isinstance(exc, ExecNotStarted) else f"connection lost: {exc}"
                retry = not isinstance(exc, ExecNotStarted) or exc.retryable
                self._log(f"(copying {what}: {why}; attempt {attempt} of {self.attempts})\n")
                if not retry or attempt == self.attempts:
                    raise OSError(f"cannot copy {what}: {why}") from exc


def _send_tar(session: ExecSession, plan: PutPlan, excludes: tuple[str, ...], local: str) -> None:
    """Stream the put's tar into the pod's `tar -x`, then wait for its status."""
    sink = StdinWriter(session)
    try:
        write_tar(plan, excludes, sink)
        sink.flush()
        session.close_stdin()
        session.drain(lambda _out, err: sink.errors.extend(err))
    except ConnectionLost:
        if session.is_open or session.status() is None:
            raise
        # else the command ended before taking all of it: its status says why
    _raise_unless_ok(session, sink.errors, f"copying {local}")


def _receive_tar(session: ExecSession, remote: str, local: str) -> None:
    """Unpack the pod's `tar -c` as it comes; the pod's own error when it made none."""
    reader = StdoutReader(session)
    try:
        extract_tar(reader, remote, local)
    except UnsafeArchive:
        raise
    except (tarfile.TarError, OSError) as exc:  # no tar, or a broken one: the pod says why
        session.drain(lambda _out, err: reader.errors.extend(err))
        status = session.status()
        if status is None or status.exit_code == 0:
            raise OSError(f"copying {remote}: {exc}") from exc
    session.drain(lambda _out, err: reader.errors.extend(err))
    _raise_unless_ok(session, reader.errors, f"copying {remote}")


def _raise_unless_ok(session: ExecSession, errors: bytearray, what: str) -> None:
    status = session.status()
    if status is None:
        raise OSError(f"{what}: the connection ended without an exit status")
    if status.exit_code != 0:
        said = errors.decode("utf-8", errors="replace").strip().splitlines()
        detail = said[-1] if said else status.message or f"exit code {status.exit_code}"
        raise OSError(f"{what}: {detail}")


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _pod_waiting(pod: Any) -> str | None:
    """Why a pod's containers wait (ContainerCreating, ImagePullBackOff), or why it is
    not scheduled (the PodScheduled condition's message)."""
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status != "True":
            return str(condition.message or condition.reason or "not scheduled")
    for status in pod.status.container_statuses or []:
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason:
            return str(waiting.reason)
    return None


def pod_port_opener(api: ApiSource, namespace: str, pod: str) -> PortOpener:
    """Streams to a port of pod `namespace/pod` through the portforward API (one
    websocket per connection), for `forwarding()` in launcher/runners/forward.py."""
    made: list[Api] = []

    def open_port(port: int) -> Any:
        from kubernetes.stream import portforward

        if not made:
            made.append(_api_of(api))
        forward = portforward(
            made[0].connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
        )
        return forward.socket(port)

    return open_port
