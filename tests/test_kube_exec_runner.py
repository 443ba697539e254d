"""KubeExecRunner (launcher/runners/kube_exec.py) against the fake Kubernetes API server and
its kubelet (fakes/kube): pods are real process trees, reached only through the
official client's exec and port-forward calls. Commands (exit codes, environment, output,
timeouts, dropped connections, a terminal), copies (rsync's tree, modes, symlinks,
excludes, 20 MB), readiness and port forwarding.

Root only (the fake pods need namespaces); loopback addresses only.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import os
import pty
import shutil
import socket
import struct
import termios
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher import secret_env
from launcher.runners.forward import forwarding
from launcher.runners.kube_exec import KubeExecRunner, pod_port_opener
from tests.test_kube_copy import make_source, rsync, shape

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client as kube_client  # noqa: E402
from kubernetes.config import new_client_from_config  # noqa: E402

from fakes.kube.kubelet import FakeKubelet  # noqa: E402
from fakes.kube.scheduler import NodeSpec  # noqa: E402
from fakes.kube.server import KubeServer  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nsenter") is None,
    reason="fake pods need root (PID and mount namespaces) and nsenter",
)
SLEEPER = ["/bin/bash", "-c", "--", "trap : TERM INT; sleep infinity & wait;"]


def poll(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


class Proxy:
    """A TCP relay on 127.0.0.1 in front of the API server whose connections a test can
    cut (a dropped network) and which can refuse new ones for a while."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.refusing = threading.Event()
        self.refused = 0
        self.cut_after: int | None = None  # cut every connection once this much went up
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if self.refusing.is_set():
                self.refused += 1
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()  # a reset, as from a network that drops
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._open += [conn, upstream]
            for a, b, up in ((conn, upstream, True), (upstream, conn, False)):
                threading.Thread(target=self._pipe, args=(a, b, up), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, up: bool) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
                if up and self.cut_after is not None:
                    self.cut_after -= len(data)
                    if self.cut_after <= 0:
                        self.cut_after = None
                        self.cut()
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:  # shut down first: that wakes the relay threads blocked on it
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.server.close()
        self.cut()


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    holder: list[KubeServer] = []

    def account_files(namespace: str, account: str) -> dict[str, bytes]:
        made = holder[0]
        token = made.mint_token(namespace, account)
        return {"token": token.encode(), "ca.crt": made.ca_pem, "namespace": namespace.encode()}

    kubelet = FakeKubelet(
        service_account_files=account_files,
        host_ip=lambda node: "127.0.0.1",
        restart_backoff_s=0.05,
    )
    with KubeServer(nodes=[NodeSpec("node-1")], kubelet=kubelet) as made:
        holder.append(made)
        try:
            yield made
        finally:
            kubelet.close()


@pytest.fixture(scope="module")
def core(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    return kube_client.CoreV1Api(new_client_from_config(config_file=str(path)))  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def ns(core: Any) -> str:
    name = "runner-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": name}})
    return name


def start_pod(core: Any, ns: str, name: str, **container: Any) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "debian", "command": SLEEPER, **container}]
        },
    }
    core.create_namespaced_pod(ns, body)


def running(core: Any, ns: str, name: str) -> None:
    poll(lambda: core.read_namespaced_pod(name, ns).status.phase == "Running", what=name)


@pytest.fixture(scope="module")
def pod(core: Any, ns: str) -> str:
    start_pod(core, ns, "head")
    running(core, ns, "head")
    return "head"


@pytest.fixture
def runner(core: Any, ns: str, pod: str, tmp_path: Path) -> KubeExecRunner:
    made = KubeExecRunner(core, ns, pod, None, {"BASE": "from base"}, tmp_path / "node.log")
    made.backoff_s = 0.01
    return made


@pytest.fixture
def proxy(server: KubeServer) -> Iterator[Proxy]:
    made = Proxy(("127.0.0.1", server.port))
    yield made
    made.close()


def api_through(proxy: Proxy, server: KubeServer, tmp_path: Path) -> Any:
    """An API client whose kubeconfig names the proxy as the server."""
    path = tmp_path / "proxied-config"
    path.write_text(server.kubeconfig().replace(server.url, proxy.url))
    return kube_client.CoreV1Api(new_client_from_config(config_file=str(path)))  # type: ignore[no-untyped-call]


# -- commands ---------------------------------------------------------------------------


def test_run_gives_exit_codes_output_and_environment(runner: KubeExecRunner) -> None:
    lines: list[str] = []
    value = 'it\'s $HOME; "quoted" `x`'
    result = runner.run(
        'echo "$GREETING"; echo "$BASE"; echo to-stderr >&2; exit 3',
        {"GREETING": value},
        echo=lines.append,
    )
    assert result.exit_code == 3
    assert [line for line in lines if line != "to-stderr"] == [value, "from base"]
    assert "to-stderr" in lines  # stdout and stderr are channels of their own: no order
    assert result.output_tail.splitlines() == lines
    log = runner.log_path.read_text()
    assert "$ echo" in log and value in log and "to-stderr" in log
    assert runner.run("true").exit_code == 0


def test_stdin_reaches_the_command(runner: KubeExecRunner) -> None:
    data = secret_env.script({"SECRET": "stdin-only-value"})
    lines: list[str] = []
    command = secret_env.LOAD_FROM_STDIN + 'echo "${#SECRET}"'
    assert runner.run(command, stdin=data, echo=lines.append, timeout=30).ok
    assert lines == ["16"]
    assert "stdin-only-value" not in runner.log_path.read_text()


def test_run_is_a_login_shell_with_the_pods_home(runner: KubeExecRunner) -> None:
    lines: list[str] = []
    assert runner.run('echo "$HOME" "$0"; shopt -q login_shell && echo login', echo=lines.append).ok
    home, shell = lines[0].split()
    assert home == runner.remote_path("~") and shell == "bash"
    assert lines[1] == "login"


def test_run_rejects_a_bad_variable_name(runner: KubeExecRunner) -> None:
    with pytest.raises(ValueError, match="not valid"):
        runner.run("true", {"BAD-NAME": "x"})


def test_output_is_echoed_as_it_comes(runner: KubeExecRunner) -> None:
    """The command waits for a file that the echo of its first line makes: it can end only
    if that line came while it ran."""
    seen: list[str] = []

    def on_line(line: str) -> None:
        seen.append(line)
        if line == "first":
            assert runner.capture(["touch", "/tmp/go-on"])[0] == 0

    command = (
        "rm -f /tmp/go-on; echo first; until [ -e /tmp/go-on ]; do sleep 0.01; done; echo second"
    )
    result = runner.run(command, echo=on_line, timeout=30)
    assert result.ok
    assert seen == ["first", "second"]


def test_a_timeout_kills_the_command_tree_in_the_pod(runner: KubeExecRunner) -> None:
    started = time.monotonic()
    result = runner.run("sleep 301 & sleep 302 | cat; wait", timeout=1.0)
    assert result.exit_code == 124
    assert "stopped after 1 s" in result.output_tail
    assert time.monotonic() - started < 10
    left: list[str] = []
    assert runner.run("ps -eo args | grep -c '^sleep 30[12]$'", echo=left.append).exit_code == 1
    assert left == ["0"]


def test_the_runner_learns_setsid_once_and_a_timeout_still_kills_the_tree(
    runner: KubeExecRunner,
) -> None:
    assert runner.run("true", timeout=30).ok
    assert runner._setsid is True  # the pod has setsid: later commands start without asking
    result = runner.run("sleep 303 & sleep 304 | cat; wait", timeout=1.0)
    assert result.exit_code == 124
    left: list[str] = []
    assert runner.run("ps -eo args | grep -c '^sleep 30[34]$'", echo=left.append).exit_code == 1
    assert left == ["0"]


def test_a_command_that_cannot_start_is_tried_again(
    server: KubeServer, proxy: Proxy, ns: str, pod: str, tmp_path: Path
) -> None:
    runner = KubeExecRunner(
        api_through(proxy, server, tmp_path), ns, pod, "main", {}, tmp_path / "log"
    )
    runner.backoff_s = 0.01
    proxy.refusing.set()
    result = runner.run("echo hi")
    assert result.exit_code == 255
    assert proxy.refused == runner.attempts
    assert "attempt 3 of 3" in runner.log_path.read_text()

    proxy.refused = 0
    runner.backoff_s = 0.3
    threading.Timer(0.1, proxy.refusing.clear).start()  # the network comes back
    lines: list[str] = []
    assert runner.run("echo hi", echo=lines.append).ok
    assert lines == ["hi"] and proxy.refused >= 1


def test_a_connection_lost_while_the_command_runs_gives_255(
    server: KubeServer, proxy: Proxy, ns: str, pod: str, tmp_path: Path
) -> None:
    runner = KubeExecRunner(
        api_through(proxy, server, tmp_path), ns, pod, None, {}, tmp_path / "log"
    )

    def on_line(line: str) -> None:
        if line == "started":
            proxy.cut()

    result = runner.run("echo started; sleep 20; echo not-here", echo=on_line)
    assert result.exit_code == 255
    assert "lost" in result.output_tail
    assert "not-here" not in runner.log_path.read_text().splitlines()


def test_a_copy_whose_connection_drops_is_done_again(
    server: KubeServer, proxy: Proxy, ns: str, pod: str, tmp_path: Path
) -> None:
    api = api_through(proxy, server, tmp_path)
    runner = KubeExecRunner(api, ns, pod, None, {}, tmp_path / "log")
    runner.backoff_s = 0.01
    (tmp_path / "big.bin").write_bytes(os.urandom(8 << 20))
    runner.remote_path("~")  # the home asked before the network breaks
    proxy.cut_after = 2 << 20  # mid-way through the first attempt's tar
    runner.put(str(tmp_path / "big.bin"), "~/dropped/")
    assert "connection lost" in runner.log_path.read_text()
    runner.get("~/dropped/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == (tmp_path / "big.bin").read_bytes()


def test_copies_over_the_v4_protocol_without_closing_stdin(
    runner: KubeExecRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without v5.channel.k8s.io (before Kubernetes 1.30) cannot be told that
    stdin ended: tar stops at the archive's end anyway."""
    from kubernetes.stream import ws_client

    monkeypatch.setattr(ws_client, "V5_CHANNEL_PROTOCOL", "v0.not-offered")
    with runner.open(["true"]) as session:
        assert session.client.subprotocol == "v4.channel.k8s.io"
    make_source(tmp_path)
    rsync(f"{tmp_path}/src", f"{tmp_path}/expected/")
    runner.put(f"{tmp_path}/src", "~/v4/")
    runner.get("~/v4/src", f"{tmp_path}/back/")
    assert shape(tmp_path / "back") == shape(tmp_path / "expected")


def test_exit_status_of_a_missing_program_and_of_a_signal(runner: KubeExecRunner) -> None:
    assert runner.run("no-such-program-here").exit_code == 127
    assert runner.run("kill -KILL $$").exit_code == 137


def test_a_terminal_session(runner: KubeExecRunner) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    outcome: list[Any] = []
    # The size is read after a line of input: by then the size sent at the start came.
    argv = ["bash", "-c", 'read -r line; stty size; echo "got:$line"; exit 7']
    thread = threading.Thread(target=lambda: outcome.append(runner.terminal(argv, slave, slave)))
    thread.start()
    seen = bytearray()

    def read_until(text: bytes) -> bool:
        with contextlib.suppress(BlockingIOError):
            os.set_blocking(master, False)
            seen.extend(os.read(master, 4096))
        return text in seen

    poll(lambda: not termios.tcgetattr(slave)[3] & termios.ICANON, what="raw mode")
    os.write(master, b"hello\r")
    poll(lambda: read_until(b"got:hello"), what="the echo of the input")
    assert b"33 101" in seen  # the terminal's size in the pod
    thread.join(20)
    os.close(master)
    os.close(slave)
    assert outcome[0].exit_code == 7


# -- readiness --------------------------------------------------------------------------


def test_check_ready(core: Any, ns: str, pod: str, runner: KubeExecRunner, tmp_path: Path) -> None:
    assert runner.check_ready() is None
    missing = KubeExecRunner(core, ns, "no-such-pod", None, {}, tmp_path / "log")
    assert missing.check_ready() == f"pod {ns}/no-such-pod not found"
    result = missing.run("true")  # not tried again: waiting cannot make the pod
    assert result.exit_code == 255 and "not found" in result.output_tail
    assert "attempt 2" not in missing.log_path.read_text()
    start_pod(core, ns, "too-big", resources={"requests": {"cpu": "500"}})
    pending = KubeExecRunner(core, ns, "too-big", "main", {}, tmp_path / "log")
    why = pending.check_ready()
    assert why is not None and why.startswith(f"pod {ns}/too-big is Pending")
    assert "\n" not in why


def test_check_ready_without_the_api(ns: str, tmp_path: Path) -> None:
    config = kube_client.Configuration(host="https://127.0.0.1:1")
    api = kube_client.CoreV1Api(kube_client.ApiClient(config))
    why = KubeExecRunner(lambda: api, ns, "head", None, {}, tmp_path / "log").check_ready()
    assert why is not None and why.startswith("cannot reach the Kubernetes API")
    assert "\n" not in why


# -- files ------------------------------------------------------------------------------


def test_put_and_get_make_rsyncs_trees(runner: KubeExecRunner, tmp_path: Path) -> None:
    make_source(tmp_path)
    (tmp_path / "src" / "big.bin").write_bytes(os.urandom(20 << 20))
    excludes = ("*.log", "/src/sub/deeper")
    expected = tmp_path / "expected"
    rsync(f"{tmp_path}/src", f"{expected}/", excludes)

    started = time.perf_counter()
    runner.put(f"{tmp_path}/src", "~/copies/", excludes=excludes)
    put_s = time.perf_counter() - started
    back = tmp_path / "back"
    started = time.perf_counter()
    runner.get("~/copies/src", f"{back}/")
    get_s = time.perf_counter() - started
    assert shape(back) == shape(expected)
    assert (back / "src" / "big.bin").read_bytes() == (tmp_path / "src" / "big.bin").read_bytes()
    print(f"\nput 20 MB tree: {put_s:.2f} s, get: {get_s:.2f} s")


def test_put_of_a_file_and_of_a_directorys_contents(runner: KubeExecRunner, tmp_path: Path) -> None:
    make_source(tmp_path)
    runner.put(f"{tmp_path}/one.txt", "~/files/renamed.txt")
    runner.put(f"{tmp_path}/src/", "~/contents", excludes=("sub",))
    lines: list[str] = []
    runner.run(
        "cd ~ && stat -c '%n %a' files/renamed.txt contents/run.sh && ls contents",
        echo=lines.append,
    )
    assert lines[:2] == ["files/renamed.txt 640", "contents/run.sh 751"]
    assert "sub" not in lines[2:] and "a.txt" in lines[2:]


def test_copy_errors_are_one_line(runner: KubeExecRunner, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="no such file or directory"):
        runner.get("~/nothing-here", str(tmp_path / "x"))
    with pytest.raises(OSError, match="no such file"):
        runner.put(str(tmp_path / "nothing-here"), "~/x")
    (tmp_path / "f").write_text("f")
    with pytest.raises(OSError, match="copying"):
        runner.put(str(tmp_path / "f"), "/proc/not-writable/f")


def test_remote_path_expands_home_once(runner: KubeExecRunner) -> None:
    home = runner.remote_path("~")
    assert home.startswith("/") and runner.remote_path("~/a/b") == home + "/a/b"
    assert runner.remote_path("/abs") == "/abs"


def test_exec_round_trip(runner: KubeExecRunner) -> None:
    runner.run("true")
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        assert runner.run("true").ok
        timings.append(time.perf_counter() - started)
    print(f"\nexec round trip of `true`: best {min(timings) * 1000:.0f} ms")


# -- port forwarding --------------------------------------------------------------------


def free_port(ip: str = "127.0.0.1") -> int:
    """A port nothing listens on at `ip` now (nor on every address: such a socket would
    take `ip`'s port too), else one free on 127.0.0.1 where this machine cannot bind `ip`."""
    with socket.socket() as sock:
        try:
            sock.bind((ip, 0))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_port_forward_reaches_a_server_in_the_pod(
    core: Any, ns: str, pod: str, runner: KubeExecRunner
) -> None:
    ip = core.read_namespaced_pod(pod, ns).status.pod_ip
    remote = free_port(ip)
    serve = (
        f"cd /tmp && echo served > index.txt && exec python3 -m http.server {remote} --bind {ip}"
    )
    server = threading.Thread(target=runner.run, args=(serve,), kwargs={"timeout": 60}, daemon=True)
    server.start()
    local = free_port()
    with forwarding([(local, remote)], pod_port_opener(core, ns, pod)):

        def fetch() -> bytes | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{local}/index.txt", timeout=5) as r:
                    return bytes(r.read())
            except (OSError, http.client.HTTPException):
                return None

        assert poll(fetch, what="the pod's http server") == b"served\n"
        assert fetch() == b"served\n"  # a second connection, a second websocket
    runner.run(f"pkill -f 'http.server {remote}'")
    server.join(20)
