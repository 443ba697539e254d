"""A fake Google Compute Engine for provider tests: Compute v1, IAM v1, Cloud Resource
Manager v1 and an OAuth2 token endpoint, over HTTP on 127.0.0.1, speaking GCE's JSON so that
the real google-api-python-client and the real gcloud CLI work against it.

    with GceServer() as server, GceHosts(server) as hosts:
        compute = server.client("compute")          # googleapiclient, token from the fake
        server.faults.no_capacity(zone="us-west1-a")  # inserts there end in a failed operation
        ...  # the code under test, with server.env() in its environment
        host = hosts.wait_for("node-1")              # an sshd on the instance's 127.17.x.y
        server.preempt("node-1")                     # spot: TERMINATED (or gone), host off
        server.calls("instances.insert")             # what the code under test asked for

Modules: fakes/gce/faults.py (calls, faults, error bodies), filter.py (list
filters, labels, paging), catalog.py (zones, machine types, images),
compute.py, instance.py and network.py (Compute),
iam.py (IAM, Resource Manager, OAuth2), routes.py (which method a
request names), batch.py (Compute's batch endpoint), metadata.py (each instance's
metadata server), env.py (key file,
environments, gcloud, clients), fakes/gce/hosts.py (instances as SSH hosts). The
self-tests are tests/test_gce_fake.py, test_gce_fake_catalog.py and
test_gce_fake_clients.py (helpers in helpers.py).

Routing comes from the discovery documents googleapiclient ships (compute.v1, iam.v1,
cloudresourcemanager.v1): every method of those APIs is recognised by its path, and the
ones the fake does not model answer 501 naming the method, so a gap shows as such.
Compute lives under /compute/v1/, IAM under /iam/, Resource Manager under /crm/, the token
endpoint at /token. Every API call needs `Authorization: Bearer TOKEN` with a token this
server issued (401 otherwise, which google-auth answers by fetching a new token), and the
permission the project's IAM policy grants the token's account for it, conditions included
(403 otherwise; fakes/gce/authz.py). The key file's account is the project's owner;
the default compute account is an editor, as on a new project.

Facts measured here (the self-tests check those marked *):
- * googleapiclient 2.202 with static discovery and client_options api_endpoint
  `http://127.0.0.1:PORT/compute/v1/` (the suffix is required) sends every Compute call here;
  IAM and Resource Manager take `.../iam/` and `.../crm/` (their discovery paths begin with
  `v1/`). selfLinks, targetLinks and zone URLs in answers use the fake's own base URL, so a
  client that follows them (gcloud does) stays on loopback.
- * google-auth 2.63 service-account credentials post the JWT-bearer grant to the key
  file's token_uri, but the JWT's `aud` is always https://oauth2.googleapis.com/token
  whatever token_uri says; the fake accepts that audience and its own.
- * gcloud 528 honours CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE; `gcloud auth
  activate-service-account --key-file KEY` works against the key's token_uri and later
  commands get their tokens there too (no CLOUDSDK_AUTH_TOKEN_HOST needed;
  CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE=KEY also works, without activating). `gcloud()`
  activates once per server, with CLOUDSDK_CONFIG in the server's temp directory.
- * gcloud in a fresh CLOUDSDK_CONFIG looks up metadata.google.internal through this
  machine's DNS server (10.255.255.53, a query leaving the machine) to learn whether it runs
  on GCE, even with CLOUDSDK_CORE_CHECK_GCE_METADATA=false. A file `gce` containing `False`
  in CLOUDSDK_CONFIG (written by start()) answers that from gcloud's cache, and
  GCE_METADATA_ROOT (in env()) sends any such probe here; the gcloud test runs gcloud under
  strace and checks that every connect() goes to loopback.
- * `gcloud compute instances create NAME --zone Z --machine-type T --image-family F
  --image-project P --labels a=b` calls zones.get, projects.get, instances.insert (no
  requestId), zoneOperations.wait, instances.get. It names the image as a zonal image
  family view, `.../projects/P/zones/-/imageFamilyViews/F` (accepted as the family), asks for
  an access config `external-nat`, automaticRestart true and the `default` service account
  with 7 scopes. `list --filter=labels.a=b` is one aggregatedList (includeAllScopes,
  maxResults 500, returnPartialSuccess) with no server-side filter: gcloud filters itself.
  `describe` is instances.get, `delete --quiet` instances.delete and zoneOperations.wait.
  One request at a time is not batched (several would go to /batch/compute/v1: not
  modelled). Each gcloud command takes 1-2 s here.
- * google-auth 2.63 takes GCE_METADATA_HOST and GCE_METADATA_IP with a path in them
  (127.0.0.1:PORT/meta/INSTANCE_ID): on a host, google.auth.default() pings that root
  (wanting `Metadata-Flavor: Google` back), reads project/project-id, the service account's
  info (?recursive=true) and its token, and returns compute_engine credentials; so each
  instance has its own metadata server here, and the calls made with its token are logged
  with the instance as origin.
- * Ray's own GCPNodeProvider (Ray 2.x in .venv) runs against the fake once
  googleapiclient.discovery.build is given the fake's endpoint (Ray builds its clients
  with static discovery and no endpoint option, and polls operations every 5 s: set the
  Timings to 0 for it). Its list filter, `(labels.K = V) AND ((status = A) OR ...) AND
  (NOT labels.tpu_cores:*)`, parses here. Ray's example configs write `scheduling` as a
  one-element list; the fake takes that element (what GCE does with it is not known here).
- Taken from GCE's documentation and public reports, not measurable here: a capacity
  failure (ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS], QUOTA_EXCEEDED) is an accepted
  insert (operation RUNNING) whose operation ends DONE with error.errors[].code, errorDetails
  and httpErrorStatusCode 503 (403 for quota), the instance never found (404); GPUs need
  onHostMaintenance TERMINATE (the default is MIGRATE); a repeated requestId returns the
  first call's operation; labels allow [a-z0-9_-], keys start with a letter, 63 characters,
  64 labels; the fingerprint of empty labels/metadata is 42WmSpB8rSM=.
- The fake's own choices: addresses 127.17.x.y (x per zone, see catalog.py; y from
  2, the lowest free one), natIP equal to networkIP (never a public address); a stopped
  instance keeps both; an address is free again only when its instance is gone, which
  (with GceHosts) is only once its machine is off. Timings (server.timings) default to
  50 ms per lifecycle step; at 0 a step happens inside the call (an insert answers DONE,
  the instance RUNNING); `server.step()` runs the next step at once for tests that set them
  long. A handler that raises answers 500 internalError and lands in `server.errors`.
"""

from __future__ import annotations

import copy
import heapq
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fakes.faults import CallLog, fire
from fakes.gce.authz import refusal
from fakes.gce.batch import BATCH_PATH, answer_batch
from fakes.gce.compute import Compute
from fakes.gce.env import ClientSide
from fakes.gce.faults import Call, Fault, Faults, GoogleError, Logged
from fakes.gce.iam import Iam
from fakes.gce.metadata import FLAVOR, META_PREFIX, answer_metadata
from fakes.gce.routes import HANDLERS, REASONS, Route, find_route

__all__ = [
    "PROJECT",
    "Call",
    "Fault",
    "Faults",
    "GceServer",
    "GoogleError",
    "InstanceView",
    "Logged",
]

PROJECT = "launcher-test"
PROJECT_NUMBER = "123456789012"
ACCOUNT_ID = "launcher"
_ORIGIN = re.compile(r"\blauncher-origin/(\S+)")


@dataclass(frozen=True)
class InstanceView:
    """An instance as the fake holds it (for assertions and GceHosts)."""

    id: str
    zone: str
    name: str
    status: str
    ip: str
    nat_ip: str | None
    labels: Mapping[str, str]
    ssh_keys: tuple[tuple[str, str], ...]  # (user, "ssh-ed25519 AAAA... comment") it accepts
    termination: str | None  # STOP / DELETE for spot and preemptible instances
    machine_on: bool


class GceServer(ClientSide):
    """The fake on 127.0.0.1:`port` (a free one by default), in threads of this process.
    Use as a context manager or start()/stop(). See the module docstring."""

    def __init__(self, project: str = PROJECT, port: int = 0) -> None:
        self.project = project
        self.project_number = PROJECT_NUMBER
        self.account_email = f"{ACCOUNT_ID}@{project}.iam.gserviceaccount.com"
        self.default_compute_account = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
        self.faults = Faults()
        self.cond = threading.Condition(threading.RLock())
        self._gcloud_ready = False  # the key file is activated in CLOUDSDK_CONFIG
        self.errors: list[BaseException] = []  # exceptions handlers raised (answered 500)
        self.operation_fault: dict[int, tuple[str, int, str | None]] = {}
        self._port = port
        self._log = CallLog[Logged]()
        self._seq = 0
        self._timers: list[tuple[float, int, int, Callable[[], None]]] = []
        self._epoch = 0
        self._stopping = False
        self._server: Any = None
        self._threads: list[threading.Thread] = []
        self.dir = Path(tempfile.mkdtemp(prefix="gce-fake-"))
        self.compute = Compute(self)
        self.iam = Iam(self)

    def __enter__(self) -> GceServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):
            def log_request(self, *args: object) -> None:
                pass

        self._server = make_server(
            "127.0.0.1", self._port, self, threaded=True, request_handler=Quiet
        )
        self._port = self._server.server_address[1]
        self._stopping = False
        for target, name in (
            (self._server.serve_forever, "gce-fake-http"),
            (self._tick, "gce-fake-clock"),
        ):
            thread = threading.Thread(target=target, daemon=True, name=name)
            thread.start()
            self._threads.append(thread)
        self._write_key()
        (self.dir / "gcloud").mkdir(exist_ok=True)
        # gcloud's cached answer to "am I on GCE?": without it, its first run probes the
        # metadata server (GCE_METADATA_ROOT, also set, points that probe here).
        (self.dir / "gcloud" / "gce").write_text("False")
        self._gcloud_ready = False

    def stop(self) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(10)
        self._threads.clear()
        self._server = None
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- state, log, scheduling --

    def calls(self, method: str | None = None) -> list[Logged]:
        """Finished calls, oldest first; `method` as in faults ("instances.insert")."""
        with self.cond:
            return [
                c
                for c in self._log.entries()
                if method is None or c.method == method or c.method.endswith("." + method)
            ]

    def clear_calls(self) -> None:
        with self.cond:
            self._log.clear()

    def reset(self) -> None:
        """Forget all instances, operations, firewalls, metadata, accounts and policies, the
        call log and faults, and pending lifecycle steps; timings back to their defaults."""
        from fakes.gce.compute import Timings

        with self.cond:
            self._epoch += 1
            self._timers.clear()
            self.compute.reset()
            self.compute.timings = Timings()
            self.iam.reset()
            self._log.clear()
            self.operation_fault.clear()
            self.errors.clear()
            self.cond.notify_all()
        self.faults.clear()

    @property
    def timings(self) -> Any:
        """The lifecycle's step durations (fakes/gce/compute.py Timings); settable."""
        return self.compute.timings

    def later(self, delay: float, step: Callable[[], None]) -> None:
        """Run `step` (under the lock) `delay` seconds from now, unless reset() comes first.
        A step of 0 s runs at once, inside the call that made it: with all Timings at 0 an
        insert answers with its operation DONE and the instance RUNNING."""
        with self.cond:
            if delay <= 0:
                step()
                self.cond.notify_all()
                return
            self._seq += 1
            heapq.heappush(self._timers, (time.monotonic() + delay, self._seq, self._epoch, step))
            self.cond.notify_all()

    def step(self) -> bool:
        """Run the next scheduled lifecycle step now, whenever it was due (with Timings set
        long, a test moves instances and operations along one step at a time). False if
        none is pending."""
        with self.cond:
            while self._timers:
                _, _, epoch, step = heapq.heappop(self._timers)
                if epoch == self._epoch:
                    step()
                    self.cond.notify_all()
                    return True
            return False

    def _tick(self) -> None:
        with self.cond:
            while not self._stopping:
                now = time.monotonic()
                if self._timers and self._timers[0][0] <= now:
                    _, _, epoch, step = heapq.heappop(self._timers)
                    if epoch == self._epoch:
                        step()
                    self.cond.notify_all()
                    continue
                self.cond.wait(self._timers[0][0] - now if self._timers else None)

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 60.0) -> bool:
        """Block until `predicate()` (called under the lock, after each change) is true."""
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def instances(self) -> list[InstanceView]:
        with self.cond:
            return [self._view(vm) for vm in self.compute.vms.values()]

    def instance(self, name: str, zone: str | None = None) -> InstanceView | None:
        return next(
            (v for v in self.instances() if v.name == name and zone in (None, v.zone)), None
        )

    def _view(self, vm: Any) -> InstanceView:
        nic = vm.res["networkInterfaces"][0]
        nat = next((c.get("natIP") for c in nic.get("accessConfigs", [])), None)
        return InstanceView(
            vm.res["id"],
            vm.zone,
            vm.name,
            vm.res["status"],
            vm.ip,
            nat,
            dict(vm.res["labels"]),
            tuple(self._ssh_keys(vm.res)),
            vm.termination,
            vm.machine_on,
        )

    def _ssh_keys(self, res: Mapping[str, Any]) -> list[tuple[str, str]]:
        own = {i["key"]: i["value"] for i in res["metadata"].get("items", [])}
        project = {i["key"]: i["value"] for i in self.compute.project_metadata["items"]}
        texts = [own.get("ssh-keys", ""), own.get("sshKeys", "")]
        if own.get("block-project-ssh-keys", "").lower() != "true":
            texts += [project.get("ssh-keys", ""), project.get("sshKeys", "")]
        keys = []
        for line in "\n".join(texts).splitlines():
            user, sep, key = line.strip().partition(":")
            if sep and key.strip().startswith(("ssh-", "ecdsa-", "sk-")):
                keys.append((user, key.strip()))
        return keys

    def set_machine(self, zone: str, name: str, on: bool) -> bool:
        """GceHosts: the instance's machine is on (only while RUNNING) or off."""
        with self.cond:
            return self.compute.set_machine(zone, name, on)

    def preempt(self, name: str, zone: str | None = None, wait: bool = True) -> dict[str, Any]:
        """GCE reclaims spot / preemptible instance `name`: STOPPING, then (once its machine is
        off, when GceHosts runs one) TERMINATED for instanceTerminationAction STOP, or gone for
        DELETE, recorded as a DONE `compute.instances.preempted` zone operation. ValueError for
        an instance that is not spot/preemptible or not running. Given `wait`, returns once
        the operation is DONE (GceHosts must be running to turn a live machine off)."""
        with self.cond:
            view = self.instance(name, zone)
            if view is None:
                raise ValueError(f"no instance {name}")
            op = self.compute.preempt(view.zone, name)
            if wait and not self.cond.wait_for(lambda: op["status"] == "DONE", 120):
                raise TimeoutError(f"{name} was not preempted in 120 s (is its machine stuck on?)")
            return copy.deepcopy(op)

    # -- WSGI --

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        headers = []
        if environ.get("PATH_INFO") == BATCH_PATH and environ.get("REQUEST_METHOD") == "POST":
            status, content_type, data = answer_batch(self, environ)
        elif environ.get("PATH_INFO", "").startswith(META_PREFIX):
            status, content_type, data = answer_metadata(self, environ)
            headers.append(FLAVOR)
        else:
            status, body = self._answer(environ)
            content_type, data = "application/json; charset=UTF-8", json.dumps(body).encode()
        start_response(
            f"{status} {REASONS.get(status, 'Status')}",
            [("Content-Type", content_type), ("Content-Length", str(len(data))), *headers],
        )
        return [data]

    def _answer(self, environ: dict[str, Any]) -> tuple[int, Any]:
        path = environ.get("PATH_INFO", "")
        verb = environ.get("REQUEST_METHOD", "GET")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        origin = _ORIGIN.search(environ.get("HTTP_USER_AGENT", ""))
        seq = self.next_seq()
        if path == "/token" and verb == "POST":
            status, answer = self.iam.token(raw)
            call = Call(seq, "oauth2.token", verb, path, {}, None, None, origin and origin.group(1))
            self.record(call, status, answer.get("error") if status != 200 else None, False)
            return status, answer
        route, params = find_route(verb, path)
        if route is None:
            error = GoogleError(
                404,
                "notFound",
                f"The requested URL {path} was not found on this server (fake GCE).",
            )
            return 404, error.body()
        params.update(query)
        compute = route.api == "compute"
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            error = GoogleError(400, "parseError", "Invalid JSON payload received.")
            return 400, error.body(compute)
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        call = Call(
            seq,
            route.method,
            verb,
            path,
            params,
            body,
            params.get("zone"),
            (origin and origin.group(1)) or self.iam.token_origin(authorization),
        )
        owner = self.iam.token_owner(authorization)
        call = replace(call, caller=owner)
        if owner is None:
            error = GoogleError(
                401,
                "authError",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                "login cookie or other valid authentication credential.",
                location="Authorization",
                locationType="header",
            )
            self.record(call, 401, "authError", False)
            return 401, error.body(compute)
        denied = refusal(self, owner, call)
        if denied is not None:
            self.record(call, 403, denied.reason, False)
            return 403, denied.body(compute)
        return self._handle(route, call, compute)

    def _handle(self, route: Route, call: Call, compute: bool) -> tuple[int, Any]:
        failing = fire(self.faults.pick(call), call)
        handler = HANDLERS.get(call.method)
        if failing is not None and failing.through_operation and route.returns_operation:
            assert failing.error is not None
            with self.cond:
                self.operation_fault[call.seq] = (
                    failing.error,
                    failing.http_status(),
                    failing.message,
                )
            failing = None
            injected_code: str | None = self.operation_fault[call.seq][0]
        else:
            injected_code = None
        status, answer, reason = 200, None, None
        if failing is None or failing.after:
            if handler is None:
                error = GoogleError(
                    501, "notImplemented", f"{call.method} is not modelled by the fake GCE."
                )
                status, answer, reason = 501, error.body(compute), "notImplemented"
            else:
                with self.cond:
                    try:
                        earlier = self.compute.replay(call) if route.returns_operation else None
                        answer = json.loads(json.dumps(earlier or handler(self, call)))
                    except GoogleError as error:
                        status, answer, reason = error.status, error.body(compute), error.reason
                    except Exception as error:  # a bug of the fake, or a body it cannot read
                        self.errors.append(error)
                        failure = GoogleError(500, "internalError", f"fake GCE: {error!r}")
                        status, answer, reason = 500, failure.body(compute), "internalError"
                    finally:
                        self.operation_fault.pop(call.seq, None)
        if failing is not None:
            assert failing.error is not None
            status = failing.http_status()
            message = failing.message or _fault_message(failing.error, call, self.project)
            answer = GoogleError(status, failing.error, message).body(compute)
            reason = failing.error
        self.record(
            call, status, reason or injected_code, failing is not None or injected_code is not None
        )
        return status, answer

    def next_seq(self) -> int:
        with self.cond:
            self._seq += 1
            return self._seq

    def record(self, call: Call, status: int, error: str | None, injected: bool) -> None:
        with self.cond:
            self._log.append(Logged(call, status, error, injected))


def _fault_message(reason: str, call: Call, project: str) -> str:
    from fakes.gce.faults import default_message

    return default_message(reason, call.zone, project)


def ssh_keys_value(*entries: tuple[str, str]) -> str:
    """The `ssh-keys` metadata value for (user, public key line) pairs."""
    return "\n".join(f"{user}:{key.strip()}" for user, key in entries)
