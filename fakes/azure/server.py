"""A fake Microsoft Azure for provider tests: Azure Resource Manager (resource groups,
Microsoft.Network, Microsoft.Compute, Microsoft.ManagedIdentity, Microsoft.Authorization),
Microsoft Entra's token endpoint and each VM's Instance Metadata Service, on 127.0.0.1,
speaking ARM's JSON so that the real Azure SDK for Python (azure-identity, azure-mgmt-*)
works against it.

    with AzureServer() as server, AzureHosts(server) as hosts:
        c = server.clients()                      # real SDK clients, a token from the fake
        server.set_capacity("Standard_D2s_v3", 0, zone="1")  # creates there fail (LRO)
        ...  # the code under test, with server.env() in its environment
        host = hosts.wait_for("vm-1")             # an sshd on the VM's NIC's private IP
        server.evict("vm-1", notice_s=1)          # spot: Preempt event, then evicted
        server.calls("virtualMachines.create")    # what the code under test asked for

Modules: faults.py (calls, faults, ARM error bodies), routes.py (which operation a path
names), store.py (resources), lro.py (long-running operations), tokens.py (Entra,
principals, tokens), certs.py (the CA), catalog.py (VM sizes, zones), resources.py
(subscriptions, resource groups, generic resources), network.py, compute.py,
identity.py (managed identities, role assignments, authorization), deployments.py and
templates.py (ARM template deployments, each resource made through the handlers above),
skus.py (resource SKUs), imds.py (each VM's IMDS), hosts.py (VMs as SSH hosts).
Self-tests: tests/test_fake_azure.py, tests/test_fake_azure_templates.py.

Wire facts (from the SDK's own code in .venv, checked by the self-test where marked *):
- * ARM and Entra are HTTPS (azure-core's BearerTokenCredentialPolicy refuses http): one
  server on 127.0.0.1:`port` with a certificate of a CA made at start (`ca_bundle`; the
  requests transport reads REQUESTS_CA_BUNDLE, or pass connection_verify). IMDS is plain
  HTTP on a second port, one path prefix per VM (`/vm/{vmId}`): azure-identity 1.27 (through
  msal 1.39's managed identity code) takes AZURE_POD_IDENTITY_AUTHORITY_HOST, path
  included, as the IMDS base.
- * msal, given authority https://127.0.0.1:PORT/TENANT and instance discovery off, reads
  TENANT/v2.0/.well-known/openid-configuration (its `issuer` must equal the authority +
  /v2.0 or share its host), then posts the client-credentials grant to its token_endpoint.
- * ARMPolling (azure-mgmt-core 1.6) polls Azure-AsyncOperation before Location, sleeping
  Retry-After when the answer has one that is not 0, else its polling_interval (the
  client's `polling_interval`, 30 s by default): a `Retry-After: 0` is the same as none.
  Retry-After must be an integer: azure-mgmt-network 33 parses the initial answer's with
  int() (a fraction raises ValueError). The fake's default is `retry_after=1`; tests go
  fast with `retry_after=0` and clients made with a small `polling_interval`
  (`clients(polling_interval=0.05)`); None sends no Retry-After.
- * The SDK's retry policy retries 429 (and 5xx) honouring Retry-After; the mgmt clients'
  status checks: VM PUT 200/201, PATCH 200, DELETE 200/202/204, actions 200/202,
  simulateEviction 204, role assignment PUT 200/201, DELETE 200/204.
- Azure behaviour taken from its documentation, not measurable here: a VM whose
  allocation fails stays, provisioningState Failed, until deleted; spot VMs count against
  the regional low-priority vCPU quota (`lowPriorityCores`), others against their family's
  and the regional total (`cores`); private IPs skip a subnet's first four and last
  address; role assignments to a new principal fail with PrincipalNotFound for a while
  (replication; Azure says setting principalType avoids it: `principal_type_skips_delay`).
- The fake's own choices: the location is free-form (a zone must be 1, 2 or 3); public IPs
  come from 127.20.0.0/16 (`public_pool`); Dynamic public IPs get an address at once like
  Static ones; `lro_s` (0.2 s) is each operation's duration; a VM is PowerState/running only
  once its machine is up when AzureHosts watches the server (at once otherwise); names are
  compared without case, ids keep the casing of creation; a handler that raises answers 500
  InternalServerError and lands in `server.errors`.
"""

from __future__ import annotations

import heapq
import json
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fakes.azure import (  # noqa: F401 (handlers)
    compute,
    deployments,
    identity,
    imds,
    network,
    resources,
    skus,
)
from fakes.azure.catalog import SIZES, Size
from fakes.azure.certs import make_certs
from fakes.azure.compute import VmView
from fakes.azure.faults import ArmError, Call, Fault, Faults, Logged
from fakes.azure.lro import Operation, Operations, seconds
from fakes.azure.routes import Ctx, Reply, Target, find_handler, operation_name, parse
from fakes.azure.store import Resource, Store, now_text, resource_id
from fakes.azure.tokens import (
    Principal,
    TokenBook,
    instance_discovery,
    openid_configuration,
    token_grant,
)
from fakes.faults import CallLog, fire

__all__ = ["SUBSCRIPTION", "TENANT", "ArmError", "AzureServer", "Call", "Fault", "Logged"]

SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"
TENANT = "72f988bf-0000-4000-8000-00000000fake"
_TENANT_PATH = re.compile(
    r"^/([^/]+)/(v2\.0/\.well-known/openid-configuration|oauth2/v2\.0/token)$"
)
REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Clients:
    """Real SDK clients on the fake (see AzureServer.clients)."""

    credential: Any
    resource: Any
    compute: Any
    network: Any
    msi: Any
    authorization: Any


class AzureServer:
    """The fake (see the module docstring), in threads of this process; a context manager
    or start()/stop(). Knobs are methods and attributes, safe to use from any thread."""

    def __init__(
        self,
        subscription: str = SUBSCRIPTION,
        tenant: str = TENANT,
        location: str = "eastus",
        lro_s: float = 0.2,
        retry_after: int | None = 1,
        principal_delay: float = 0.0,
        allocation_error: str = "AllocationFailed",
        eviction_notice_s: float = 30.0,
        public_pool: str = "127.20.0.0/16",
        port: int = 0,
    ) -> None:
        self.subscription = subscription
        self.tenant = tenant
        self.location = location
        self.lro_s = lro_s
        if retry_after is not None and int(retry_after) != retry_after:
            raise ValueError("retry_after must be a whole number of seconds (see the docstring)")
        self.retry_after = retry_after
        self.principal_delay = principal_delay
        self.principal_type_skips_delay = False
        self.allocation_error = allocation_error
        self.eviction_notice_s = eviction_notice_s
        self.public_pool = public_pool
        self.cond = threading.Condition(threading.RLock())
        self.errors: list[BaseException] = []
        self.faults = Faults()
        self.store = Store()
        self.ops = Operations(lambda: self.url, self._notify)
        self.tokens = TokenBook(tenant)
        self.client_id = str(uuid.uuid4())
        self.client_secret = "fake-secret-" + uuid.uuid4().hex
        self.sp = self.tokens.add(
            Principal(
                str(uuid.uuid4()),
                self.client_id,
                "ServicePrincipal",
                "launcher-test",
                secret=self.client_secret,
                owner=True,
            )
        )
        self.sizes: dict[str, Size] = dict(SIZES)
        self.capacity: dict[tuple[str, str | None], tuple[int, str | None]] = {}
        self.restricted: set[tuple[str, str | None]] = set()
        self.quotas: dict[str, tuple[int, str]] = {}
        self.usage_page_size: int | None = None  # the usage list's page (None: one page)
        self.hosts_attached = 0  # AzureHosts watching: machines are theirs to turn on
        self._log = CallLog[Logged]()
        self._seq = 0
        self._timers: list[tuple[float, int, int, Callable[[], None]]] = []
        self._epoch = 0
        self._stopping = False
        self._port = port
        self._imds_port = 0
        self._servers: list[Any] = []
        self._threads: list[threading.Thread] = []
        self.dir = Path(tempfile.mkdtemp(prefix="azure-fake-"))
        self.certs = make_certs(self.dir / "tls")

    # -- lifecycle --

    def __enter__(self) -> AzureServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_request(self, *args: object) -> None:
                pass

        arm = make_server(
            "127.0.0.1",
            self._port,
            self._arm_app,
            threaded=True,
            request_handler=Quiet,
            ssl_context=(str(self.certs.cert), str(self.certs.key)),
        )
        meta = make_server("127.0.0.1", 0, self._imds_app, threaded=True, request_handler=Quiet)
        self._port = arm.server_address[1]
        self._imds_port = meta.server_address[1]
        self._servers = [arm, meta]
        self._stopping = False
        for target, name in (
            (arm.serve_forever, "azure-fake-arm"),
            (meta.serve_forever, "azure-fake-imds"),
            (self._tick, "azure-fake-clock"),
        ):
            thread = threading.Thread(target=target, daemon=True, name=name)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(10)
        self._threads.clear()
        self._servers = []
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- addresses and environments --

    @property
    def port(self) -> int:
        return int(self._port)

    @property
    def url(self) -> str:
        """ARM's base URL and Entra's authority host (https://127.0.0.1:PORT)."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def imds_url(self) -> str:
        return f"http://127.0.0.1:{self._imds_port}"

    @property
    def ca_bundle(self) -> Path:
        return self.certs.ca_bundle

    @property
    def credential_scope(self) -> str:
        return self.url + "/.default"

    def env(self) -> dict[str, str]:
        """The environment of a launcher process using the fake (DefaultAzureCredential's
        EnvironmentCredential takes the client secret)."""
        return {
            "AZURE_TENANT_ID": self.tenant,
            "AZURE_CLIENT_ID": self.client_id,
            "AZURE_CLIENT_SECRET": self.client_secret,
            "AZURE_AUTHORITY_HOST": self.url,
            "AZURE_RESOURCE_MANAGER_ENDPOINT": self.url,
            "AZURE_SUBSCRIPTION_ID": self.subscription,
            "REQUESTS_CA_BUNDLE": str(self.ca_bundle),
            "NO_PROXY": "127.0.0.0/8,localhost",
        }

    def machine_env(self, vm: str) -> dict[str, str]:
        """What a session on VM `vm` (its name or vmId) has from the machine alone, as on a
        real Azure VM: where its IMDS is (the stand-in for 169.254.169.254) and the CA that
        signs the fake's certificates (the stand-in for the image's public CAs). Nothing
        says which subscription, cloud or identity to use: that is the launcher's to give."""
        with self.cond:
            res = self.compute.find_vm(vm)
            if res is None:
                raise KeyError(f"no VM {vm}")
            return {
                "AZURE_POD_IDENTITY_AUTHORITY_HOST": f"{self.imds_url}/vm/{res.props['vmId']}",
                "REQUESTS_CA_BUNDLE": str(self.ca_bundle),
                "SSL_CERT_FILE": str(self.ca_bundle),
                "NO_PROXY": "127.0.0.0/8,localhost",
            }

    def host_env(self, vm: str) -> dict[str, str]:
        """The environment of a session on VM `vm` (its name or vmId): `machine_env` (its
        own IMDS, so ManagedIdentityCredential gets its user-assigned identity's token
        there, and the CA), ARM, Entra and the subscription; AZURE_CLIENT_ID of its first
        user-assigned identity."""
        with self.cond:
            res = self.compute.find_vm(vm)
            if res is None:
                raise KeyError(f"no VM {vm}")
            out = {
                **self.machine_env(vm),
                "AZURE_AUTHORITY_HOST": self.url,
                "AZURE_RESOURCE_MANAGER_ENDPOINT": self.url,
                "AZURE_SUBSCRIPTION_ID": self.subscription,
                "AZURE_TENANT_ID": self.tenant,
            }
            client = self.compute.identity_client_id(res)
            if client:
                out["AZURE_CLIENT_ID"] = client
            return out

    def clients(self, credential: Any = None, polling_interval: float | None = None) -> Clients:
        """The SDK's management clients on the fake, with `credential` (default: a
        ClientSecretCredential of the fake's service principal, authority the fake,
        instance discovery off), trusting the fake's CA; `polling_interval` is the LRO
        pollers' sleep when the fake sends no Retry-After (or 0)."""
        from azure.identity import ClientSecretCredential
        from azure.mgmt.authorization import AuthorizationManagementClient
        from azure.mgmt.compute import ComputeManagementClient
        from azure.mgmt.msi import ManagedServiceIdentityClient
        from azure.mgmt.network import NetworkManagementClient
        from azure.mgmt.resource.resources import ResourceManagementClient

        verify = str(self.ca_bundle)
        if credential is None:
            credential = ClientSecretCredential(
                self.tenant,
                self.client_id,
                self.client_secret,
                authority=self.url,
                disable_instance_discovery=True,
                connection_verify=verify,
            )
        options: dict[str, Any] = {
            "base_url": self.url,
            "credential_scopes": [self.credential_scope],
            "connection_verify": verify,
        }
        if polling_interval is not None:
            options["polling_interval"] = polling_interval
        sub = self.subscription
        return Clients(
            credential,
            ResourceManagementClient(credential, sub, **options),
            ComputeManagementClient(credential, sub, **options),
            NetworkManagementClient(credential, sub, **options),
            ManagedServiceIdentityClient(credential, sub, **options),
            AuthorizationManagementClient(credential, sub, **options),
        )

    # -- knobs --

    def add_size(
        self, name: str, vcpus: int, family: str, memory_gb: float = 4, gpus: int = 0
    ) -> None:
        with self.cond:
            self.sizes[name.lower()] = Size(name, vcpus, memory_gb, family, gpus)

    def set_capacity(
        self, vm_size: str, count: int | None, zone: str | None = None, code: str | None = None
    ) -> None:
        """At most `count` allocated VMs of `vm_size` (in `zone`; None: in the location,
        zones together); None removes the limit. A create or start beyond it is accepted
        and its operation ends Failed with `code` (default: ZonalAllocationFailed for a
        zone's limit, else `allocation_error`, AllocationFailed), the VM left Failed."""
        with self.cond:
            key = (vm_size.lower(), zone)
            if count is None:
                self.capacity.pop(key, None)
            else:
                self.capacity[key] = (count, code)

    def restrict_size(self, vm_size: str, zone: str | None = None, offered: bool = False) -> None:
        """`vm_size` is not offered (in `zone`; None: in the location): a create answers
        409 SkuNotAvailable at once. offered=True lifts it."""
        with self.cond:
            key = (vm_size.lower(), zone)
            if offered:
                self.restricted.discard(key)
            else:
                self.restricted.add(key)

    def set_quota(self, family: str, vcpus: int | None, code: str = "OperationNotAllowed") -> None:
        """The regional vCPU quota of `family` (`standardDSv3Family`; `cores`: all
        regular VMs; `lowPriorityCores`: spot VMs); None: back to the fake's default (1000).
        A create (or start of a deallocated VM) beyond it answers 409 `code` with Azure's
        quota message; the usage list (`compute.usage.list(location)`) gives it as `limit`,
        beside what the location's allocated VMs use (`currentValue`)."""
        with self.cond:
            if vcpus is None:
                self.quotas.pop(family.lower(), None)
            else:
                self.quotas[family.lower()] = (vcpus, code)

    def add_service_principal(self, name: str) -> tuple[str, str, str]:
        """Another service principal with a client secret, holding no role: its calls are
        refused (403 AuthorizationFailed) until `grant` (or a role assignment) allows them.
        Returns (client id, secret, object id); reset() forgets it."""
        with self.cond:
            principal = self.tokens.add(
                Principal(
                    str(uuid.uuid4()),
                    str(uuid.uuid4()),
                    "ServicePrincipal",
                    name,
                    secret="fake-secret-" + uuid.uuid4().hex,
                )
            )
            assert principal.secret is not None
            return principal.client_id, principal.secret, principal.object_id

    def grant(self, object_id: str, role: str, scope: str | None = None) -> None:
        """Role `role` (Owner, Contributor or Reader) to principal `object_id` at `scope`
        (default: the subscription), as a role assignment PUT would."""
        from fakes.azure.identity import ROLES, Assignment

        guid = next(g for g, entry in ROLES.items() if entry[0].lower() == role.lower())
        scope = scope or f"/subscriptions/{self.subscription}"
        with self.cond:
            name = str(uuid.uuid4())
            self.identity.assignments[name] = Assignment(
                name,
                scope,
                guid,
                f"{scope}/providers/Microsoft.Authorization/roleDefinitions/{guid}",
                object_id,
                "ServicePrincipal",
                now_text(),
            )

    def throttle(self, times: int, operation: str = "*", retry_after: float = 1) -> Fault:
        """The next `times` calls matching `operation` answer 429 with Retry-After."""
        return self.faults.throttle(times, operation, retry_after)

    def evict(self, vm: str, notice_s: float = 30.0, wait: bool = False) -> None:
        """Azure reclaims spot VM `vm`: a Preempt scheduled event in its IMDS at once, then
        after `notice_s` (or when the event is approved) the VM is deallocated or deleted by
        its evictionPolicy (once its machine is off). Given `wait`, returns once done."""
        with self.cond:
            done = self.compute.evict(vm, notice_s)
            if wait and not self.cond.wait_for(done, 120):
                raise TimeoutError(f"{vm} was not evicted in 120 s (is its machine stuck on?)")

    def expire_tokens(self) -> None:
        """Every token issued so far is expired (401 ExpiredAuthenticationToken)."""
        with self.cond:
            self.tokens.expire_all()

    def reset(self) -> None:
        """Forget all resources, operations, identities, role assignments, tokens, the call
        log, faults and knobs."""
        with self.cond:
            self._epoch += 1
            self._timers.clear()
            self.store.clear()
            self.ops.clear()
            self.tokens.clear()
            self.identity.reset()
            self.__dict__.pop("_deployments", None)
            self.capacity.clear()
            self.restricted.clear()
            self.quotas.clear()
            self.usage_page_size = None
            self.sizes = dict(SIZES)
            self._log.clear()
            self.errors.clear()
            self.cond.notify_all()
        self.faults.clear()

    # -- views for tests and AzureHosts --

    def vms(self) -> list[VmView]:
        with self.cond:
            return [self.compute.view(r) for r in self.compute.all_vms()]

    def vm(self, name: str) -> VmView | None:
        with self.cond:
            res = self.compute.find_vm(name)
            return None if res is None else self.compute.view(res)

    def resource(self, arm_id: str) -> dict[str, Any] | None:
        """A resource's JSON as the fake holds it (None if gone)."""
        with self.cond:
            res = self.store.find(arm_id)
            return None if res is None else res.answer()

    def resource_ids(self) -> list[str]:
        with self.cond:
            return [r.id for r in self.store.resources.values()]

    def set_machine(self, vm_id: str, on: bool) -> bool:
        """AzureHosts: the VM's machine is on (only while the VM is to run) or off."""
        with self.cond:
            result = self.compute.set_machine(vm_id, on)
            self.cond.notify_all()
            return result

    # -- calls --

    def calls(self, operation: str | None = None) -> list[Logged]:
        """Finished calls, oldest first; `operation` as in faults ("virtualMachines.create";
        a glob)."""
        import fnmatch

        entries = self._log.entries()
        if operation is None:
            return entries
        return [c for c in entries if fnmatch.fnmatch(c.operation.lower(), operation.lower())]

    def clear_calls(self) -> None:
        self._log.clear()

    def next_seq(self) -> int:
        with self.cond:
            self._seq += 1
            return self._seq

    def record(self, call: Call, status: int, error: str | None, injected: bool) -> None:
        self._log.append(Logged(call, status, error, injected))

    # -- scheduling --

    def later(self, delay: float, step: Callable[[], None]) -> None:
        """Run `step` under the lock `delay` seconds from now (at once for 0), unless reset()
        comes first."""
        with self.cond:
            if delay <= 0:
                step()
                self.cond.notify_all()
                return
            self._seq += 1
            heapq.heappush(self._timers, (time.monotonic() + delay, self._seq, self._epoch, step))
            self.cond.notify_all()

    def _tick(self) -> None:
        with self.cond:
            while not self._stopping:
                now = time.monotonic()
                if self._timers and self._timers[0][0] <= now:
                    _, _, epoch, step = heapq.heappop(self._timers)
                    if epoch == self._epoch:
                        try:
                            step()
                        except Exception as error:  # a bug of the fake
                            self.errors.append(error)
                    self.cond.notify_all()
                    continue
                self.cond.wait(self._timers[0][0] - now if self._timers else None)

    def _notify(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    # -- operations helpers for the resource modules --

    def begin(
        self,
        ctx: Ctx,
        target_id: str | None,
        location: str | None = None,
        location_only: bool = False,
    ) -> Operation:
        namespace = (ctx.target.kind or "Microsoft.Resources/x").split("/")[0]
        return self.ops.start(
            ctx.target.sub or self.subscription,
            namespace,
            (location or self.location).replace(" ", "").lower(),
            ctx.target.kind,
            target_id,
            location_only,
        )

    def lro_headers(self, ctx: Ctx, op: Operation, accepted: bool) -> dict[str, str]:
        return self.ops.headers(op, ctx.api_version, self.retry_after, accepted)

    def run_op(
        self,
        ctx: Ctx,
        op: Operation,
        work: Callable[[Operation], None],
        on_fault: Callable[[ArmError], None] | None = None,
        delay: float | None = None,
    ) -> None:
        """After `delay` (lro_s): `work(op)`, which ends `op` (now or later); or, when a
        fault wants this call's operation to fail, `on_fault(error)` and `op` Failed."""
        fault = ctx.op_fault

        def step() -> None:
            if op.done:
                return
            if fault is not None:
                if on_fault is not None:
                    on_fault(fault)
                self.ops.fail(op, fault)
                return
            try:
                work(op)
            except ArmError as error:
                self.ops.fail(op, error)

        self.later(self.lro_s if delay is None else delay, step)

    # -- WSGI: ARM and Entra --

    def _arm_app(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        request_id = str(uuid.uuid4())
        correlation = environ.get("HTTP_X_MS_CORRELATION_REQUEST_ID") or str(uuid.uuid4())
        try:
            reply = self._answer(environ)
        except Exception as error:  # a bug of the fake
            self.errors.append(error)
            reply = Reply(500, ArmError(500, "InternalServerError", f"fake ARM: {error!r}").body())
        verb = environ.get("REQUEST_METHOD", "GET")
        data = b"" if reply.body is None else json.dumps(reply.body).encode()
        headers = [
            ("x-ms-request-id", request_id),
            ("x-ms-correlation-request-id", correlation),
            ("Cache-Control", "no-cache"),
            *reply.headers.items(),
        ]
        if environ.get("HTTP_X_MS_CLIENT_REQUEST_ID"):
            headers.append(("x-ms-client-request-id", environ["HTTP_X_MS_CLIENT_REQUEST_ID"]))
        if reply.body is not None:
            headers.append(("Content-Type", "application/json; charset=utf-8"))
        headers.append(("Content-Length", str(len(data))))
        start_response(f"{reply.status} {REASONS.get(reply.status, 'Status')}", headers)
        return [] if verb == "HEAD" else [data]

    def _answer(self, environ: dict[str, Any]) -> Reply:
        path = re.sub("/+", "/", environ.get("PATH_INFO", "")) or "/"
        verb = environ.get("REQUEST_METHOD", "GET")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        entra = self._entra(path, verb, query, raw)
        if entra is not None:
            return entra
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        with self.cond:
            issued, auth_code = self.tokens.lookup(authorization)
        principal = issued.principal if issued else None
        origin = issued.origin if issued else None
        try:
            target = parse(path)
        except ArmError as error:
            call = Call(
                self.next_seq(),
                verb,
                path,
                query,
                None,
                f"unknown.{verb.lower()}",
                principal=principal,
                origin=origin,
            )
            self.record(call, error.status, error.code, False)
            return Reply(error.status, error.body())
        with self.cond:
            exists = self._exists(target)
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = None
            bad_json: ArmError | None = ArmError(
                400,
                "InvalidRequestContent",
                "The request content was invalid and could not be deserialized.",
            )
        else:
            bad_json = None
        call = Call(
            self.next_seq(),
            verb,
            path,
            query,
            body,
            operation_name(target, verb, exists),
            target.kind,
            target.child or target.name,
            target.rg,
            principal,
            origin,
        )
        if issued is None:
            unauthorized = _auth_error(auth_code, self.url, self.tenant)
            self.record(call, 401, unauthorized.code, False)
            return Reply(401, unauthorized.body(), dict(unauthorized.headers))
        if "api-version" not in query:
            no_version = ArmError(
                400,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )
            self.record(call, 400, no_version.code, False)
            return Reply(400, no_version.body())
        if bad_json is not None:
            self.record(call, 400, bad_json.code, False)
            return Reply(400, bad_json.body())
        with self.cond:
            denied = self.identity.refusal(call, target)
        if denied is not None:
            self.record(call, denied.status, denied.code, False)
            return Reply(denied.status, denied.body())
        return self._handle(call, target, query["api-version"])

    def _exists(self, target: Target) -> bool:
        if target.collection or target.sub is None:
            return False
        if target.kind == "Microsoft.Resources/resourceGroups":
            return f"{target.sub}/{target.rg}".lower() in self.store.groups
        if target.short == "roleAssignments":
            return self.identity.assignment(target.name or "") is not None
        if target.rg is None or target.name is None or target.kind is None:
            return False
        if target.child is not None:
            parent = self.store.maybe(target.sub, target.rg, target.parent_kind or "", target.name)
            return parent is not None and self.network.child(parent, target) is not None
        return self.store.maybe(target.sub, target.rg, target.kind, target.name) is not None

    def _handle(self, call: Call, target: Target, api_version: str) -> Reply:
        failing = fire(self.faults.pick(call), call)
        ctx = Ctx(self, call, target, call.body, api_version)
        injected_code: str | None = None
        if (
            failing is not None
            and failing.through_operation
            and call.method in ("PUT", "DELETE", "POST", "PATCH")
        ):
            ctx.op_fault = failing.arm_error()
            injected_code = failing.error
            failing = None
        reply = Reply(200)
        if failing is None or failing.after:
            handler = find_handler(target, call.method)
            if handler is None:
                error = ArmError(
                    405 if target.kind else 404,
                    "NotImplemented" if target.kind else "NotFound",
                    f"{call.method} {call.operation} is not modelled by the fake ARM.",
                )
                reply = Reply(error.status, error.body())
            else:
                with self.cond:
                    try:
                        reply = handler(ctx)
                        if reply.body is not None:
                            reply.body = json.loads(json.dumps(reply.body))
                    except ArmError as error:
                        reply = Reply(error.status, error.body(), dict(error.headers))
                    except Exception as error:  # a bug of the fake, or a body it cannot read
                        self.errors.append(error)
                        failure = ArmError(500, "InternalServerError", f"fake ARM: {error!r}")
                        reply = Reply(500, failure.body())
                    self.cond.notify_all()
        if failing is not None:
            injected = failing.arm_error()
            reply = Reply(injected.status, injected.body(), dict(injected.headers))
            injected_code = injected.code
        code = None
        if reply.status >= 400 and isinstance(reply.body, dict):
            code = reply.body.get("error", {}).get("code")
        self.record(call, reply.status, code or injected_code, injected_code is not None)
        return reply

    def _entra(self, path: str, verb: str, query: dict[str, str], raw: bytes) -> Reply | None:
        if path == "/common/discovery/instance" and verb == "GET":
            call = Call(self.next_seq(), verb, path, query, None, "instanceDiscovery")
            self.record(call, 200, None, False)
            return Reply(200, instance_discovery(self.url, query))
        match = _TENANT_PATH.match(path)
        if match is None:
            return None
        tenant, what = match.groups()
        if what.startswith("v2.0") and verb == "GET":
            call = Call(self.next_seq(), verb, path, query, None, "openid")
            if tenant.lower() not in (self.tenant.lower(), "organizations", "common"):
                self.record(call, 400, "invalid_tenant", False)
                return Reply(
                    400,
                    {
                        "error": "invalid_tenant",
                        "error_description": f"AADSTS90002: Tenant '{tenant}' not found.",
                    },
                )
            self.record(call, 200, None, False)
            return Reply(200, openid_configuration(self.url, tenant))
        if verb != "POST":
            return Reply(405, {"error": "invalid_request"})
        call = Call(self.next_seq(), verb, path, {}, None, "token")
        fired = fire(self.faults.pick(call), call)
        if fired is not None and not fired.after:
            error = fired.arm_error()
            self.record(call, error.status, error.code, True)
            return Reply(
                error.status,
                {"error": "temporarily_unavailable", "error_description": error.message},
                dict(error.headers),
            )
        with self.cond:
            status, answer, principal = token_grant(self.tokens, tenant, raw)
        call = Call(
            call.seq,
            verb,
            path,
            {},
            None,
            "token",
            principal=principal.object_id if principal else None,
        )
        self.record(call, status, None if status == 200 else answer.get("error"), False)
        return Reply(status, answer)

    # -- WSGI: IMDS --

    def _imds_app(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        try:
            status, body = imds.answer(self, environ)
        except Exception as error:  # a bug of the fake
            self.errors.append(error)
            status, body = 500, {"error": "internal_error", "error_description": repr(error)}
        data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
        start_response(
            f"{status} {REASONS.get(status, 'Status')}",
            [
                ("Content-Type", "application/json; charset=utf-8"),
                ("Content-Length", str(len(data))),
            ],
        )
        return [data]

    # -- the resource modules, made on first use --

    @property
    def compute(self) -> compute.Compute:
        made: compute.Compute = self._module("_compute", compute.Compute)
        return made

    @property
    def network(self) -> network.Network:
        made: network.Network = self._module("_network", network.Network)
        return made

    @property
    def identity(self) -> identity.Identity:
        made: identity.Identity = self._module("_identity", identity.Identity)
        return made

    def _module(self, attr: str, make: Callable[[AzureServer], Any]) -> Any:
        with self.cond:
            if attr not in self.__dict__:
                self.__dict__[attr] = make(self)
            return self.__dict__[attr]

    def resource_id(self, rg: str, kind: str, name: str) -> str:
        return resource_id(self.subscription, rg, kind, name)

    def retry_after_header(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": seconds(self.retry_after)}

    def add_resource(self, res: Resource) -> Resource:
        return self.store.add(res)


def _auth_error(code: str, url: str, tenant: str) -> ArmError:
    messages = {
        "AuthenticationFailed": "Authentication failed. The 'Authorization' header is missing.",
        "InvalidAuthenticationToken": "The access token is invalid.",
        "ExpiredAuthenticationToken": "The access token expiry UTC time is earlier than current UTC time.",
    }
    description = {
        "AuthenticationFailed": "The authentication failed because of missing 'Authorization' header.",
        "InvalidAuthenticationToken": "The access token is invalid.",
        "ExpiredAuthenticationToken": "The access token has expired.",
    }[code]
    return ArmError(
        401,
        code,
        messages[code],
        headers={
            "WWW-Authenticate": f'Bearer authorization_uri="{url}/{tenant}", '
            f'error="invalid_token", error_description="{description}"'
        },
    )
