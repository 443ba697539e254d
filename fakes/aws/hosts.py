"""Moto instances as real SSH hosts (fakes/aws/server.py's `InstanceHosts`): an `IsolatedHost`
of fakes/hosts/ssh.py on each running instance's private IP in loopback space."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fakes.aws.server import InstanceView, MotoServer
    from fakes.hosts.ssh import IsolatedHost

LOOPBACK_NET = ipaddress.ip_network("127.16.0.0/16")


class InstanceHosts:
    """Makes every running moto instance whose private IP is in `network` a real SSH host:
    an `IsolatedHost` (fakes/hosts/ssh.py) on that IP, started `boot_delay` seconds after
    the instance is first seen running, stopped when the instance stops (its disk, the
    host's directory, stays), closed when it is terminated or gone. While it runs, a
    terminated instance's IP goes back to its subnet only once its host is closed (as on
    EC2, where the address is freed when the machine is off), so a new instance never
    shares an address with a machine that still answers there.

    A host lets root in with the public key of the instance's KeyName as moto holds it
    (so a key pair the code under test created or imported works), plus `extra_keys`; its
    /root/.aws sends boto3 to the server with the fake credentials, and names the instance
    as the caller (`Call.origin`). `on_boot`, if given, is called with each new host before
    it first boots (to install what the machine's image would have). A thread polls the
    backend every `poll` seconds.

    `started` lists every (instance id, IP) a host was started on; `outside` the running
    instances never hosted because their IP is outside `network` (e.g. moto's 10.x when
    launched without a subnet); `errors` what went wrong in the thread (`check()` raises the
    first)."""

    def __init__(
        self,
        server: MotoServer,
        extra_keys: Sequence[str] = (),
        boot_delay: float = 0.0,
        network: ipaddress.IPv4Network | ipaddress.IPv6Network = LOOPBACK_NET,
        poll: float = 0.2,
        on_boot: Callable[[IsolatedHost], None] | None = None,
    ) -> None:
        from fakes.hosts.ssh import isolation_unavailable

        reason = isolation_unavailable()
        if reason is not None:
            pytest.skip(reason)
        self.server = server
        self.extra_keys = list(extra_keys)
        self.boot_delay = boot_delay
        self.network = network
        self.poll = poll
        self.on_boot = on_boot
        self.started: list[tuple[str, str]] = []
        self.outside: set[tuple[str, str | None]] = set()
        self.errors: list[BaseException] = []
        self._hosts: dict[str, Any] = {}  # instance id -> IsolatedHost
        self._up: set[str] = set()  # instance ids whose sshd accepts connections
        self._held: set[str] = set()
        self._seen_running: dict[str, float] = {}
        self._freed: set[str] = set()  # terminated instances whose address was given back
        server.hosts_own_addresses = True  # until close()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> InstanceHosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="instance-hosts")
        self._thread.start()

    def close(self) -> None:
        """Stop watching and close every host."""
        self._stop.set()
        if self._thread is not None:  # a pass may be booting a host: let it finish first
            self._thread.join(300)
            if self._thread.is_alive():
                self.errors.append(RuntimeError("the instance-hosts thread did not stop"))
        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
            self._up.clear()
        for host in hosts:
            host.close()
        self.server.hosts_own_addresses = False
        for view in self.server.instances():
            self.server.free_address(view.id)

    def hold(self, instance_id: str) -> None:
        """From the next pass on, `instance_id` has no SSH host (stopped if it had one), as
        if its machine hung, until `release`."""
        with self._lock:
            self._held.add(instance_id)

    def release(self, instance_id: str) -> None:
        with self._lock:
            self._held.discard(instance_id)

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]

    def host(self, instance_id: str) -> Any:
        """The IsolatedHost of `instance_id` (running or not), or None."""
        with self._lock:
            return self._hosts.get(instance_id)

    def running(self) -> dict[str, Any]:
        """Instance id -> its host, for the hosts whose sshd accepts connections."""
        with self._lock:
            return {i: self._hosts[i] for i in self._up}

    def wait_for(self, instance_id: str, timeout: float = 30.0) -> Any:
        """The host of `instance_id` once its sshd accepts connections."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            host = self.running().get(instance_id)
            if host is not None:
                return host
            if time.monotonic() > deadline:
                raise TimeoutError(f"no SSH host came up for {instance_id}")
            time.sleep(0.05)

    def wait_gone(self, instance_id: str, timeout: float = 30.0) -> None:
        """Returns once `instance_id` has no running host."""
        deadline = time.monotonic() + timeout
        while (host := self.host(instance_id)) is not None and (
            host.running or instance_id in self.running()
        ):
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the host of {instance_id} is still up")
            time.sleep(0.05)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as error:
                self.errors.append(error)
            self._stop.wait(self.poll)

    def sync(self) -> None:
        """One pass: hosts for instances that run, none for the others."""
        now = time.monotonic()
        views = {v.id: v for v in self.server.instances()}
        wanted: dict[str, InstanceView] = {}
        for view in views.values():
            if view.state != "running":
                self._seen_running.pop(view.id, None)
                continue
            if view.private_ip is None or ipaddress.ip_address(view.private_ip) not in self.network:
                self.outside.add((view.id, view.private_ip))
                continue
            first = self._seen_running.setdefault(view.id, now)
            with self._lock:
                held = view.id in self._held
            if now - first >= self.boot_delay and not held:
                wanted[view.id] = view
        with self._lock:
            current = dict(self._hosts)
        for instance_id, host in current.items():  # down first: a freed IP may be reused
            known = views.get(instance_id)
            if known is None or known.state == "terminated" or host.ip != known.private_ip:
                with self._lock:
                    self._up.discard(instance_id)
                host.close()
                with self._lock:
                    del self._hosts[instance_id]
            elif instance_id not in wanted and host.running:
                with self._lock:
                    self._up.discard(instance_id)
                host.stop()
        with self._lock:
            hosted = set(self._hosts)
        for view in views.values():  # machines off: their addresses may go to new instances
            if view.state == "terminated" and view.id not in hosted | self._freed:
                self.server.free_address(view.id)
                self._freed.add(view.id)
        for view in wanted.values():
            self._boot(view)

    def _boot(self, view: InstanceView) -> None:
        from fakes.hosts.ssh import IsolatedHost

        host = self.host(view.id)
        if host is not None and host.running:
            return
        if host is None:
            keys = list(self.extra_keys)
            if view.key_name and (key := self.server.public_key(view.key_name, view.region)):
                keys.insert(0, key)
            assert view.private_ip is not None
            host = IsolatedHost(view.private_ip, "".join(k.strip() + "\n" for k in keys))
            self.server.write_aws_files(host.home / ".aws", app_id=view.id)
            if self.on_boot is not None:
                self.on_boot(host)
            with self._lock:
                self._hosts[view.id] = host
        self.started.append((view.id, host.ip))
        host.start()
        with self._lock:
            self._up.add(view.id)
