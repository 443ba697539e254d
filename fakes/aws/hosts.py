"""Moto instances as real SSH hosts (fakes/aws/server.py's `InstanceHosts`): an `IsolatedHost`
of fakes/hosts/ssh.py on each running instance's private IP in loopback space."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from fakes.hosts.instances import InstanceHostWatcher

if TYPE_CHECKING:
    from fakes.aws.server import InstanceView, MotoServer
    from fakes.hosts.ssh import IsolatedHost

LOOPBACK_NET = ipaddress.ip_network("127.16.0.0/16")


class InstanceHosts(InstanceHostWatcher["InstanceView"]):
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
    backend every `poll` seconds (fakes/hosts/instances.py). Instances are named by id.

    `started` lists every (instance id, IP) a host was started on; `outside` the running
    instances never hosted because their IP is outside `network` (e.g. moto's 10.x when
    launched without a subnet); `errors` what went wrong in the thread (`check()` raises the
    first)."""

    thread_name = "instance-hosts"
    wait_timeout = 30.0

    def __init__(
        self,
        server: MotoServer,
        extra_keys: Sequence[str] = (),
        boot_delay: float = 0.0,
        network: ipaddress.IPv4Network | ipaddress.IPv6Network = LOOPBACK_NET,
        poll: float = 0.2,
        on_boot: Callable[[IsolatedHost], None] | None = None,
    ) -> None:
        super().__init__(extra_keys, boot_delay, poll, on_boot)
        self.server = server
        self.network = network
        self.outside: set[tuple[str, str | None]] = set()
        self._freed: set[str] = set()  # terminated instances whose address was given back
        server.hosts_own_addresses = True  # until close()

    def _instances(self) -> Mapping[str, InstanceView]:
        return {v.id: v for v in self.server.instances()}

    def _name(self, view: InstanceView) -> str:
        return view.id

    def _runs(self, view: InstanceView) -> bool:
        if view.state != "running":
            return False
        if view.private_ip is None or ipaddress.ip_address(view.private_ip) not in self.network:
            self.outside.add((view.id, view.private_ip))
            return False
        return True

    def _ends(self, view: InstanceView, host: IsolatedHost) -> bool:
        return view.state == "terminated" or host.ip != view.private_ip

    def _after_down(self, views: Mapping[str, InstanceView], hosted: set[str]) -> None:
        for view in views.values():  # machines off: their addresses may go to new instances
            if view.state == "terminated" and view.id not in hosted | self._freed:
                self.server.free_address(view.id)
                self._freed.add(view.id)

    def _after_close(self) -> None:
        self.server.hosts_own_addresses = False
        for view in self.server.instances():
            self.server.free_address(view.id)

    def _new_host(self, view: InstanceView) -> IsolatedHost:
        from fakes.hosts.ssh import IsolatedHost

        keys = list(self.extra_keys)
        if view.key_name and (key := self.server.public_key(view.key_name, view.region)):
            keys.insert(0, key)
        assert view.private_ip is not None
        host = IsolatedHost(view.private_ip, "".join(k.strip() + "\n" for k in keys))
        self.server.write_aws_files(host.home / ".aws", app_id=view.id)
        return host
