"""The parts of the Kubernetes exec runner that need no server: the exit status read from
the error channel, how a failed exec is judged (try again or not), the report of the
command's process group ahead of its output, and the login shell shared with SSH."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.runners.kube_session import not_started, parse_status
from launcher.runners.shell import PID_MARK, PidReport, login_shell_argv
from launcher.runners.ssh import SSHRunner, SSHTarget

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client.exceptions import ApiException  # noqa: E402


def status(**fields: object) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, **fields}).encode()


@pytest.mark.parametrize(
    ("raw", "code", "message"),
    [
        (status(status="Success"), 0, ""),
        (
            status(
                status="Failure",
                reason="NonZeroExitCode",
                message="command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
                details={"causes": [{"reason": "ExitCode", "message": "3"}]},
            ),
            3,
            "",
        ),
        (
            status(status="Failure", reason="InternalError", message='exec: "nope": not found'),
            126,
            'exec: "nope": not found',
        ),
        (b"not json", 126, "not json"),
    ],
)
def test_exit_status_from_the_error_channel(raw: bytes, code: int, message: str) -> None:
    parsed = parse_status(raw)
    assert parsed is not None
    assert (parsed.exit_code, parsed.message) == (code, message)


def test_no_status_is_none() -> None:
    assert parse_status(b"") is None


def handshake(code: int, text: str, message: str) -> ApiException:
    body = json.dumps({"kind": "Status", "message": message, "code": code}).encode()
    return ApiException(
        status=0, reason=f"Handshake status {code} {text} -+-+- {{}} -+-+- {body!r}"
    )


@pytest.mark.parametrize(
    ("exc", "retryable", "reason"),
    [
        (handshake(404, "Not Found", 'pods "x" not found'), False, 'pods "x" not found (HTTP 404)'),
        (handshake(403, "Forbidden", "forbidden"), False, "forbidden (HTTP 403)"),
        (handshake(503, "Service Unavailable", "try later"), True, "try later (HTTP 503)"),
        (
            ApiException(status=0, reason="[Errno 111] Connection refused"),
            True,
            "connection refused",
        ),
        (ConnectionRefusedError(111, "Connection refused"), True, "connection refused"),
        (ApiException(status=0, reason="timed out"), True, "timed out"),
    ],
)
def test_a_failed_exec_is_judged(exc: BaseException, retryable: bool, reason: str) -> None:
    judged = not_started(exc)
    assert (judged.retryable, judged.reason) == (retryable, reason)


def test_the_process_report_is_read_across_pieces() -> None:
    start = PidReport()
    data = PID_MARK + b"42\nfirst line\nsecond"
    out = b"".join(start.feed(data[i : i + 3]) for i in range(0, len(data), 3))
    assert (start.reported, start.pid, out) == (True, 42, b"first line\nsecond")


def test_output_before_the_report_is_output() -> None:
    start = PidReport()
    assert start.feed(b"\x1elaunch") == b""  # could still be the report
    assert start.feed(b"ed elsewhere\n") == b"\x1elaunched elsewhere\n"
    assert (start.reported, start.pid) == (False, None)
    assert start.feed(PID_MARK + b"7\nmine") == b"mine"
    assert (start.reported, start.pid) == (True, 7)


def test_the_login_shell_is_the_one_ssh_runs(tmp_path: Path) -> None:
    env = {"A": 'it\'s a "value" $x', "B": ""}
    argv = login_shell_argv("echo $A", {"BASE": "1"}, env)
    assert argv == [
        "env",
        "BASE=1",
        *(f"{k}={v}" for k, v in env.items()),
        "bash",
        "--login",
        "-c",
        "-i",
        "echo $A",
    ]
    ssh = SSHRunner(SSHTarget("127.0.0.2", "u"), None, tmp_path / "log", {"BASE": "1"})  # type: ignore[arg-type]
    assert ssh.command_line("echo $A", env) == (
        "env BASE=1 'A=it'\"'\"'s a \"value\" $x' B= bash --login -c -i 'echo $A'"
    )
    with pytest.raises(ValueError, match="not valid"):
        login_shell_argv("true", {}, {"1BAD": "x"})
