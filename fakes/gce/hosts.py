"""Fake GCE instances as real SSH hosts (fakes/gce/server.py): an `IsolatedHost` of
fakes/hosts/ssh.py on each RUNNING instance's networkIP (127.17.x.y), port 22."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from fakes.hosts.instances import InstanceHostWatcher

if TYPE_CHECKING:
    from fakes.gce.server import GceServer, InstanceView
    from fakes.hosts.ssh import IsolatedHost

LOOPBACK_NET = ipaddress.ip_network("127.17.0.0/16")


class GceHosts(InstanceHostWatcher["InstanceView"]):
    """Makes every RUNNING instance of `server` a real SSH host: an `IsolatedHost` on its
    networkIP, started `boot_delay` seconds after the instance is first seen RUNNING,
    stopped (powered off: its home stays, like a disk) when the instance leaves RUNNING
    (stop, preemption, deletion), closed once the instance is gone. Instances are named by
    name; a thread polls the server every `poll` seconds (fakes/hosts/instances.py).

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
    boots.

    `started` lists every (instance name, IP) a host was started on; `errors` what went
    wrong in the thread (`check()` raises the first)."""

    thread_name = "gce-hosts"
    wait_timeout = 60.0

    def __init__(
        self,
        server: GceServer,
        extra_keys: Sequence[str] = (),
        boot_delay: float = 0.0,
        poll: float = 0.1,
        on_boot: Callable[[IsolatedHost], None] | None = None,
        credentials: str = "metadata",
    ) -> None:
        super().__init__(extra_keys, boot_delay, poll, on_boot)
        self.server = server
        self.credentials = credentials

    def _instances(self) -> Mapping[str, InstanceView]:
        return {v.id: v for v in self.server.instances()}

    def _name(self, view: InstanceView) -> str:
        return view.name

    def _runs(self, view: InstanceView) -> bool:
        return view.status == "RUNNING" and ipaddress.ip_address(view.ip) in LOOPBACK_NET

    def _powered(self, view: InstanceView) -> bool:
        return view.machine_on

    def _power(self, view: InstanceView, on: bool) -> bool:
        return self.server.set_machine(view.zone, view.name, on)

    def _keys(self, view: InstanceView) -> str:
        keys = [key for _, key in view.ssh_keys] + self.extra_keys
        return "".join(k.strip() + "\n" for k in keys)

    def _new_host(self, view: InstanceView) -> IsolatedHost:
        from fakes.hosts.ssh import IsolatedHost

        host = IsolatedHost(view.ip, self._keys(view))
        self.server.write_google_files(host.home, key=self.credentials == "key")
        env = self.server.host_env(view.id)
        host.sshd_options.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
        return host

    def _refresh(self, view: InstanceView, host: IsolatedHost) -> None:
        keys = host.root / "authorized_keys"
        if keys.read_text() != (wanted := self._keys(view)):
            keys.write_text(wanted)  # sshd reads it at each login
