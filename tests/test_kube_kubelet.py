"""The fake kubelet (fakes/kube/kubelet.py) on its own: pods as real process trees,
driven through the official `kubernetes` client's exec, port-forward and log calls against
a stub API server (a few routes that hand one pod to the kubelet).

Root only (namespaces, mounts); loopback addresses only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, WSMsgType, web

from fakes.kube.kubelet import FakeKubelet
from fakes.kube.kubelet_api import Pod
from fakes.kube.pod_runtime import PODS_DIR

kubernetes = pytest.importorskip("kubernetes")
from kubernetes.client import ApiClient, Configuration, CoreV1Api  # noqa: E402
from kubernetes.stream import portforward, stream  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nsenter") is None,
    reason="fake pods need root (PID and mount namespaces) and nsenter",
)
NS = "default"
SA_FILES = {"token": b"fake-token", "ca.crt": b"fake-ca", "namespace": NS.encode()}
SLEEPER = ["/bin/bash", "-c", "--", "trap : TERM INT; sleep infinity & wait;"]

API_VERSIONS = {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
API_GROUPS = {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
API_RESOURCES = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "pods",
            "singularName": "pod",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get"],
            "shortNames": ["po"],
        },
        {
            "name": "pods/exec",
            "singularName": "",
            "namespaced": True,
            "kind": "PodExecOptions",
            "verbs": ["create", "get"],
        },
        {
            "name": "pods/log",
            "singularName": "",
            "namespaced": True,
            "kind": "Pod",
            "verbs": ["get"],
        },
        {
            "name": "pods/portforward",
            "singularName": "",
            "namespaced": True,
            "kind": "PodPortForwardOptions",
            "verbs": ["create", "get"],
        },
    ],
}


async def _answer(body: dict[str, Any], request: web.Request) -> web.Response:
    return web.json_response(body)


def wait_for(check: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """Poll `check` until it returns something true (returned), failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class Sink:
    """What the server would store: the last status reported for each pod."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}

    def update_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self.lock:
            self.statuses[name] = {**self.statuses.get(name, {}), **status}
            self.history.setdefault(name, []).append(status)

    def status(self, name: str) -> dict[str, Any]:
        with self.lock:
            return dict(self.statuses.get(name, {}))


class Cluster:
    """The kubelet, a stub API server routing pods' subresources to it, and a client."""

    def __init__(self) -> None:
        self.sink = Sink()
        self.kubelet = FakeKubelet(
            service_account_files=lambda ns, account: {**SA_FILES, "namespace": ns.encode()},
            service_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"},
            host_ip=lambda node: "127.0.0.1",
            restart_backoff_s=0.05,
        )
        self.kubelet.bind(self.sink)
        self.pods: dict[str, Pod] = {}
        self.closing: list[Path] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner: web.AppRunner | None = None
        self.port = asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(10)
        config = Configuration(host=f"http://127.0.0.1:{self.port}")
        self.api = CoreV1Api(ApiClient(config))

    async def _serve(self) -> int:
        app = web.Application()
        path = "/api/v1/namespaces/{ns}/pods/{name}/{sub:exec|attach|portforward|log}"
        app.router.add_route("*", path, self._route)
        # Just enough of the API for kubectl to find a pod.
        for route, body in (
            ("/api", API_VERSIONS),
            ("/apis", API_GROUPS),
            ("/api/v1", API_RESOURCES),
        ):
            app.router.add_get(route, functools.partial(_answer, body))
        app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get_pod)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def _get_pod(self, request: web.Request) -> web.Response:
        pod = self.pods.get(request.match_info["name"])
        if pod is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        body = {
            "kind": "Pod",
            "apiVersion": "v1",
            **pod,
            "status": self.sink.status(pod["metadata"]["name"]),
        }
        return web.json_response(body)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        pod = self.pods.get(request.match_info["name"])
        if pod is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        handler = getattr(self.kubelet, request.match_info["sub"])
        response: web.StreamResponse = await handler(request, pod)
        return response

    def run(self, name: str, command: list[str], **spec: Any) -> Pod:
        container = {"name": "main", "image": "none", "command": command}
        container.update(spec.pop("container", {}))
        pod = {
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": {"containers": [container], "nodeName": "node-1", **spec},
        }
        self.pods[name] = pod
        self.kubelet.run_pod(pod, "node-1")
        return pod

    def running(self, name: str, command: list[str] = SLEEPER, **spec: Any) -> Pod:
        pod = self.run(name, command, **spec)
        wait_for(lambda: self.sink.status(name).get("phase") == "Running", what=f"{name} Running")
        return pod

    def stop(self, name: str, grace: float = 5) -> None:
        self.kubelet.stop_pod(self.pods.pop(name), grace)

    def exec(self, name: str, command: list[str], **options: Any) -> Any:
        options = {"stderr": True, "stdin": False, "stdout": True, "tty": False, **options}
        return stream(
            self.api.connect_get_namespaced_pod_exec,
            name,
            NS,
            command=command,
            _preload_content=False,
            **options,
        )

    def run_command(self, name: str, script: str) -> tuple[int, str, str]:
        """Run `sh -c script` in the pod: (exit code, stdout, stderr)."""
        client = self.exec(name, ["sh", "-c", script])
        client.run_forever(timeout=30)
        out, err = client.read_stdout() or "", client.read_stderr() or ""
        return client.returncode, out, err

    def kubectl(self, *args: str, **options: Any) -> subprocess.CompletedProcess[bytes]:
        """Run the real kubectl against the stub server."""
        config = self.kubeconfig()
        env = {**os.environ, "KUBECONFIG": str(config)}
        command = ["kubectl", *args]
        return subprocess.run(
            command, check=False, env=env, capture_output=True, timeout=60, **options
        )

    def kubeconfig(self) -> Path:
        path = Path(tempfile.gettempdir()) / f"kubelet-test-kubeconfig-{os.getpid()}"
        if not path.exists():
            path.write_text(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "clusters": [
                            {"name": "c", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}
                        ],
                        "users": [{"name": "u", "user": {"token": "t"}}],
                        "contexts": [
                            {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": NS}}
                        ],
                        "current-context": "x",
                    }
                )
            )
            self.closing.append(path)
        return path

    def close(self) -> None:
        for path in self.closing:
            path.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            for name in list(self.pods):
                self.stop(name, 0)
        self.kubelet.close()
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    made = Cluster()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def pods(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, with every pod a test made stopped afterwards."""
    try:
        yield cluster
    finally:
        for name in list(cluster.pods):
            cluster.stop(name, 0)


def pid_namespace_members(pid_ns: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "pid") == pid_ns:
                    found.append(int(entry.name))
    return found


# -- exec ---------------------------------------------------------------------------------


def test_exec_output_and_exit_code(pods: Cluster) -> None:
    pods.running("p-exit")
    code, out, err = pods.run_command("p-exit", "echo hi; echo oops >&2; exit 3")
    assert (code, out, err) == (3, "hi\n", "oops\n")
    assert pods.run_command("p-exit", "true") == (0, "", "")
    # The preloaded form: stdout and stderr as one string.
    text = stream(
        pods.api.connect_get_namespaced_pod_exec,
        "p-exit",
        NS,
        command=["echo", "preloaded"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert text == "preloaded\n"
    code, _, err = pods.run_command("p-exit", "exec no-such-command")
    assert code == 127


def test_exec_environment_and_files(pods: Cluster) -> None:
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {
            "name": "MY_CPU_REQUEST",
            "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}},
        },
        {
            "name": "MY_MEMORY_LIMIT",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
        {"name": "GREETING", "value": "hello $(POD_NAME)"},
    ]
    resources = {"requests": {"cpu": "1500m"}, "limits": {"memory": "2Gi"}}
    pod = pods.running("p-env", container={"env": env, "resources": resources})
    ip = pods.kubelet.pod_ip(pod)
    assert ip is not None and ip.startswith("127.18.")
    assert pods.sink.status("p-env")["podIP"] == ip
    script = (
        'echo "$POD_IP $POD_NAME $POD_NS $MY_CPU_REQUEST $MY_MEMORY_LIMIT"; echo "$GREETING"; '
        "echo $KUBERNETES_SERVICE_HOST; hostname; echo $HOME; command -v python3; "
        "cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo; pwd"
    )
    code, out, err = pods.run_command("p-env", script)
    assert code == 0, err
    venv_python = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "python3"
    lines = out.splitlines()
    assert lines[:5] == [f"{ip} p-env {NS} 2 2048", "hello p-env", "127.0.0.1", "p-env", "/root"]
    assert lines[5] == str(venv_python) or lines[5].endswith("/bin/python3")
    assert lines[6:] == ["fake-token", "/"]
    # /root and /tmp are the pod's own.
    assert pods.run_command("p-env", "echo x > /tmp/mine; echo y > ~/home-file")[0] == 0
    root = pods.kubelet.pod_dir(pod)
    assert root is not None
    assert (root / "tmp" / "mine").read_text() == "x\n"
    assert (root / "home" / "home-file").read_text() == "y\n"
    assert not Path("/tmp/mine").exists()


def _exec_binary(pods: Cluster, name: str, command: list[str], data: bytes) -> tuple[int, bytes]:
    """Run `command` with `data` as its stdin (written from a thread, as a command may write
    before it has read everything), returning its exit code and stdout."""
    client = pods.exec(name, command, stdin=True, binary=True)

    def write() -> None:
        view = memoryview(data)
        for start in range(0, len(data), 1 << 20):
            client.write_stdin(bytes(view[start : start + (1 << 20)]))
        client.close_channel(0)

    writer = threading.Thread(target=write)
    writer.start()
    out = io.BytesIO()
    while client.is_open():
        client.update(timeout=5)
        out.write(client.read_stdout() or b"")
    out.write(client.read_stdout() or b"")
    writer.join(30)
    return client.returncode, out.getvalue()


def test_exec_stdin_binary_tar(pods: Cluster) -> None:
    pods.running("p-stdin")
    payload = io.BytesIO()
    blob = os.urandom(3 << 20) + bytes(range(256)) * 16
    with tarfile.open(fileobj=payload, mode="w") as tar:
        info = tarfile.TarInfo("dir/blob.bin")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    code, out = _exec_binary(
        pods,
        "p-stdin",
        ["sh", "-c", "mkdir -p /tmp/x && tar xf - -C /tmp/x && sha256sum /tmp/x/dir/blob.bin"],
        payload.getvalue(),
    )
    assert code == 0
    assert out.split()[0].decode() == hashlib.sha256(blob).hexdigest()
    # And back: binary stdout, byte for byte.
    code, out = _exec_binary(pods, "p-stdin", ["cat", "/tmp/x/dir/blob.bin"], b"")
    assert code == 0 and out == blob


def test_exec_tty_and_resize(pods: Cluster) -> None:
    pods.running("p-tty")
    client = pods.exec(
        "p-tty",
        ["sh", "-c", "stty size; read line; stty size; echo got $line"],
        stdin=True,
        tty=True,
        stderr=False,
    )
    first = wait_for(lambda: (client.update(timeout=1), client.peek_stdout())[1], what="first stty")
    assert first.split() == ["24", "80"]
    client.read_stdout()
    client.write_channel(4, json.dumps({"Width": 132, "Height": 43}))
    client.write_stdin("hello\n")
    client.run_forever(timeout=20)
    output = client.read_stdout()
    assert "43 132" in output and "got hello" in output
    assert client.returncode == 0


def test_exec_older_protocols(pods: Cluster) -> None:
    """v4 (no CLOSE channel: stdin ends with the connection is not testable, so no stdin)
    and base64.channel.k8s.io (text messages, channel digit, base64 data; error channel as
    plain text before v4), with a plain websocket client."""
    pods.running("p-proto")
    url = f"http://127.0.0.1:{pods.port}/api/v1/namespaces/{NS}/pods/p-proto/exec"
    query = [
        ("command", "sh"),
        ("command", "-c"),
        ("command", "printf 'a\\0b'; exit 2"),
        ("stdout", "true"),
    ]

    async def talk(protocol: str) -> list[tuple[int, bytes]]:
        got = []
        async with (
            ClientSession() as session,
            session.ws_connect(url, params=query, protocols=[protocol]) as ws,
        ):
            assert ws.protocol == protocol
            async for message in ws:
                if message.type == WSMsgType.BINARY:
                    got.append((message.data[0], message.data[1:]))
                elif message.type == WSMsgType.TEXT:
                    got.append(
                        (ord(message.data[0]) - ord("0"), base64.b64decode(message.data[1:]))
                    )
        return [(channel, data) for channel, data in got if data]

    got = asyncio.run(talk("v4.channel.k8s.io"))
    assert got[0] == (1, b"a\0b")
    assert json.loads(got[1][1])["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]
    got = asyncio.run(talk("base64.channel.k8s.io"))
    assert got[0] == (1, b"a\0b")
    assert got[1][0] == 3 and b"exit code" in got[1][1]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_kubectl_exec_cp_logs(pods: Cluster, tmp_path: Path) -> None:
    """kubectl 1.32 speaks v5.channel.k8s.io over a websocket for exec and cp."""
    pods.running("p-kubectl", ["sh", "-c", "echo from-main; exec sleep infinity"])
    result = pods.kubectl("exec", "p-kubectl", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (result.returncode, result.stdout, result.stderr) == (
        7,
        b"out\n",
        b"err\ncommand terminated with exit code 7\n",
    )
    result = pods.kubectl("exec", "-i", "p-kubectl", "--", "wc", "-c", input=b"x" * 100000)
    assert (result.returncode, result.stdout) == (0, b"100000\n")
    source = tmp_path / "tree"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "data.bin").write_bytes(bytes(range(256)) * 1000)
    assert pods.kubectl("cp", str(source), "p-kubectl:/tmp/tree").returncode == 0
    result = pods.kubectl("exec", "p-kubectl", "--", "sha256sum", "/tmp/tree/sub/data.bin")
    assert result.stdout.split()[0].decode() == hashlib.sha256(bytes(range(256)) * 1000).hexdigest()
    back = tmp_path / "back"
    assert pods.kubectl("cp", "p-kubectl:/tmp/tree", str(back)).returncode == 0
    assert (back / "sub" / "data.bin").read_bytes() == bytes(range(256)) * 1000
    result = pods.kubectl("logs", "p-kubectl")
    assert (result.returncode, result.stdout) == (0, b"from-main\n")
    # Port-forward tunnels SPDY in its websocket, which this kubelet does not speak.
    result = pods.kubectl("exec", "p-kubectl", "-c", "nope", "--", "true")
    assert result.returncode == 1 and b"nope" in result.stderr


# -- isolation and lifecycle -------------------------------------------------------------


def test_pods_see_only_their_own_processes(pods: Cluster) -> None:
    pods.running("p-iso-a")
    pods.running("p-iso-b")
    assert pods.run_command("p-iso-a", "setsid sleep 1234 > /dev/null 2>&1 < /dev/null &")[0] == 0
    code, out, _ = pods.run_command("p-iso-a", "ps -eo pid,args")
    assert code == 0 and "sleep 1234" in out
    assert out.splitlines()[1].split()[0] == "1"  # the container's command is PID 1
    code, out, _ = pods.run_command("p-iso-b", "ps -eo pid,args")
    assert code == 0 and "sleep 1234" not in out
    assert pods.run_command("p-iso-b", "pkill -f 'sleep 123[4]'; echo $?")[1] == "1\n"


def test_stop_kills_everything(pods: Cluster) -> None:
    pod = pods.running("p-stop")
    assert (
        pods.run_command("p-stop", "setsid nohup sleep 4321 > /dev/null 2>&1 < /dev/null &")[0] == 0
    )
    run = pods.kubelet.pod_run(pod)
    assert run is not None and run.containers[0].init_pid is not None
    pid_ns = os.readlink(f"/proc/{run.containers[0].init_pid}/ns/pid")
    assert len(pid_namespace_members(pid_ns)) >= 3  # bash, sleep infinity, sleep 4321
    started = time.monotonic()
    pods.stop("p-stop", grace=10)
    assert time.monotonic() - started < 5  # bash traps TERM and exits at once
    assert pid_namespace_members(pid_ns) == []
    final = pods.sink.status("p-stop")
    terminated = final["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 143


def test_grace_period_then_sigkill(pods: Cluster) -> None:
    pods.running("p-stubborn", ["sleep", "infinity"])  # PID 1 without a TERM handler
    started = time.monotonic()
    pods.stop("p-stubborn", grace=0.3)
    assert 0.25 < time.monotonic() - started < 5
    terminated = pods.sink.status("p-stubborn")["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137


def test_phases_and_restarts(pods: Cluster) -> None:
    pods.run("p-ok", ["sh", "-c", "exit 0"], restartPolicy="Never")
    pods.run("p-fail", ["sh", "-c", "exit 4"], restartPolicy="Never")
    pods.run("p-again", ["sh", "-c", "echo run; exit 1"], restartPolicy="Always")
    wait_for(lambda: pods.sink.status("p-ok").get("phase") == "Succeeded", what="Succeeded")
    wait_for(lambda: pods.sink.status("p-fail").get("phase") == "Failed", what="Failed")
    state = pods.sink.status("p-fail")["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (4, "Error")
    wait_for(
        lambda: pods.sink.status("p-again")["containerStatuses"][0]["restartCount"] >= 2,
        what="restarts",
    )
    status = pods.sink.status("p-again")
    assert status["phase"] == "Running"
    assert status["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1
    history = pods.sink.history["p-ok"]
    assert history[0]["phase"] == "Pending"
    conditions = {c["type"]: c["status"] for c in history[-1]["conditions"]}
    assert conditions["PodScheduled"] == "True"


# -- network -------------------------------------------------------------------------------


def _http_server_pod(pods: Cluster, name: str, port: int) -> str:
    script = f'echo served > /tmp/index.html; cd /tmp; exec python3 -m http.server {port} --bind "$POD_IP"'
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    pod = pods.running(name, ["sh", "-c", script], container={"env": env})
    ip = pods.kubelet.pod_ip(pod)
    assert ip is not None

    def listening() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((ip, port), 0.5):
            return True
        return False

    wait_for(listening, what="http.server in the pod")
    return ip


def test_pod_ip_and_portforward(pods: Cluster) -> None:
    ip = _http_server_pod(pods, "p-http", 18765)
    with urllib.request.urlopen(f"http://{ip}:18765/index.html", timeout=10) as answer:
        assert answer.read() == b"served\n"
    forward = portforward(
        pods.api.connect_get_namespaced_pod_portforward, "p-http", NS, ports="18765"
    )
    sock = forward.socket(18765)
    sock.setblocking(True)
    sock.sendall(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    assert received.startswith(b"HTTP/1.0 200") and received.endswith(b"served\n")
    assert forward.error(18765) is None
    # Nothing listens on this port: the error channel says so.
    forward = portforward(
        pods.api.connect_get_namespaced_pod_portforward, "p-http", NS, ports="18766"
    )
    sock = forward.socket(18766)
    sock.setblocking(True)
    assert sock.recv(10) == b""
    assert "18766" in (forward.error(18766) or "")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_kubectl_port_forward(pods: Cluster) -> None:
    """kubectl 1.32 port-forward: SPDY/3.1 tunnelled in a websocket."""
    ip = _http_server_pod(pods, "p-kpf", 18768)
    blob = os.urandom(5 << 20)
    (Path(f"/proc/{pod_init_pid_of(pods, 'p-kpf')}/root/tmp/blob")).write_bytes(blob)
    env = {**os.environ, "KUBECONFIG": str(pods.kubeconfig())}
    forward = subprocess.Popen(
        ["kubectl", "port-forward", "pod/p-kpf", "18769:18768", "18770:18799"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert forward.stdout is not None
        assert b"Forwarding from 127.0.0.1:18769" in forward.stdout.readline()
        for path, expected in (
            ("/index.html", b"served\n"),
            ("/blob", blob),
            ("/index.html", b"served\n"),
        ):
            with urllib.request.urlopen(f"http://127.0.0.1:18769{path}", timeout=20) as answer:
                assert answer.read() == expected
        # A port nothing listens on: the connection is closed, kubectl says why.
        with socket.create_connection(("127.0.0.1", 18770), 5) as sock:
            sock.settimeout(20)
            assert sock.recv(10) == b""
    finally:
        forward.terminate()
        _, err = forward.communicate(timeout=20)
    assert b"18799" in err  # "error forwarding port 18799 to pod p-kpf: ..."
    assert ip


def pod_init_pid_of(pods: Cluster, name: str) -> int:
    run = pods.kubelet.pod_run(pods.pods[name])
    assert run is not None and run.containers[0].init_pid is not None
    return run.containers[0].init_pid


# -- logs --------------------------------------------------------------------------------


def test_logs(pods: Cluster) -> None:
    script = (
        "for i in 1 2 3; do echo line $i; done; echo err >&2; "
        "while [ ! -e /tmp/go ]; do sleep 0.01; done; echo after"
    )
    pods.running("p-log", ["sh", "-c", script], restartPolicy="Never")
    get = pods.api.read_namespaced_pod_log
    wait_for(lambda: "err" in get("p-log", NS), what="log lines")
    assert get("p-log", NS) == "line 1\nline 2\nline 3\nerr\n"
    assert get("p-log", NS, tail_lines=2) == "line 3\nerr\n"
    assert get("p-log", NS, limit_bytes=3) == "lin"
    # follow: what is there, then what comes, until the container ends.
    response: Any = get("p-log", NS, follow=True, _preload_content=False)
    assert response.read(7) == b"line 1\n"
    assert pods.run_command("p-log", "touch /tmp/go")[0] == 0
    assert response.read() == b"line 2\nline 3\nerr\nafter\n"
    wait_for(lambda: pods.sink.status("p-log").get("phase") == "Succeeded", what="Succeeded")
    response = get("p-log", NS, follow=True, _preload_content=False)
    assert response.read() == b"line 1\nline 2\nline 3\nerr\nafter\n"


def test_close_removes_pods(tmp_path: Path) -> None:
    kubelet = FakeKubelet()
    sink = Sink()
    kubelet.bind(sink)
    pod = {
        "metadata": {"name": "p-close"},
        "spec": {"containers": [{"name": "c", "command": SLEEPER}]},
    }
    kubelet.run_pod(pod, "node-1")
    wait_for(lambda: sink.status("p-close").get("phase") == "Running", what="Running")
    root, ip = kubelet.pod_dir(pod), kubelet.pod_ip(pod)
    assert root is not None and root.is_dir() and ip is not None
    kubelet.close()
    assert not root.exists()
    assert not (PODS_DIR / "ips" / ip).exists()
    assert sink.status("p-close")["phase"] == "Failed"  # bash ended by SIGTERM: 143


CRASHER = """
import sys, time
sys.path.insert(0, {repo!r})
from fakes.kube.kubelet import FakeKubelet
class Sink:
    def update_status(self, namespace, name, status):
        if status["phase"] == "Running":
            print(status["podIP"], flush=True)
kubelet = FakeKubelet()
kubelet.bind(Sink())
kubelet.run_pod({{"metadata": {{"name": "crash"}}, "spec": {{"containers": [
    {{"name": "c", "command": ["sh", "-c", "setsid sleep 3456 & exec sleep infinity"]}}]}}}}, "n")
time.sleep(600)
"""


def test_killed_test_process_leaves_nothing() -> None:
    """A test process that dies (SIGKILL) takes its pods' processes with it; its pod
    directory and address are swept by the next kubelet."""
    repo = str(Path(__file__).resolve().parent.parent)
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHER.format(repo=repo)], stdout=subprocess.PIPE
    )
    assert crasher.stdout is not None
    try:
        ip = crasher.stdout.readline().decode().strip()
        assert ip.startswith("127.18."), ip
        roots = [
            p
            for p in PODS_DIR.glob("default.crash-*")
            if (p / "owner").read_text().startswith(f"{crasher.pid} ")
        ]
        assert len(roots) == 1
        wait_for(lambda: _sleepers("sleep 3456"), what="the pod's daemon")
    finally:
        crasher.kill()
        crasher.wait()
    wait_for(lambda: not _sleepers("sleep 3456"), what="the pod's processes to die")
    FakeKubelet().close()  # a new kubelet sweeps what the dead one left
    assert not roots[0].exists()
    assert not (PODS_DIR / "ips" / ip).exists()


def _sleepers(args: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip() == args.encode():
                    found.append(int(entry.name))
    return found


# -- through the fake API server ---------------------------------------------------------


def test_through_the_fake_api_server(tmp_path: Path) -> None:
    """The kubelet behind fakes/kube/server.py (HTTPS, tokens, the scheduler): the
    Python client's exec and port-forward, kubectl cp, and a deleted pod's processes gone."""
    from fakes.kube.server import KubeServer

    with KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options())) as server:
        config = Configuration(host=server.url)
        config.api_key = {"authorization": f"Bearer {server.token}"}
        config.ssl_ca_cert = str(server.ca_file)
        api = CoreV1Api(ApiClient(config))
        script = 'echo up; cd /tmp && exec python3 -m http.server 18767 --bind "$POD_IP"'
        env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "x", "command": ["sh", "-c", script], "env": env}
                ]
            },
        }
        api.create_namespaced_pod("default", body)
        server.wait_for(
            lambda: (
                (server.pod("default", "web") or {}).get("status", {}).get("phase") == "Running"
            ),
            20,
        )
        pod = api.read_namespaced_pod("web", "default")
        assert pod.status.pod_ip.startswith("127.18.")
        assert pod.status.container_statuses[0].state.running is not None

        client = stream(
            api.connect_get_namespaced_pod_exec,
            "web",
            "default",
            command=["sh", "-c", "wc -c; exit 5"],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        client.write_stdin("twelve bytes")
        client.close_channel(0)
        client.run_forever(timeout=20)
        assert (client.returncode, client.read_stdout().strip()) == (5, "12")

        def answers() -> bool:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((pod.status.pod_ip, 18767), 0.5),
            ):
                return True
            return False

        wait_for(answers, what="the pod's server")
        forward = portforward(
            api.connect_get_namespaced_pod_portforward, "web", "default", ports="18767"
        )
        sock = forward.socket(18767)
        sock.setblocking(True)
        sock.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        sock.close()
        assert received.startswith(b"HTTP/1.0 200")

        kubeconfig = server.write_kubeconfig(tmp_path / "config")
        (tmp_path / "file").write_bytes(b"\0binary\xff")
        env_vars = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        copy = subprocess.run(
            ["kubectl", "cp", str(tmp_path / "file"), "web:/tmp/file"],
            env=env_vars,
            capture_output=True,
            check=False,
            timeout=60,
        )
        assert copy.returncode == 0, copy.stderr
        root = Path(f"/proc/{pod_init_pid(server, 'web')}/root")
        assert (root / "tmp" / "file").read_bytes() == b"\0binary\xff"
        assert api.read_namespaced_pod_log("web", "default").startswith("up\n")

        pid_ns = os.readlink(f"/proc/{pod_init_pid(server, 'web')}/ns/pid")
        api.delete_namespaced_pod("web", "default", grace_period_seconds=1)
        server.wait_for(lambda: server.pod("default", "web") is None, 20)
        assert pid_namespace_members(pid_ns) == []


def pod_init_pid(server: Any, name: str) -> int:
    kubelet: FakeKubelet = server.kubelet
    pod = server.pod("default", name)
    run = kubelet.pod_run(pod)
    assert run is not None and run.containers[0].init_pid is not None
    return run.containers[0].init_pid
