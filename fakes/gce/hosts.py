"""Fake GCE instances as real SSH hosts (fakes/gce/server.py): an `IsolatedHost` of
fakes/hosts/ssh.py on each RUNNING instance's networkIP (127.17.x.y), port 22."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fakes.gce.server import GceServer, InstanceView
    from fakes.hosts.ssh import IsolatedHost

LOOPBACK_NET = ipaddress.ip_network("127.17.0.0/16")


class GceHosts:
    """Makes every RUNNING instance of `server` a real SSH host: an `IsolatedHost` on its
    networkIP, started `boot_delay` seconds after the instance is first seen RUNNING,
    stopped (powered off: its home stays, like a disk) when the instance leaves RUNNING
    (stop, preemption, deletion), closed once the instance is gone.

    The machine is part of the instance's lifecycle: the fake holds a STOPPING instance
    until its machine is off (`server.set_machine`), so an instance is TERMINATED, or gone
    with its address free for the next insert in its zone, only once nothing answers on
    that address any more.

    A host lets root in with every key the instance accepts, as GCE's guest agent would
    install them: the `ssh-keys` (and legacy `sshKeys`) entries of the instance's metadata
    and, unless its metadata sets block-project-ssh-keys=true, of the project's common
    metadata, re-read on every pass (so setMetadata takes effect on a running host); plus
    `extra_keys`. Sessions get `server.host_env(id)`: the endpoint overrides and the
    instance's own metadata server (fakes/gce/metadata.py), so google.auth.default() on
    a host (the head's autoscaler) finds the project and a token of the instance's service
    account there, as on GCE, and the calls it makes are logged with the instance as
    `Call.origin`; with `credentials="key"` the home also holds the fake's key as
    application default credentials (used before the metadata server). The hosts
    log in root only: a key listed for any user (`ubuntu:ssh-...`)
    opens a root session. `on_boot`, if given, is called with each new host before it first
    boots. A thread polls the server every `poll` seconds.

    `started` lists every (instance name, IP) a host was started on; `errors` what went
    wrong in the thread (`check()` raises the first)."""

    def __init__(
        self,
        server: GceServer,
        extra_keys: Sequence[str] = (),
        boot_delay: float = 0.0,
        poll: float = 0.1,
        on_boot: Callable[[IsolatedHost], None] | None = None,
        credentials: str = "metadata",
    ) -> None:
        from fakes.hosts.ssh import isolation_unavailable

        reason = isolation_unavailable()
        if reason is not None:
            pytest.skip(reason)
        self.server = server
        self.extra_keys = list(extra_keys)
        self.boot_delay = boot_delay
        self.poll = poll
        self.on_boot = on_boot
        self.credentials = credentials
        self.started: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        self._hosts: dict[str, Any] = {}  # instance id -> IsolatedHost
        self._names: dict[str, tuple[str, str]] = {}  # instance id -> (zone, name)
        self._up: set[str] = set()
        self._held: set[str] = set()  # instance names
        self._seen_running: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._passes = 0  # sync passes finished by the thread
        self._pass_done = threading.Condition()

    def __enter__(self) -> GceHosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="gce-hosts")
        self._thread.start()

    def close(self) -> None:
        """Stop watching, close every host, and tell the server the machines are off."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(300)
            if self._thread.is_alive():
                self.errors.append(RuntimeError("the gce-hosts thread did not stop"))
        with self._lock:
            hosts, self._hosts = dict(self._hosts), {}
            self._up.clear()
        for instance_id, host in hosts.items():
            host.close()
            self._off(instance_id)

    def hold(self, name: str) -> None:
        """From the next pass on, instance `name` has no SSH host (stopped if it had one),
        as if its machine hung, until `release`."""
        with self._lock:
            self._held.add(name)

    def release(self, name: str) -> None:
        with self._lock:
            self._held.discard(name)

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]

    def host(self, name: str) -> Any:
        """The IsolatedHost of instance `name` (running or not), or None."""
        with self._lock:
            return next(
                (
                    self._hosts[i]
                    for i, (_, n) in self._names.items()
                    if n == name and i in self._hosts
                ),
                None,
            )

    def running(self) -> dict[str, Any]:
        """Instance name -> its host, for the hosts whose sshd accepts connections."""
        with self._lock:
            return {self._names[i][1]: self._hosts[i] for i in self._up}

    def wait_for(self, name: str, timeout: float = 60.0) -> Any:
        """The host of instance `name` once its sshd accepts connections."""
        deadline = time.monotonic() + timeout
        while (host := self.running().get(name)) is None:
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no SSH host came up for {name}")
            time.sleep(0.05)
        return host

    def wait_gone(self, name: str, timeout: float = 60.0) -> None:
        """Returns once instance `name` has no running host."""
        deadline = time.monotonic() + timeout
        while (host := self.host(name)) is not None and (host.running or name in self.running()):
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the host of {name} is still up")
            time.sleep(0.05)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as error:
                self.errors.append(error)
            with self._pass_done:
                self._passes += 1
                self._pass_done.notify_all()
            self._stop.wait(self.poll)

    def wait_pass(self, timeout: float = 60.0) -> None:
        """Returns once the thread has made a whole pass that began after this call (so it
        has seen the server's state as it is now: e.g. new ssh-keys are installed)."""
        with self._pass_done:
            wanted = self._passes + 2
            if not self._pass_done.wait_for(lambda: self._passes >= wanted, timeout):
                raise TimeoutError("the gce-hosts thread made no pass")
        self.check()

    def _off(self, instance_id: str) -> None:
        zone, name = self._names[instance_id]
        self.server.set_machine(zone, name, False)

    def sync(self) -> None:
        """One pass: hosts for the instances that run, none for the others."""
        now = time.monotonic()
        views = {v.id: v for v in self.server.instances()}
        wanted: dict[str, InstanceView] = {}
        for view in views.values():
            if view.status != "RUNNING" or ipaddress.ip_address(view.ip) not in LOOPBACK_NET:
                self._seen_running.pop(view.id, None)
                if view.machine_on and view.id not in self._hosts:
                    self.server.set_machine(view.zone, view.name, False)
                continue
            first = self._seen_running.setdefault(view.id, now)
            with self._lock:
                held = view.name in self._held
            if now - first >= self.boot_delay and not held:
                wanted[view.id] = view
        with self._lock:
            current = dict(self._hosts)
        for instance_id, host in current.items():
            known = views.get(instance_id)
            if known is None:
                with self._lock:
                    self._up.discard(instance_id)
                    del self._hosts[instance_id]
                host.close()
            elif instance_id not in wanted and (host.running or known.machine_on):
                with self._lock:
                    self._up.discard(instance_id)
                host.stop()
                self._off(instance_id)
        for view in wanted.values():
            self._boot(view)

    def _keys(self, view: InstanceView) -> str:
        keys = [key for _, key in view.ssh_keys] + self.extra_keys
        return "".join(k.strip() + "\n" for k in keys)

    def _boot(self, view: InstanceView) -> None:
        from fakes.hosts.ssh import IsolatedHost

        with self._lock:
            host = self._hosts.get(view.id)
        if host is None:
            host = IsolatedHost(view.ip, self._keys(view))
            self.server.write_google_files(host.home, key=self.credentials == "key")
            env = self.server.host_env(view.id)
            host.sshd_options.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
            if self.on_boot is not None:
                self.on_boot(host)
            with self._lock:
                self._hosts[view.id] = host
                self._names[view.id] = (view.zone, view.name)
        keys = host.root / "authorized_keys"
        if keys.read_text() != (wanted := self._keys(view)):
            keys.write_text(wanted)  # sshd reads it at each login
        if host.running:
            return
        if not self.server.set_machine(view.zone, view.name, True):
            return  # no longer RUNNING: not booted
        try:
            host.start()
        except BaseException:
            self.server.set_machine(view.zone, view.name, False)
            raise
        self.started.append((view.name, host.ip))
        with self._lock:
            self._up.add(view.id)
