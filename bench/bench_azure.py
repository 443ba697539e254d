"""Our Azure provider against Ray's (`AzureNodeProvider`), both against the same fake Azure
Resource Manager (fakes/azure/server.py's AzureServer on 127.0.0.1, HTTPS, the real Azure
SDK) in one run: wall time and ARM calls (by operation, from the fake's call log; the
deployment engine's own calls inside the fake are not the client's and are left out) to
launch N workers, list them, terminate them, and launch N when zone 1 has no capacity
(zones "1,2"); then the calls of one autoscaler tick's listing at 100 and 1,000 VMs.

    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/bench_azure.py
        [--repeat 3] [--workers 1,10] [--scale 100,1000] [--arm-like-workers 1,10]

Settings of the fake, the same for both sides: "fast" (each operation 50 ms, no
Retry-After, both sides' pollers every 50 ms) and "ARM-like" (each operation 200 ms,
Retry-After: 1 as ARM sends it, which both SDK pollers obey).

Each round starts on a reset fake with the same resource group, location eastus, zones
"1,2", internal IPs, no stopped-node cache, Standard_D2s_v3 with the same image. Ours is
`AzureProvider` built as the contract harness builds it (`parse_config`, `make_provider`,
`bootstrap()`); Ray's is `ray.autoscaler._private._azure.node_provider.AzureNodeProvider`
after Ray's `bootstrap_azure` (its config template deployed on the fake). Bootstrap is
untimed. "launch" is the provider's create call, then waiting (on the fake's own view, no
API calls) until each VM is running; "terminate" is the provider's terminate call, then
waiting (same way) until no VM, NIC, public IP or disk is left. "failover": zone 1 of
Standard_D2s_v3 has no capacity; the create call is timed and what runs after it counted.

ADAPTER (bench only; Ray's code is not changed): Ray 2.60's Azure modules cannot run
against any endpoint but Azure's, nor import with the SDK installed here:
- `azure.common.credentials` (needs msrestazure, for `get_cli_profile`, which Ray calls only
  without a subscription_id; one is given) is replaced by a stub module;
- `azure.mgmt.resource.ResourceManagementClient` is gone from azure-mgmt-resource 26 (its
  deployments are azure-mgmt-resource-deployments now): Ray's modules get a stand-in whose
  `resource_groups`, `resources`, `providers` come from azure-mgmt-resource 26 and
  `deployments` from azure-mgmt-resource-deployments 2.0; `DeploymentMode` likewise;
- Ray builds its credential (AzureCliCredential / DefaultAzureCredential) and its clients
  with Azure's public endpoint and no way to change it: its modules' names are bound to
  factories making the same clients with the fake's base_url, credential scope, CA and
  poll interval, and the same ClientSecretCredential our provider gets from the environment;
- `get_cloud_from_metadata_requests` (HTTP to 169.254.169.254 and metadata.google.internal,
  never allowed here) answers "unknown" without a request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from bench import common
from bench.common import expect, show_time, silence_ray_logs, wait_for
from fakes.azure.server import AzureServer
from launcher.config.loader import Overrides, parse_config
from launcher.errors import CapacityError
from launcher.providers.azure.provider import AzureProvider
from launcher.providers.base import TAG_CLUSTER, TAG_KIND, TAG_TYPE, NodeKind
from launcher.providers.factory import make_provider

CLUSTER = "bench-az"
GROUP = "rg-bench"
LOCATION = "eastus"
SIZE = "Standard_D2s_v3"
SUBNET = "127.19.0.0/16"
IMAGE = {
    "imagePublisher": "microsoft-dsvm",
    "imageOffer": "ubuntu-2204",
    "imageSku": "2204-gen2",
    "imageVersion": "latest",
}
LISTINGS = 3
WAIT_S = 300.0
SETTINGS = {  # name -> (lro_s, retry_after, pollers' interval)
    "fast": (0.05, None, 0.05),
    "ARM-like": (0.2, 1, 0.05),
}
GONE_KINDS = ("virtualmachines", "networkinterfaces", "publicipaddresses", "/disks/")
T = TypeVar("T")


class Side(Protocol):
    label: str

    def prepare(self, server: AzureServer) -> None: ...

    def launch(self, count: int) -> int: ...

    def listing(self) -> list[str]: ...

    def tick(self) -> int: ...

    def terminate(self, ids: Sequence[str]) -> None: ...

    def worker_tags(self) -> dict[str, str]: ...


# -- ours -----------------------------------------------------------------------------------


class Ours:
    label = "ours"

    def __init__(self) -> None:
        self._provider: AzureProvider | None = None

    @property
    def provider(self) -> AzureProvider:
        assert self._provider is not None
        return self._provider

    def prepare(self, server: AzureServer) -> None:
        image = ", ".join(f"{k}: {v}" for k, v in IMAGE.items())
        node = f"{{azure_arm_parameters: {{vmSize: {SIZE}, {image}}}}}"
        text = f"""
cluster_name: {CLUSTER}
max_workers: 2000
provider:
  type: azure
  location: {LOCATION}
  resource_group: {GROUP}
  availability_zone: '1,2'
  use_internal_ips: true
  cache_stopped_nodes: false
  subnet_mask: {SUBNET}
  allow_ssh_from: [127.0.0.0/8]
auth: {{ssh_user: ubuntu}}
available_node_types:
  head: {{node_config: {node}, resources: {{CPU: 2}}, max_workers: 0}}
  worker: {{node_config: {node}, resources: {{CPU: 2}}, max_workers: 2000}}
head_node_type: head
"""
        provider = make_provider(parse_config(text, "bench.yaml", Overrides()))
        assert isinstance(provider, AzureProvider)
        self._provider = provider
        provider.bootstrap()
        self.listing()

    def launch(self, count: int) -> int:
        worker = self.provider.config.node_types["worker"]
        try:
            return len(self.provider.create_nodes(worker, NodeKind.WORKER, count, {}))
        except CapacityError as error:
            return len(error.created)

    def listing(self) -> list[str]:
        return [n.id for n in self.provider.nodes() if n.kind is NodeKind.WORKER]

    def tick(self) -> int:
        """One tick of our daemon reads the provider once: one listing."""
        return len(self.provider.nodes())

    def terminate(self, ids: Sequence[str]) -> None:
        self.provider.terminate_nodes(ids)

    def worker_tags(self) -> dict[str, str]:
        return {TAG_CLUSTER: CLUSTER, TAG_KIND: "worker", TAG_TYPE: "worker"}


# -- Ray's ------------------------------------------------------------------------------------


class Ray:
    label = "Ray"

    def __init__(self) -> None:
        self._provider: Any = None
        self._tags: dict[str, str] = {}

    def node_config(self) -> dict[str, Any]:
        return {"azure_arm_parameters": {"vmSize": SIZE, **IMAGE}}

    def prepare(self, server: AzureServer) -> None:
        from ray.autoscaler._private import util as ray_util
        from ray.autoscaler._private._azure import config as ray_config
        from ray.autoscaler._private._azure import node_provider as ray_provider
        from ray.autoscaler.tags import (
            NODE_KIND_WORKER,
            STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG,
            TAG_RAY_NODE_KIND,
            TAG_RAY_NODE_NAME,
            TAG_RAY_NODE_STATUS,
            TAG_RAY_USER_NODE_TYPE,
        )

        config = {
            "cluster_name": CLUSTER,
            "provider": {
                "type": "azure",
                "location": LOCATION,
                "resource_group": GROUP,
                "subscription_id": server.subscription,
                "availability_zone": "1,2",
                "use_internal_ips": True,
                "cache_stopped_nodes": False,
                "subnet_mask": SUBNET,
            },
            "auth": {"ssh_user": "ubuntu"},
            "available_node_types": {
                "worker": {"node_config": self.node_config(), "resources": {"CPU": 2}}
            },
        }
        bootstrap: Any = ray_config.bootstrap_azure  # untyped, as the rest of Ray's
        config = bootstrap(config)
        factory: Any = ray_provider.AzureNodeProvider
        self._provider = factory(config["provider"], CLUSTER)
        hash_launch_conf: Any = ray_util.hash_launch_conf
        self._node_config = config["available_node_types"]["worker"]["node_config"]
        self._tags = {
            TAG_RAY_NODE_NAME: f"ray-{CLUSTER}-worker",
            TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
            TAG_RAY_NODE_STATUS: STATUS_UNINITIALIZED,
            TAG_RAY_LAUNCH_CONFIG: hash_launch_conf(self._node_config, config["auth"]),
            TAG_RAY_USER_NODE_TYPE: "worker",
        }
        self.listing()

    def launch(self, count: int) -> int:
        try:
            self._provider.create_node(self._node_config, dict(self._tags), count)
        except Exception as error:  # Ray's autoscaler logs it and tries again next update
            self.last_error = str(error).splitlines()[0]
        return -1  # counted from the fake

    def listing(self) -> list[str]:
        return list(self._provider.non_terminated_nodes({}))

    def tick(self) -> int:
        """The provider calls of one StandardAutoscaler update (Ray's v1 autoscaler, as in
        bench_gcp.py): a listing, then tags and internal IPs from its cache."""
        provider = self._provider
        ids = provider.non_terminated_nodes({})
        for node_id in ids:
            provider.node_tags(node_id)
            provider.node_tags(node_id)
            provider.internal_ip(node_id)
        return len(ids)

    def terminate(self, ids: Sequence[str]) -> None:
        self._provider.terminate_nodes(list(ids))

    def worker_tags(self) -> dict[str, str]:
        return {"ray-cluster-name": CLUSTER, **self._tags}


# -- the adapter for Ray's modules (see the module docstring) -------------------------------


class _PositionalResources:
    """azure-mgmt-resource 26's `resources` operations, taking `list_by_resource_group`'s
    filter and `get_by_id`'s api_version positionally, as the older SDK Ray was written for
    did (26 makes them keyword-only)."""

    def __init__(self, operations: Any) -> None:
        self._operations = operations

    def __getattr__(self, name: str) -> Any:
        return getattr(self._operations, name)

    def list_by_resource_group(
        self, group: str, filter: str | None = None, expand: str | None = None, **kw: Any
    ) -> Any:
        return self._operations.list_by_resource_group(group, filter=filter, expand=expand, **kw)

    def get_by_id(self, resource_id: str, api_version: str, **kw: Any) -> Any:
        return self._operations.get_by_id(resource_id, api_version=api_version, **kw)


@contextlib.contextmanager
def rays_azure_on(server: AzureServer, poll_s: float) -> Iterator[None]:
    from azure.identity import ClientSecretCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient
    from azure.mgmt.resource import deployments as deployments_sdk
    from azure.mgmt.resource import resources as resources_sdk

    def credential(*_: Any, **__: Any) -> Any:
        return ClientSecretCredential(
            server.tenant,
            server.client_id,
            server.client_secret,
            authority=server.url,
            disable_instance_discovery=True,
            connection_verify=str(server.ca_bundle),
        )

    def options() -> dict[str, Any]:
        return {
            "base_url": server.url,
            "credential_scopes": [server.credential_scope],
            "connection_verify": str(server.ca_bundle),
            "polling_interval": poll_s,
        }

    class ResourceClient:
        """azure-mgmt-resource < 24's ResourceManagementClient, from its two successors."""

        def __init__(self, cred: Any, subscription: str, **_: Any) -> None:
            resources = resources_sdk.ResourceManagementClient(cred, subscription, **options())
            self.resource_groups = resources.resource_groups
            self.resources = _PositionalResources(resources.resources)
            self.providers = resources.providers
            self.deployments = deployments_sdk.DeploymentsMgmtClient(
                cred, subscription, **options()
            ).deployments

    def on_fake(cls: Any) -> Callable[..., Any]:
        return lambda cred, subscription, **_: cls(cred, subscription, **options())

    stub = types.ModuleType("azure.common.credentials")

    def get_cli_profile() -> Any:
        raise RuntimeError("bench adapter: no Azure CLI here; give provider.subscription_id")

    stub.get_cli_profile = get_cli_profile  # type: ignore[attr-defined]
    saved_stub = sys.modules.get("azure.common.credentials")
    sys.modules["azure.common.credentials"] = stub
    import azure.mgmt.resource as resource_pkg

    resource_pkg.ResourceManagementClient = ResourceClient  # type: ignore[attr-defined]
    resources_sdk.models.DeploymentMode = deployments_sdk.models.DeploymentMode  # type: ignore[attr-defined]
    from ray.autoscaler._private._azure import config as ray_config
    from ray.autoscaler._private._azure import node_provider as ray_provider

    patches: list[tuple[Any, str, Any]] = [
        (ray_config, "ResourceManagementClient", ResourceClient),
        (ray_config, "AzureCliCredential", credential),
        (ray_provider, "ResourceManagementClient", ResourceClient),
        (ray_provider, "ComputeManagementClient", on_fake(ComputeManagementClient)),
        (ray_provider, "NetworkManagementClient", on_fake(NetworkManagementClient)),
        (ray_provider, "DefaultAzureCredential", credential),
        (ray_provider, "get_cloud_from_metadata_requests", lambda: "unknown"),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        if saved_stub is not None:
            sys.modules["azure.common.credentials"] = saved_stub


# -- measuring --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measure:
    seconds: float
    calls: Mapping[str, int]  # operation -> client calls the fake saw
    made: int = 0  # VMs running after a launch


def client_calls(server: AzureServer) -> Counter[str]:
    return Counter(
        c.operation
        for c in server.calls()
        if not (c.origin or "").startswith("deployment:") and c.operation not in ("openid",)
    )


def timed(server: AzureServer, work: Callable[[], T]) -> tuple[T, Measure]:
    server.clear_calls()
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    return result, Measure(seconds, dict(client_calls(server)))


def running_vms(server: AzureServer) -> list[str]:
    return [v.name for v in server.vms() if getattr(v, "power", "") == "running"]


def vm_names(server: AzureServer) -> list[str]:
    return [v.name for v in server.vms()]


def node_resources(server: AzureServer) -> list[str]:
    return [r for r in server.resource_ids() if any(k in r.lower() for k in GONE_KINDS)]


def wait_running(server: AzureServer, count: int) -> None:
    wait_for(lambda: len(running_vms(server)) >= count, "VMs running", WAIT_S, poll_s=0.01)


def one_round(
    server: AzureServer, side: Side, count: int, setting: str, quiet: bool
) -> dict[str, Measure]:
    lro_s, retry_after, _ = SETTINGS[setting]
    server.reset()
    server.lro_s, server.retry_after = lro_s, retry_after
    server.store  # noqa: B018
    with common.muted(quiet):
        server.clients().resource.resource_groups.create_or_update(GROUP, {"location": LOCATION})
        side.prepare(server)

        def launch_all() -> None:
            side.launch(count)
            wait_running(server, count)

        def terminate_all() -> None:
            side.terminate(ids)
            wait_for(lambda: not node_resources(server), "all gone", WAIT_S, poll_s=0.01)

        _, launch = timed(server, launch_all)
        ids = side.listing()
        expect(f"{side.label}: listed {len(ids)} of {count}", len(ids) == count)
        _, listing = timed(server, lambda: [side.listing() for _ in range(LISTINGS)])
        _, gone = timed(server, terminate_all)
        server.set_capacity(SIZE, 0, zone="1")
        _, failover = timed(server, lambda: side.launch(count))
        made = len(running_vms(server))
        failover = Measure(failover.seconds, failover.calls, made)
        server.set_capacity(SIZE, None, zone="1")
    expect(f"{side.label}: the fake failed: {server.errors}", not server.errors)
    return {"launch": launch, "list": listing, "gone": gone, "failover": failover}


def scale_round(server: AzureServer, side: Side, count: int, quiet: bool) -> Measure:
    """`count` VMs of the side's cluster made inside the fake (Ray's VM template deployed
    with the side's tags, in batches of at most 500; untimed), then one tick timed."""
    from azure.mgmt.resource.deployments import DeploymentsMgmtClient
    from ray.autoscaler._private._azure import node_provider as ray_provider

    server.reset()
    server.lro_s, server.retry_after = 0.05, None
    with common.muted(quiet):
        server.clients().resource.resource_groups.create_or_update(GROUP, {"location": LOCATION})
        side.prepare(server)
        clients = server.clients(polling_interval=0.05)
        deployer = DeploymentsMgmtClient(
            clients.credential,
            server.subscription,
            base_url=server.url,
            credential_scopes=[server.credential_scope],
            connection_verify=str(server.ca_bundle),
            polling_interval=0.1,
        ).deployments
        template = json.loads(
            (Path(ray_provider.__file__).parent / "azure-vm-template.json").read_text()
        )
        subnet = next(iter(clients.network.virtual_networks.list(GROUP))).subnets[0].id
        nsg = next(iter(clients.network.network_security_groups.list(GROUP))).id
        msi = next(iter(clients.msi.user_assigned_identities.list_by_resource_group(GROUP))).id
        made = 0
        batch = 0
        while made < count:
            n = min(500, count - made)
            params = {
                "vmName": f"scale{batch}-",
                "adminUsername": "ubuntu",
                "publicKey": "ssh-rsa AAAAB3NzaC1yc2E bench",
                "vmSize": SIZE,
                "vmTags": side.worker_tags(),
                "vmCount": n,
                "provisionPublicIp": False,
                "msi": msi,
                "nsg": nsg,
                "subnet": subnet,
                "zones": ["1", "2"],
                **IMAGE,
            }
            body = {
                "properties": {
                    "mode": "Incremental",
                    "template": template,
                    "parameters": {k: {"value": v} for k, v in params.items()},
                }
            }
            deployer.begin_create_or_update(GROUP, f"scale{batch}", cast(Any, body)).result()
            made += n
            batch += 1
        wait_running(server, count)
        seen, tick = timed(server, side.tick)
    expect(f"{side.label}: a tick saw {seen} of {count} VMs", seen >= count)
    return tick


# -- reporting --------------------------------------------------------------------------------

SHORT = {
    "deployments.create": "deployment PUT",
    "deployments.update": "deployment PUT",
    "operations.get": "op poll",
    "operationResults.get": "result poll",
    "publicIPAddresses.create": "pip PUT",
    "networkInterfaces.create": "nic PUT",
    "virtualMachines.create": "vm PUT",
    "virtualMachines.get": "vm GET",
    "virtualMachines.instanceView": "instanceView",
    "virtualMachines.list": "vm list",
    "networkInterfaces.get": "nic GET",
    "publicIPAddresses.get": "pip GET",
    "virtualMachines.delete": "vm DELETE",
    "networkInterfaces.delete": "nic DELETE",
    "publicIPAddresses.delete": "pip DELETE",
    "disks.delete": "disk DELETE",
    "skus.listAll": "skus list",
    "deployments.get": "deployment GET",
    "token": "token",
}


def median_measure(measures: Sequence[Measure]) -> Measure:
    ops = sorted({a for m in measures for a in m.calls})
    calls = {a: statistics.median_low(m.calls.get(a, 0) for m in measures) for a in ops}
    made = statistics.median_low(m.made for m in measures)
    return Measure(statistics.median(m.seconds for m in measures), calls, made)


def show_calls(measure: Measure, per: int = 1) -> str:
    return common.show_calls(measure.calls, SHORT, per)


def total_calls(measure: Measure, per: int = 1) -> float:
    return sum(n for op, n in measure.calls.items() if op != "token") / per


ROWS = {
    "launch": "launch N workers until running",
    "list": f"list, per call ({LISTINGS} in a row)",
    "gone": "terminate N until VMs, NICs, IPs, disks gone",
    "failover": "launch N, zone 1 out of capacity (running after)",
}


def table_row(title: str, count: int, pair: Mapping[str, Sequence[Measure]], per: int) -> str:
    cells: list[str] = []
    medians = {label: median_measure(ms) for label, ms in pair.items() if ms}
    for label in ("ours", "Ray"):
        m = medians.get(label)
        if m is None:
            cells += ["n/a", ""]
            continue
        extra = f" [{m.made} of {count} running]" if title.startswith("launch N, zone") else ""
        cells += [show_time(m.seconds / per) + extra, show_calls(m, per)]
    if len(medians) == 2:
        ours, ray = medians["ours"], medians["Ray"]
        cells.append(f"{ours.seconds / ray.seconds:.2f}x")
        cr = total_calls(ray, per)
        cells.append(f"{total_calls(ours, per) / cr:.2f}x" if cr else "n/a")
    else:
        cells += ["n/a", "n/a"]
    return f"| {title} | {count} | " + " | ".join(cells) + " |"


HEADER = (
    "| action | N | ours | calls | Ray | calls | time ours / Ray | calls ours / Ray |\n"
    "| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |"
)


def report(
    results: Mapping[tuple[str, str, int, str], Sequence[Measure]],
    ticks: Mapping[tuple[int, str], Measure],
    scales: Sequence[int],
    repeat: int,
) -> None:
    print(f"medians of {repeat}; calls per action (per listing for 'list'); the fake's")
    print("deployment engine's own calls are not counted (a client never makes them)")
    for setting, what in (
        ("fast", "each operation 50 ms, no Retry-After, pollers every 50 ms"),
        ("ARM-like", "each operation 200 ms, Retry-After: 1 on every operation"),
    ):
        rows = [(r, c) for (s, r, c, _) in results if s == setting]
        if not rows:
            continue
        print(f"\nfake's setting: {setting} ({what})\n")
        print(HEADER)
        for row, title in ROWS.items():
            for count in sorted({c for r, c in rows if r == row}):
                pair = {
                    label: results.get((setting, row, count, label), [])
                    for label in ("ours", "Ray")
                }
                print(table_row(title, count, pair, LISTINGS if row == "list" else 1))
    if ticks:
        print("\none autoscaler tick's provider calls (ours: the daemon's one listing; Ray's: one")
        print("StandardAutoscaler update: a listing, then tags and IPs from its cache), fast\n")
        print(HEADER)
        for count in scales:
            pair = {label: [ticks[(count, label)]] for label in ("ours", "Ray")}
            print(table_row("one tick", count, pair, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="1,10,50", help="N in the fast setting (0: none)")
    parser.add_argument("--arm-like-workers", default="1,10", help="N with Retry-After 1 (0: none)")
    parser.add_argument("--scale", default="100,1000", help="VMs for the tick (0: none)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    plans = [
        ("fast", n)
        for n in common.counts(
            args.workers, "--workers", prog="bench_azure", example="1,10", top=200
        )
    ]
    plans += [
        ("ARM-like", n)
        for n in common.counts(
            args.arm_like_workers, "--arm-like-workers", prog="bench_azure", example="1,10", top=200
        )
    ]
    scales = common.counts(args.scale, "--scale", prog="bench_azure", example="1,10", top=1600)

    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    results: dict[tuple[str, str, int, str], list[Measure]] = {}
    ticks: dict[tuple[int, str], Measure] = {}
    quiet = not args.verbose
    with contextlib.ExitStack() as stack:
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-azure-home-"))
        os.environ["HOME"] = home  # Ray's and our SSH keys
        os.environ["LAUNCHER_HOME"] = home
        server = stack.enter_context(AzureServer())
        os.environ.update(server.env())
        os.environ["LAUNCHER_AZURE_POLL_S"] = str(SETTINGS["fast"][2])
        stack.enter_context(rays_azure_on(server, SETTINGS["fast"][2]))
        if quiet:
            silence_ray_logs(stack)
        sides: list[Side] = [Ours(), Ray()]
        for side in sides:  # warm-up, untimed
            one_round(server, side, 1, "fast", quiet)
        for repeat in range(args.repeat):
            order = sides if repeat % 2 == 0 else sides[::-1]
            for setting, count in plans:
                for side in order:
                    measures = one_round(server, side, count, setting, quiet)
                    for row, m in measures.items():
                        results.setdefault((setting, row, count, side.label), []).append(m)
                    done = ", ".join(f"{r} {show_time(m.seconds)}" for r, m in measures.items())
                    print(f"  {setting} N={count} {side.label}: {done}", file=sys.stderr)
            loads.append(os.getloadavg()[0])
            print(
                f"repeat {repeat + 1}/{args.repeat} done ({time.monotonic() - started:.0f} s, "
                f"load {loads[-1]:.1f})",
                file=sys.stderr,
            )
        for count in scales:
            for side in sides:
                ticks[(count, side.label)] = scale_round(server, side, count, quiet)
                print(f"  tick at {count} VMs {side.label} done", file=sys.stderr)
        left_vms = len(vm_names(server))
    report(results, ticks, scales, args.repeat)
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print(
        f"\n{time.monotonic() - started:.0f} s in all; load average (1 min) "
        f"{min(loads):.1f} to {max(loads):.1f}; VMs left in the fake at the end: {left_vms}; "
        f"threads left: {len(left)}"
    )


if __name__ == "__main__":
    main()
