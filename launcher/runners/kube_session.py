"""One exec of a command in a pod's container over the Kubernetes exec API (a websocket
speaking the channel protocol: 0 stdin, 1 stdout, 2 stderr, 3 the final status, 4 terminal
size, and in v5.channel.k8s.io 255 to close a channel), through the official `kubernetes`
client (`kubernetes.stream.stream`), whose WSClient reads the frames.

Failures are sorted here into two kinds the runner treats differently: an exec that never
started (`ExecNotStarted`: the API unreachable, the pod missing; `retryable` says whether
trying again can help) and a connection lost while the command ran (`ConnectionLost`).
"""

from __future__ import annotations

import ast
import json
import re
import select
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
FRAME_BYTES = 256 << 10  # stdin is sent in websocket frames of at most this size
PUMP_BYTES = 4 << 20  # one read of output returns after this much

# websocket-client reports a refused upgrade as "Handshake status 404 Not Found -+-+- ...".
_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


class ExecNotStarted(Exception):
    """The exec did not start; `retryable` when the cause may pass (network, 5xx)."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class ConnectionLost(Exception):
    """The exec's connection broke before the command's status arrived."""


@dataclass(frozen=True)
class ExecStatus:
    """The command's end as the API reports it on the error channel."""

    exit_code: int
    message: str  # "" for success and plain non-zero exit codes


def parse_status(raw: bytes) -> ExecStatus | None:
    """The exit status in a Status object from the error channel (None when empty):
    Success is 0, NonZeroExitCode gives its ExitCode cause, any other failure (the command
    could not be started) is 126 with the API's message."""
    if not raw.strip():
        return None
    try:
        status = json.loads(raw)
    except ValueError:
        return ExecStatus(126, raw.decode("utf-8", errors="replace").strip())
    if not isinstance(status, dict):
        return ExecStatus(126, str(status))
    if status.get("status") == "Success":
        return ExecStatus(0, "")
    message = str(status.get("message") or "the command failed")
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                try:
                    return ExecStatus(int(cause.get("message", "")), "")
                except ValueError:
                    break
    return ExecStatus(126, message)


def not_started(exc: BaseException) -> ExecNotStarted:
    """What an error raised while opening an exec means (see ExecNotStarted)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        text = str(exc.reason or "")
        match = _HANDSHAKE.search(text)
        status = int(match.group(1)) if match else int(exc.status or 0)
        detail = _status_message(exc.body) or _refusal_message(text) or text or type(exc).__name__
        if status == 0:
            return ExecNotStarted(_network_reason(detail), retryable=True)
        return ExecNotStarted(f"{detail} (HTTP {status})", retryable=status >= 500 or status == 429)
    return ExecNotStarted(_network_reason(str(exc) or type(exc).__name__), retryable=True)


def _refusal_message(text: str) -> str | None:
    """The message of the Status the server answered a refused upgrade with: websocket-client
    puts the body's repr last, after " -+-+- "."""
    _, separator, body = text.rpartition("-+-+- ")
    if not separator:
        return None
    try:
        return _status_message(ast.literal_eval(body.strip()))
    except (ValueError, SyntaxError):
        return None


def _status_message(body: object) -> str | None:
    """The message of a Status object (JSON text or bytes), if `body` is one."""
    if not isinstance(body, str | bytes) or not body:
        return None
    try:
        status = json.loads(body)
    except ValueError:
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else None


def _network_reason(text: str) -> str:
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "timed out" in text:
        return "timed out"
    return text.splitlines()[0] if text else "cannot connect"


def transport_errors() -> tuple[type[BaseException], ...]:
    """The errors a broken websocket raises while reading or writing."""
    from websocket import WebSocketException

    return (OSError, WebSocketException, ssl.SSLError)


class ExecSession:
    """An exec in progress: read its output channel by channel, write its stdin.

    The client's WSClient opens the connection and writes frames; frames are read here
    straight from its websocket, so nothing is kept beyond what the caller has not read
    yet (the WSClient would also keep a copy of all output)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._open = True
        self._error = b""

    @staticmethod
    def open(
        api: Any,
        namespace: str,
        pod: str,
        container: str | None,
        argv: Sequence[str],
        *,
        stdin: bool = False,
        tty: bool = False,
    ) -> ExecSession:
        """Start `argv` in the pod (raises ExecNotStarted)."""
        from kubernetes.stream import stream

        options: dict[str, Any] = {"container": container} if container else {}
        try:
            client = stream(
                api.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=list(argv),
                stdin=stdin,
                stdout=True,
                stderr=not tty,
                tty=tty,
                _preload_content=False,
                binary=True,
                **options,
            )
        except Exception as exc:
            raise not_started(exc) from exc
        return ExecSession(client)

    def __enter__(self) -> ExecSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        return self._open

    def fileno(self) -> int:
        return int(self.client.sock.sock.fileno())

    def _readable(self, timeout: float | None) -> bool:
        sock = self.client.sock.sock
        if sock is None:
            return True  # closed under us: the read says so
        if isinstance(sock, ssl.SSLSocket) and sock.pending() > 0:
            return True  # decrypted bytes wait in the TLS layer, invisible to poll()
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(None if timeout is None else max(timeout, 0.0) * 1000))

    def pump(self, timeout: float | None) -> tuple[bytes, bytes]:
        """Wait up to `timeout` s (None: until something comes) for frames, read those
        that are there (up to PUMP_BYTES), and return what stdout and stderr got. Raises
        ConnectionLost when the connection breaks."""
        from websocket import ABNF

        out, err = bytearray(), bytearray()
        wait = timeout
        try:
            while self._open and len(out) + len(err) < PUMP_BYTES and self._readable(wait):
                wait = 0.0
                opcode, frame = self.client.sock.recv_data_frame(True)
                if opcode == ABNF.OPCODE_CLOSE:
                    self._open = False
                elif opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) and frame.data:
                    self._take(frame.data[0], frame.data[1:], out, err)
        except transport_errors() as exc:
            self._open = False
            self.close()
            raise ConnectionLost(str(exc) or type(exc).__name__) from exc
        return bytes(out), bytes(err)

    def _take(self, channel: int, data: bytes, out: bytearray, err: bytearray) -> None:
        if channel == STDOUT:
            out += data
        elif channel == STDERR:
            err += data
        elif channel == ERROR:
            self._error += data
        # CLOSE (v5: the server closed one of its channels) needs nothing: the end of the
        # exec is the websocket's close.

    def write(self, channel: int, data: bytes) -> None:
        """Send `data` on `channel` (frames of FRAME_BYTES); raises ConnectionLost."""
        try:
            for start in range(0, len(data), FRAME_BYTES):
                self.client.write_channel(channel, data[start : start + FRAME_BYTES])
        except transport_errors() as exc:
            raise ConnectionLost(str(exc) or type(exc).__name__) from exc

    def close_stdin(self) -> None:
        """Tell the command its stdin ended (v5 protocol; older ones ignore this)."""
        close = getattr(self.client, "close_channel", None)
        if close is not None:
            try:
                close(STDIN)
            except transport_errors() as exc:
                raise ConnectionLost(str(exc) or type(exc).__name__) from exc

    def drain(self, on_output: Callable[[bytes, bytes], None] | None = None) -> None:
        """Read until the server closes the exec (output to `on_output`)."""
        while self._open:
            out, err = self.pump(None)
            if on_output is not None and (out or err):
                on_output(out, err)

    def status(self) -> ExecStatus | None:
        """The command's status once the exec is over (None: it never came)."""
        return parse_status(self._error)

    def close(self) -> None:
        self._open = False
        try:
            self.client.close()
        except transport_errors():
            pass


class StdinWriter:
    """A file to write the exec's stdin to (sent in frames of FRAME_BYTES); what the
    command says on stderr meanwhile is kept in `errors`. Raises ConnectionLost once the
    exec is over (the command ended without reading everything)."""

    def __init__(self, session: ExecSession) -> None:
        self.session = session
        self.errors = bytearray()
        self._buffer = bytearray()

    def write(self, data: bytes) -> int:
        self._buffer += data
        if len(self._buffer) >= FRAME_BYTES:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if not self.session.is_open:
            raise ConnectionLost("the command ended before reading all its input")
        data, self._buffer = bytes(self._buffer), bytearray()
        self.session.write(STDIN, data)
        _, err = self.session.pump(0)
        self.errors += err


class StdoutReader:
    """The exec's stdout as a file to read; its stderr is kept in `errors`."""

    def __init__(self, session: ExecSession) -> None:
        self.session = session
        self.errors = bytearray()
        self._buffer = bytearray()

    def read(self, size: int = -1) -> bytes:
        """`size` bytes (fewer only at the end; -1: all until the end)."""
        while (size < 0 or len(self._buffer) < size) and self.session.is_open:
            out, err = self.session.pump(None)
            self._buffer += out
            self.errors += err
        if size < 0:
            size = len(self._buffer)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data
