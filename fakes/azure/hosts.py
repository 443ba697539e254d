"""Fake Azure VMs as real SSH hosts (fakes/azure/server.py): an `IsolatedHost` of
fakes/hosts/ssh.py on each running VM's primary NIC's private IP, port 22, also listening
on the VM's public IPs (from the fake's loopback pool)."""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fakes.hosts.instances import InstanceHostWatcher

if TYPE_CHECKING:
    from fakes.azure.compute import VmView
    from fakes.azure.server import AzureServer
    from fakes.hosts.ssh import IsolatedHost

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
CA_INSIDE = "/root/.azure-fake-ca.pem"  # where a host finds the fake's CA


class AzureHosts(InstanceHostWatcher["VmView"]):
    """Makes every VM of `server` that is to run (created or started, not stopping) a real
    SSH host, named by VM name: an `IsolatedHost` at its NIC's private IP (tests put the
    subnet in loopback, e.g. 127.19.0.0/16) and its public IPs, started `boot_delay` s after
    the VM is first seen to run, stopped when it stops, deallocates or is deleted, closed
    once it is gone (fakes/hosts/instances.py).

    While this watches it, the server holds VMs as the GCE fake holds instances: a VM is
    PowerState/running (and its create or start operation Succeeded) only once its host is
    up, and stopped / deallocated / deleted only once its host is down.

    `sessions`: "full" (default) gives sessions `server.host_env(vm)`, below; "machine"
    only `server.machine_env(vm)` (the VM's IMDS and the CA), as a real VM has, so what
    else a session needs must come from the launcher.

    A host lets root and the VM's adminUsername in with the VM's
    osProfile.linuxConfiguration.ssh.publicKeys plus `extra_keys`, re-read on every pass.
    The admin user is an alias of root in the host's own /etc/passwd (uid 0, home /root):
    it logs in by its name, as on Azure, but is not a separate unprivileged account (on
    Azure it is one, with passwordless sudo). Sessions get
    `server.host_env(vm)`: the VM's own IMDS (AZURE_POD_IDENTITY_AUTHORITY_HOST), ARM,
    Entra, the CA bundle and AZURE_CLIENT_ID of its user-assigned identity, so
    ManagedIdentityCredential / DefaultAzureCredential on the host get the identity's token
    and the calls made with it are logged with the VM as `origin`."""

    thread_name = "azure-hosts"
    wait_timeout = 60.0

    def __init__(
        self,
        server: AzureServer,
        extra_keys: Sequence[str] = (),
        boot_delay: float = 0.0,
        poll: float = 0.1,
        on_boot: Callable[[IsolatedHost], None] | None = None,
        sessions: str = "full",
    ) -> None:
        super().__init__(extra_keys, boot_delay, poll, on_boot)
        if sessions not in ("full", "machine"):
            raise ValueError(f"sessions: 'full' or 'machine', not {sessions!r}")
        self.server = server
        self.sessions = sessions

    def start(self) -> None:
        with self.server.cond:
            self.server.hosts_attached += 1
        super().start()

    def _after_close(self) -> None:
        with self.server.cond:
            self.server.hosts_attached = max(0, self.server.hosts_attached - 1)
            # Machines no host will turn on: let the VMs waiting for one go on.
            for vm in self.server.compute.all_vms():
                for key in ("when_on", "when_off"):
                    steps, vm.extra[key] = vm.extra.get(key, []), []
                    for step in steps:
                        step()
            self.server.cond.notify_all()

    def _instances(self) -> Mapping[str, VmView]:
        return {v.vm_id: v for v in self.server.vms()}

    def _name(self, view: VmView) -> str:
        return view.name

    def _runs(self, view: VmView) -> bool:
        return (
            view.runs
            and view.private_ip is not None
            and ipaddress.ip_address(view.private_ip) in LOOPBACK
        )

    def _powered(self, view: VmView) -> bool:
        return view.machine_on

    def _power(self, view: VmView, on: bool) -> bool:
        return self.server.set_machine(view.vm_id, on)

    def _keys(self, view: VmView) -> str:
        return "".join(k.strip() + "\n" for k in [*view.ssh_keys, *self.extra_keys])

    def _new_host(self, view: VmView) -> IsolatedHost:
        from fakes.hosts.ssh import IsolatedHost

        assert view.private_ip is not None
        host = IsolatedHost(view.private_ip, self._keys(view))
        host.extra_ips = [ip for ip in view.public_ips if ipaddress.ip_address(ip) in LOOPBACK]
        admin = view.admin_username
        if admin and admin != "root":
            passwd = host.root / "passwd"
            text = Path("/etc/passwd").read_text()
            passwd.write_text(text + f"{admin}:x:0:0:{admin}:/root:/bin/bash\n")
            host.overlays["/etc/passwd"] = str(passwd)
            host.logins.append(admin)
        if self.sessions == "machine":
            env = self.server.machine_env(view.vm_id)
        else:
            env = self.server.host_env(view.vm_id)
        # The fake's CA, as an image's trusted CAs, inside the host (whose /tmp, where the
        # server keeps it, is its own).
        shutil.copyfile(self.server.ca_bundle, host.path(CA_INSIDE))
        env["REQUESTS_CA_BUNDLE"] = env["SSL_CERT_FILE"] = CA_INSIDE
        host.sshd_options.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
        return host

    def _refresh(self, view: VmView, host: IsolatedHost) -> None:
        keys = host.root / "authorized_keys"
        if keys.read_text() != (wanted := self._keys(view)):
            keys.write_text(wanted)  # sshd reads it at each login
