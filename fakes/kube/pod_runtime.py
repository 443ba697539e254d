"""Fake pods as real process trees: each container is PID 1 of its own PID, mount and UTS
namespaces (started by pod_init.py), sharing this box's network and filesystem except for
the pod's own /root, /tmp, /dev/shm, serviceaccount files and volumes.

A pod gets an address from 127.18.0.0/16 (reserved by a file under PODS_DIR, so two test
processes never hand out the same one) and a directory PODS_DIR/NS.NAME-XXXX holding its
home/, tmp/, logs/CONTAINER/RESTARTS.log (stdout and stderr), serviceaccount/ and
volumes/. Containers run, restart (restartPolicy with a doubling back-off) and stop
(SIGTERM, SIGKILL after the grace period) in threads of their own; every change of state
is reported as the pod's whole status.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fakes.hosts.ssh import _alive, _identity, _kept_under_root, _wait_gone
from fakes.kube.pod_env import (
    VENV_BIN,
    ContainerConfigError,
    ObjectKeyLookup,
    command_line,
    container_env,
)

Pod = dict[str, Any]
Report = Callable[[dict[str, Any]], None]
PODS_DIR = Path("/var/tmp/launcher-test-pods")  # not under /tmp: each pod has its own /tmp
POD_NETWORK = ipaddress.IPv4Network("127.18.0.0/16")
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_INIT = str(Path(__file__).with_name("pod_init.py"))
SHM_SIZE = "2g"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RuntimeOptions:
    """What the kubelet is told by the server (see kubelet.FakeKubelet)."""

    service_account_files: Callable[[str, str], Mapping[str, bytes]] | None = None
    service_env: Mapping[str, str] = field(default_factory=dict)
    lookup: ObjectKeyLookup | None = None
    host_ip: Callable[[str], str] = lambda _node: "127.0.0.1"
    restart_backoff_s: float = 0.5
    max_restart_backoff_s: float = 10.0


class IpPool:
    """Pod addresses, each reserved by a file naming its owner process while in use."""

    def __init__(self, network: ipaddress.IPv4Network = POD_NETWORK) -> None:
        self._network = network
        self._dir = PODS_DIR / "ips"
        self._lock = threading.Lock()
        self._next = 0
        self._owner = _identity(os.getpid()) or ""

    def take(self) -> str:
        self._dir.mkdir(parents=True, exist_ok=True)
        first = int(self._network.network_address)
        size = self._network.num_addresses
        with self._lock:
            for step in range(size):
                offset = (self._next + step) % size
                if (first + offset) & 0xFF in (0, 255):
                    continue  # no x.y.z.0 nor x.y.z.255
                ip = str(ipaddress.IPv4Address(first + offset))
                if self._reserve(ip):
                    self._next = (offset + 1) % size
                    return ip
        raise RuntimeError(f"no free pod address in {self._network}")

    def _reserve(self, ip: str) -> bool:
        path = self._dir / ip
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                with contextlib.suppress(OSError):
                    owner = path.read_text()
                    if owner and not _alive(owner):
                        path.unlink()  # its test process is gone
                        continue
                return False
            with os.fdopen(fd, "w") as out:
                out.write(self._owner)
            return True
        return False

    def give_back(self, ip: str) -> None:
        with contextlib.suppress(OSError):
            path = self._dir / ip
            if path.read_text() == self._owner:
                path.unlink()


class ContainerRun:
    """One container of a pod: its state as the API shows it, and its process."""

    def __init__(self, pod: PodRun, spec: Mapping[str, Any], *, init: bool) -> None:
        self.pod = pod
        self.spec = spec
        self.name = str(spec.get("name", ""))
        self.init = init
        self.restart_count = 0
        self.state: dict[str, Any] = {"waiting": {"reason": "PodInitializing"}}
        self.last_state: dict[str, Any] = {}
        self.env: dict[str, str] = {}
        self.helper: subprocess.Popen[bytes] | None = None
        self.init_pid: int | None = None  # this box's PID of the container's PID 1, running
        self.pidfd: int | None = None
        self.done = False  # terminated and will not restart
        self.ok = False  # done with exit code 0
        self.log_dir = pod.root / "logs" / self.name
        self.thread = threading.Thread(target=self.run, name=f"pod {pod.key} {self.name}")

    @property
    def running(self) -> bool:
        return "running" in self.state

    def log_path(self, restarts: int | None = None) -> Path:
        return self.log_dir / f"{self.restart_count if restarts is None else restarts}.log"

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": f"fake://{self.pod.uid}/{self.name}",
            "ready": self.running and not self.init,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }

    def run(self) -> None:
        backoff = self.pod.options.restart_backoff_s
        policy = self.pod.restart_policy
        if self.init and policy == "Always":
            policy = "OnFailure"
        while True:
            code = self._run_once()
            with self.pod.lock:
                if code is None or self.pod.stopping:
                    self.done = True
                    self.ok = code == 0
                    self.pod.report()
                    return
                if policy == "Never" or (policy == "OnFailure" and code == 0):
                    self.done, self.ok = True, code == 0
                    self.pod.report()
                    return
                message = f"back-off {backoff:g}s restarting failed container={self.name}"
                self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
                self.pod.report()
            if self.pod.stop_event.wait(backoff):
                with self.pod.lock:
                    self.done = True
                    self.pod.report()
                return
            backoff = min(backoff * 2, self.pod.options.max_restart_backoff_s)
            with self.pod.lock:
                self.restart_count += 1

    def _run_once(self) -> int | None:
        """Run the container once: its exit code, or None if it could not start."""
        pod = self.pod
        try:
            self.env = container_env(
                pod.pod,
                self.spec,
                pod_ip=pod.ip,
                host_ip=pod.host_ip,
                service_env=pod.options.service_env,
                lookup=pod.options.lookup,
            )
            argv = command_line(self.spec, self.env)
        except ContainerConfigError as error:
            with pod.lock:
                self.state = {
                    "waiting": {"reason": "CreateContainerConfigError", "message": str(error)}
                }
                pod.report()
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ready_r, ready_w = os.pipe()
        try:
            with pod.lock:
                if pod.stopping:
                    return None
                with self.log_path().open("ab") as log:
                    self.helper = subprocess.Popen(
                        [sys.executable, POD_INIT, str(ready_w), pod.script(self.spec), *argv],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        env=self.env,
                        cwd="/",
                        pass_fds=(ready_w,),
                        start_new_session=True,
                    )
                pod.record_pid(self.helper.pid)
            os.close(ready_w)
            ready_w = -1
            ready = os.read(ready_r, 1)
        finally:
            os.close(ready_r)
            if ready_w >= 0:
                os.close(ready_w)
        started = now()
        if ready:
            with pod.lock:
                children = _children(self.helper.pid)
                if children:
                    self.init_pid = children[0]
                    with contextlib.suppress(OSError):
                        self.pidfd = os.pidfd_open(self.init_pid)
                self.state = {"running": {"startedAt": started}}
                if self.pod.stopping:
                    self._signal(signal.SIGKILL)
                pod.report()
        code = self.helper.wait()
        code = 128 - code if code < 0 else code
        with pod.lock:
            if self.pidfd is not None:
                os.close(self.pidfd)
            self.init_pid = self.pidfd = None
            terminated = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now(),
                "containerID": f"fake://{pod.uid}/{self.name}",
            }
            if not ready:
                terminated["message"] = self.log_path().read_text(errors="replace")[-2000:]
            self.state = {"terminated": terminated}
            self.last_state = {"terminated": terminated}
            pod.report()
        return code

    def _signal(self, number: int) -> None:
        """Signal the container's PID 1 (through its pidfd: never another process)."""
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, number)
        elif self.helper is not None and self.init_pid is None and number == signal.SIGKILL:
            with contextlib.suppress(OSError):
                self.helper.kill()  # still setting up: its PID 1 dies with it


class PodRun:
    """A pod on this box: its address, directory and containers."""

    def __init__(
        self, pod: Pod, node_name: str, ip: str, options: RuntimeOptions, report: Report
    ) -> None:
        meta = pod.get("metadata") or {}
        self.pod = pod
        self.namespace = str(meta.get("namespace") or "default")
        self.name = str(meta.get("name", ""))
        self.uid = str(meta.get("uid") or f"{self.namespace}.{self.name}")
        self.key = f"{self.namespace}/{self.name}"
        spec = pod.get("spec") or {}
        self.restart_policy = str(spec.get("restartPolicy") or "Always")
        self.options = options
        self.ip = ip
        self.host_ip = options.host_ip(node_name)
        self._report = report
        self.lock = threading.RLock()
        self.stop_event = threading.Event()
        self.stopping = False
        self.start_time = now()
        self.root = _make_pod_dir(f"{self.namespace}.{self.name}")
        self.init_containers = [
            ContainerRun(self, c, init=True) for c in spec.get("initContainers") or []
        ]
        self.containers = [ContainerRun(self, c, init=False) for c in spec.get("containers") or []]
        self._kept = _kept_under_root()
        self._prepare()
        self._thread = threading.Thread(target=self._run, name=f"pod {self.key}")

    # -- the pod's files -------------------------------------------------------------------

    def _prepare(self) -> None:
        home, tmp = self.root / "home", self.root / "tmp"
        home.mkdir(mode=0o700)
        tmp.mkdir()
        tmp.chmod(0o1777)
        for target, _ in self._kept:
            self._inside(target).mkdir(parents=True, exist_ok=True)
        venv_bin = shlex.quote(VENV_BIN)
        rc = f'case ":$PATH:" in *:{venv_bin}:*) ;; *) PATH={venv_bin}:"$PATH" ;; esac\n'
        for name in (".profile", ".bashrc"):
            (home / name).write_text(rc + "export PATH\n")
        spec = self.pod.get("spec") or {}
        files: Mapping[str, bytes] = {}
        if self.options.service_account_files and spec.get("automountServiceAccountToken", True):
            account = str(spec.get("serviceAccountName") or "default")
            files = self.options.service_account_files(self.namespace, account)
        if files:
            (self.root / "serviceaccount").mkdir()
            for name, content in files.items():
                (self.root / "serviceaccount" / name).write_bytes(content)
        for volume in spec.get("volumes") or []:
            if "emptyDir" in volume:
                (self.root / "volumes" / volume["name"]).mkdir(parents=True)

    def _inside(self, target: str) -> Path:
        if target.startswith("/tmp/"):
            return self.root / "tmp" / os.path.relpath(target, "/tmp")
        return self.root / "home" / os.path.relpath(target, "/root")

    def script(self, container: Mapping[str, Any]) -> str:
        """The shell run as the container's PID 1 before it execs the command: mounts (in
        its own mount namespace, private: none reaches this box), hostname, ready byte."""
        q = shlex.quote
        steps = ["set -e", "mount --make-rprivate /", "mount -t proc proc /proc"]
        for target, source in self._kept:  # before /root and /tmp are covered
            steps.append(f"mount --rbind {q(source)} {q(str(self._inside(target)))}")
        steps += [
            f"mount --rbind {q(str(self.root / 'home'))} /root",
            f"mount --rbind {q(str(self.root / 'tmp'))} /tmp",
            f"mount -t tmpfs -o size={SHM_SIZE},mode=1777 tmpfs /dev/shm",
        ]
        if (self.root / "serviceaccount").is_dir():
            steps += [
                f"mkdir -p {SA_MOUNT}",
                f"mount --bind {q(str(self.root / 'serviceaccount'))} {SA_MOUNT}",
            ]
        steps += self._volume_mounts(container)
        workdir = str(container.get("workingDir") or "/")
        steps += [
            f"hostname {q(self.name[:63])}",
            f"mkdir -p {q(workdir)}",
            f"cd {q(workdir)}",
            "printf x >&3",
            "exec 3>&-",
            'exec "$@"',
        ]
        return "\n".join(steps)

    def _volume_mounts(self, container: Mapping[str, Any]) -> list[str]:
        q = shlex.quote
        volumes = {v.get("name"): v for v in (self.pod.get("spec") or {}).get("volumes") or []}
        steps = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name")) or {}
            path = q(str(mount["mountPath"]))
            if "emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") == "Memory":
                size = (volume["emptyDir"] or {}).get("sizeLimit") or SHM_SIZE
                steps += [f"mkdir -p {path}", f"mount -t tmpfs -o size={q(str(size))} tmpfs {path}"]
            elif "emptyDir" in volume:
                source = q(str(self.root / "volumes" / volume["name"]))
                steps += [f"mkdir -p {path}", f"mount --bind {source} {path}"]
            elif "hostPath" in volume:
                source = q(str(volume["hostPath"]["path"]))
                steps += [f"mkdir -p {path}", f"mount --rbind {source} {path}"]
            # Other kinds (configMap, secret, projected...) are not modelled: not mounted.
        return steps

    def record_pid(self, pid: int) -> None:
        with (self.root / "helpers").open("a") as out:
            out.write(f"{_identity(pid) or ''}\n")

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        with self.lock:
            self.report()
        self._thread.start()

    def _run(self) -> None:
        for container in self.init_containers:
            container.thread.start()
            container.thread.join()
            if not container.ok:
                return  # the pod failed (or is being stopped)
        with self.lock:
            if self.stopping:
                return
            for container in self.containers:
                container.state = {"waiting": {"reason": "ContainerCreating"}}
            self.report()
            for container in self.containers:
                container.thread.start()

    def container(self, name: str | None) -> ContainerRun | None:
        if not name:
            return self.containers[0] if len(self.containers) == 1 else None
        return next((c for c in self.containers if c.name == name), None)

    def stop(self, grace_period_s: float) -> None:
        """SIGTERM every container's PID 1, SIGKILL once the grace period is over; returns
        when every process of the pod is gone."""
        with self.lock:
            self.stopping = True
            self.stop_event.set()
            every = self.init_containers + self.containers
            for container in every:
                container._signal(signal.SIGTERM)
        deadline = time.monotonic() + max(grace_period_s, 0)
        for container in every:
            helper = container.helper
            if helper is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                helper.wait(max(deadline - time.monotonic(), 0))
            if helper.poll() is None:
                with self.lock:
                    container._signal(signal.SIGKILL)
                helper.wait(30)
        self._thread.join(30)
        for container in every:
            if container.thread.ident is not None:
                container.thread.join(30)

    def remove(self) -> None:
        _remove(self.root)

    # -- status ----------------------------------------------------------------------------

    def report(self) -> None:
        """Send the pod's whole status (call with the lock held, so reports stay in order)."""
        self._report(self.status())

    def phase(self) -> str:
        if any(c.done and not c.ok for c in self.init_containers):
            return "Failed"
        if not all(c.ok for c in self.init_containers):
            return "Pending"
        if self.containers and all(c.done for c in self.containers):
            return "Succeeded" if all(c.ok for c in self.containers) else "Failed"
        if any(c.running or c.restart_count or "terminated" in c.state for c in self.containers):
            return "Running"
        return "Pending"

    def status(self) -> dict[str, Any]:
        initialized = all(c.ok for c in self.init_containers)
        ready = bool(self.containers) and all(c.running for c in self.containers)
        conditions = [
            ("PodScheduled", True),
            ("Initialized", initialized),
            ("ContainersReady", ready),
            ("Ready", ready),
        ]
        status: dict[str, Any] = {
            "phase": self.phase(),
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if value else "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now(),
                }
                for kind, value in conditions
            ],
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        return status


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _make_pod_dir(prefix: str) -> Path:
    sweep_stale()
    PODS_DIR.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=PODS_DIR))
    (root / "owner").write_text(_identity(os.getpid()) or "")
    return root


def _remove(root: Path) -> None:
    """Delete a stopped pod's directory. Its mounts existed only in its containers' mount
    namespaces; refuse if anything is mounted under it here all the same."""
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            mount_point = line.split()[4]
            if mount_point == str(root) or mount_point.startswith(f"{root}/"):
                raise RuntimeError(f"{mount_point} is mounted; not deleting {root}")
    shutil.rmtree(root, ignore_errors=True)


def sweep_stale() -> None:
    """Delete pod directories and address reservations whose test process is gone (a
    crashed run), first killing any container helper still running from them (its
    container's PID 1 dies with it, and the kernel kills the rest of that PID namespace)."""
    if not PODS_DIR.is_dir():
        return
    for path in (PODS_DIR / "ips").glob("*"):
        with contextlib.suppress(OSError):
            owner = path.read_text()
            if owner and not _alive(owner):
                path.unlink()
    for root in PODS_DIR.iterdir():
        if root.name == "ips" or not root.is_dir():
            continue
        with contextlib.suppress(OSError):
            owner = (root / "owner").read_text()
            if not owner or _alive(owner):
                continue
            path = root / "helpers"
            helpers = [h for h in path.read_text().split("\n") if h] if path.exists() else []
            live = [h for h in helpers if _alive(h)]
            for helper in live:
                os.kill(int(helper.split()[0]), signal.SIGKILL)
            if not _wait_gone(live, 15):
                continue
            _remove(root)
