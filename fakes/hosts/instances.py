"""A fake cloud's instances as real SSH hosts: the watcher fakes/aws/hosts.py (moto) and
fakes/gce/hosts.py (the fake GCE) share.

A thread polls the fake every `poll` seconds and keeps one `IsolatedHost`
(fakes/hosts/ssh.py) per instance that runs at an address hosts can take: started
`boot_delay` seconds after the instance is first seen running, stopped (powered off: its
home stays, like a disk) when it no longer runs, closed once the instance is gone. A
cloud's module says only what differs: how to list its instances, which of them can run,
which name tests call an instance by, how a new host is furnished (keys, credentials),
and what the fake is told as machines go on and off.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, Self, TypeVar

import pytest

if TYPE_CHECKING:
    from fakes.hosts.ssh import IsolatedHost

View = TypeVar("View")  # an instance as the cloud's fake shows it


class InstanceHostWatcher(ABC, Generic[View]):
    """Hosts for a fake's running instances (see the module docstring), as a context
    manager or start()/close(); `sync()` makes one pass by hand when not started.

    An instance is named by `_name` (its id or its name, as the cloud's tests say it) in
    `hold`, `host`, `running`, `wait_for`, `wait_gone` and `started`. `on_boot`, if given,
    is called with each new host before it first boots (to install what the machine's
    image would have). `started` lists every (name, IP) a host was started on; `errors`
    what went wrong in the thread (`check()` raises the first)."""

    thread_name = "instance-hosts"
    wait_timeout = 30.0  # the default of wait_for and wait_gone, in seconds

    def __init__(
        self,
        extra_keys: Sequence[str] = (),
        boot_delay: float = 0.0,
        poll: float = 0.2,
        on_boot: Callable[[IsolatedHost], None] | None = None,
    ) -> None:
        from fakes.hosts.ssh import isolation_unavailable

        reason = isolation_unavailable()
        if reason is not None:
            pytest.skip(reason)
        self.extra_keys = list(extra_keys)
        self.boot_delay = boot_delay
        self.poll = poll
        self.on_boot = on_boot
        self.started: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        self._hosts: dict[str, IsolatedHost] = {}  # instance id -> its host
        self._views: dict[str, View] = {}  # instance id -> the instance its host was made for
        self._up: set[str] = set()  # instance ids whose sshd accepts connections
        self._held: set[str] = set()  # names
        self._seen_running: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._passes = 0  # sync passes finished by the thread
        self._pass_done = threading.Condition()

    # -- what a cloud's module says --------------------------------------------------------
    @abstractmethod
    def _instances(self) -> Mapping[str, View]:
        """Every instance the fake holds, by id."""

    @abstractmethod
    def _name(self, view: View) -> str:
        """What tests call the instance by."""

    @abstractmethod
    def _runs(self, view: View) -> bool:
        """Whether the instance runs at an address a host can take."""

    @abstractmethod
    def _new_host(self, view: View) -> IsolatedHost:
        """A new (stopped) host for the instance, with its keys and the files its image has."""

    def _refresh(self, view: View, host: IsolatedHost) -> None:
        """Called on every pass the instance runs: bring its host up to date (keys)."""

    def _ends(self, view: View, host: IsolatedHost) -> bool:
        """Whether the instance, though still listed, is done with its host (closed)."""
        return False

    def _powered(self, view: View) -> bool:
        """Whether the fake counts the instance's machine as on."""
        return False

    def _power(self, view: View, on: bool) -> bool:
        """Tell the fake the instance's machine is on or off. False: it may not go on (the
        instance no longer runs), and its host is not booted."""
        return True

    def _after_down(self, views: Mapping[str, View], hosted: set[str]) -> None:
        """Called in each pass once the hosts of instances that no longer run are down;
        `hosted` is the ids that still have a host."""

    def _after_close(self) -> None:
        """Called once `close` has closed every host."""

    # -- use ------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.thread_name)
        self._thread.start()

    def close(self) -> None:
        """Stop watching, close every host, and tell the fake its machine is off."""
        self._stop.set()
        if self._thread is not None:  # a pass may be booting a host: let it finish first
            self._thread.join(300)
            if self._thread.is_alive():
                self.errors.append(RuntimeError(f"the {self.thread_name} thread did not stop"))
        with self._lock:
            hosts = [(host, self._views[i]) for i, host in self._hosts.items()]
            self._hosts, self._views = {}, {}
            self._up.clear()
        for host, view in hosts:
            host.close()
            self._power(view, False)
        self._after_close()

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

    def host(self, name: str) -> IsolatedHost | None:
        """The host of instance `name` (running or not), or None."""
        with self._lock:
            return next(
                (h for i, h in self._hosts.items() if self._name(self._views[i]) == name), None
            )

    def running(self) -> dict[str, IsolatedHost]:
        """Instance name -> its host, for the hosts whose sshd accepts connections."""
        with self._lock:
            return {self._name(self._views[i]): self._hosts[i] for i in self._up}

    def wait_for(self, name: str, timeout: float | None = None) -> IsolatedHost:
        """The host of instance `name` once its sshd accepts connections."""
        deadline = time.monotonic() + (self.wait_timeout if timeout is None else timeout)
        while True:
            self.check()
            host = self.running().get(name)
            if host is not None:
                return host
            if time.monotonic() > deadline:
                raise TimeoutError(f"no SSH host came up for {name}")
            time.sleep(0.05)

    def wait_gone(self, name: str, timeout: float | None = None) -> None:
        """Returns once instance `name` has no running host."""
        deadline = time.monotonic() + (self.wait_timeout if timeout is None else timeout)
        while (host := self.host(name)) is not None and (host.running or name in self.running()):
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the host of {name} is still up")
            time.sleep(0.05)

    def wait_pass(self, timeout: float = 60.0) -> None:
        """Returns once the thread has made a whole pass that began after this call (so it
        has seen the fake's state as it is now: e.g. new keys are installed)."""
        with self._pass_done:
            wanted = self._passes + 2
            if not self._pass_done.wait_for(lambda: self._passes >= wanted, timeout):
                raise TimeoutError(f"the {self.thread_name} thread made no pass")
        self.check()

    # -- inside ---------------------------------------------------------------------------
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

    def sync(self) -> None:
        """One pass: hosts for the instances that run, none for the others."""
        now = time.monotonic()
        views = self._instances()
        wanted: dict[str, View] = {}
        for instance_id, view in views.items():
            if not self._runs(view):
                self._seen_running.pop(instance_id, None)
                if self._powered(view) and instance_id not in self._hosts:
                    self._power(view, False)  # no host answers for it
                continue
            first = self._seen_running.setdefault(instance_id, now)
            with self._lock:
                held = self._name(view) in self._held
            if now - first >= self.boot_delay and not held:
                wanted[instance_id] = view
        with self._lock:
            current = dict(self._hosts)
        for instance_id, host in current.items():  # down first: a freed address may be reused
            known = views.get(instance_id)
            if known is None or self._ends(known, host):
                with self._lock:
                    self._up.discard(instance_id)
                host.close()
                with self._lock:
                    del self._hosts[instance_id], self._views[instance_id]
            elif instance_id not in wanted and (host.running or self._powered(known)):
                with self._lock:
                    self._up.discard(instance_id)
                host.stop()
                self._power(known, False)
        with self._lock:
            hosted = set(self._hosts)
        self._after_down(views, hosted)
        for instance_id, view in wanted.items():
            self._boot(instance_id, view)

    def _boot(self, instance_id: str, view: View) -> None:
        with self._lock:
            host = self._hosts.get(instance_id)
        if host is None:
            host = self._new_host(view)
            if self.on_boot is not None:
                self.on_boot(host)
            with self._lock:
                self._hosts[instance_id] = host
                self._views[instance_id] = view
        self._refresh(view, host)
        if host.running:
            return
        if not self._power(view, True):
            return  # no longer running: not booted
        try:
            host.start()
        except BaseException:
            self._power(view, False)
            raise
        self.started.append((self._name(view), host.ip))
        with self._lock:
            self._up.add(instance_id)
