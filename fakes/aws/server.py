"""A fake AWS for provider tests: moto's real EC2/IAM/STS HTTP server on 127.0.0.1, with
wire-level fault injection, a call log, loopback VPCs and instances that are real SSH hosts.

    with MotoServer() as server, InstanceHosts(server) as hosts:
        ec2 = server.client("ec2")
        vpc = loopback_vpc(ec2)
        server.faults.add("RunInstances", "InsufficientInstanceCapacity", market="spot")
        ...  # the code under test, with server.env() in its environment
        hosts.wait_for(instance_id)              # an sshd on the instance's 127.16.x.y
        interrupt_spot(server, instance_id, hosts)

`MotoServer` serves moto's WSGI app (werkzeug, threaded, a free port) and is itself the WSGI
middleware in front of it: it logs every call (`server.calls()`), answers with AWS's error XML
and HTTP status when a fault matches (`server.faults.add(...)`, fakes/aws/faults.py), makes
RunInstances idempotent on its ClientToken as EC2 is (moto is not), and can keep new instances
`pending` for a while (`server.pending_for`) or missing from DescribeInstances for a while
(`server.describe_lag`, EC2's eventual consistency). Requests reach moto one at a time (`server.lock`:
moto's backends are not thread-safe); a fault's `delay` and `effect` run outside that lock.
`InstanceHosts` (fakes/aws/hosts.py) turns running instances into SSH hosts.

Facts about moto 5.2.5 / botocore 1.44 measured here (tests/test_aws_fake.py checks the ones
marked *; /work/notes/moto-facts.md has more):
- moto's state lives in process-global backends: every server in a process shares it, so
  run one per process; * `reset()` empties all of it (and the call log, faults, pending).
- * Instances in a subnet of a 127.16.0.0/16 VPC get private IPs from the 4th address on
  (127.16.1.4, .5, ...: the first three are reserved as on AWS), in the subnet's zone.
  * Public IPs come only with AssociatePublicIpAddress (or MapPublicIpOnLaunch, or no
  subnet) and are 54.214.x.y, never 127.x: a provider must use private IPs
  (use_internal_ips: true) against this fake. * Without a subnet moto gives a random
  10.x.y.z private IP (EC2-Classic style) and a public one: addresses never to contact.
- * RunInstances answers `pending`; moto then reports `running` at once (see `pending_for`).
  * Stop/start keep the private IP; stop sets StateReason Client.UserInitiatedShutdown.
- * TerminateInstances answers `shutting-down`; the instance is then listed as `terminated`
  with StateReason Client.UserInitiatedShutdown, forever (AWS: for about an hour).
  * Unknown instance ids are InvalidInstanceID.NotFound.
- * Filters `tag:KEY`, `instance-state-name`, `subnet-id`, `state-reason-code` work (also, per
  moto's code: `tag-key`, `instance-id`, `vpc-id`, `availability-zone`, `instance-type`,
  `key-name`, `private-ip-address`). * An unsupported filter (`instance-lifecycle`) is an
  HTML 500 page, which botocore retries and then raises as ResponseParserError.
- * A KeyName without such key pair is accepted (AWS: InvalidKeyPair.NotFound); * a missing
  security group is InvalidGroup.NotFound; * a missing IamInstanceProfile is NoSuchEntity,
  an existing one shows in IamInstanceProfile.Arn. * CreateKeyPair returns the private key
  (RSA: PEM "BEGIN RSA PRIVATE KEY"; KeyType ed25519: OpenSSH format) and moto keeps the
  public key (DescribeKeyPairs IncludePublicKey=True; `server.public_key(name)`).
- * InstanceMarketOptions MarketType=spot gives InstanceLifecycle "spot"; moto never
  interrupts, so * `interrupt_spot` does (terminated, StateReason Server.SpotInstanceTermination).
- * TagSpecifications tag the instances; RunInstances' answer carries the tags.
- * EC2 answers capacity errors (InsufficientInstanceCapacity...) with HTTP 500, so botocore
  retries them, and each retry is a call that faults see: * botocore 1.44's default retry
  mode is `standard` (3 attempts: "reached max retries: 2"), `legacy` makes 5 attempts.
  * RequestLimitExceeded is a 503, retried as throttling. A client that wants the first
  error sets Config(retries={"total_max_attempts": 1}) (`max_attempts: 1` still retries once).
- * botocore fills RunInstances' ClientToken itself, the same for its retries, so with this
  server a RunInstances whose first answer was lost (a fault with after=True) and that
  botocore retries returns the same instances, as on EC2.
- * boto3 reads `endpoint_url` and `sdk_ua_app_id` from the shared config file, so a process
  on a host (the autoscaler on the head) finds this server through the host's
  /root/.aws/config, and its calls carry the instance id as `Call.origin`.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from fakes.aws.faults import Call, Fault, Faults, Logged, error_body, status_for
from fakes.aws.hosts import LOOPBACK_NET, InstanceHosts
from fakes.faults import CallLog, fire

__all__ = [
    "LOOPBACK_NET",
    "Call",
    "Fault",
    "Faults",
    "InstanceHosts",
    "InstanceView",
    "Logged",
    "LoopbackVpc",
    "MotoServer",
    "interrupt_spot",
    "loopback_vpc",
    "status_for",
]

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account, which the fake credentials map to
ACCESS_KEY = SECRET_KEY = "testing"
EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"


# -- the server -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceView:
    """An instance as moto's backend holds it (read directly, for assertions)."""

    id: str
    region: str
    state: str
    state_reason: str
    private_ip: str | None
    public_ip: str | None
    key_name: str | None
    subnet_id: str | None
    zone: str | None
    instance_type: str
    lifecycle: str  # "spot" or "on-demand"
    tags: Mapping[str, str]


Response = tuple[int, list[tuple[str, str]], bytes]
_SCOPE = re.compile(r"Credential=[^/]+/\d+/([^/]+)/([^/]+)/aws4_request")
_APP_ID = re.compile(r"\bapp/(\S+)")


class MotoServer:
    """moto's EC2/IAM/STS endpoint on 127.0.0.1:`port` (a free port by default), in a
    thread of this process. Use as a context manager or start()/stop().

    As EC2 does (and moto does not), a terminated instance's private IP goes back to its
    subnet and is the next one handed out there, so a new node often takes over a gone
    node's address. EC2 frees it only once the machine is off: while `InstanceHosts` runs
    machines for the instances (`hosts_own_addresses`), it frees each address after closing
    the machine's host, so no new instance shares an address with a live machine."""

    def __init__(self, region: str = REGION, port: int = 0) -> None:
        self.region = region
        self.faults = Faults()
        self.lock = threading.RLock()  # held while moto handles a request
        self.pending_for = 0.0  # seconds new instances stay `pending`
        self.describe_lag = 0.0  # seconds new instances are missing from DescribeInstances
        self.hosts_own_addresses = False  # set by InstanceHosts: see the class docstring
        self._launched: dict[str, float] = {}  # instance id -> made while describe_lag > 0
        self._port = port
        self._log = CallLog[Logged]()
        self._seq = 0
        self._pending: dict[str, float] = {}  # instance id -> when it becomes running
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="moto-"))
        self._app: Any = None

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        class QuietHandler(MotoRequestHandler):
            def log_request(self, *args: object) -> None:  # one line per call otherwise
                pass

        # moto's state is process-global: an earlier server's instances (another test
        # module's) would otherwise show up here, and be made hosts on the same addresses.
        self.reset()
        self._app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            "127.0.0.1", self._port, self, threaded=True, request_handler=QuietHandler
        )
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.write_aws_files(self._dir)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None
        shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def port(self) -> int:
        return int(self._port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the environment of clients --

    def env(self) -> dict[str, str]:
        """Variables that send boto3 here, with fake credentials, this region, no IMDS and
        none of this machine's own ~/.aws files. Unset AWS_PROFILE too (`apply_env`)."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(self._dir / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self._dir / "credentials"),
        }

    def apply_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in self.env().items():
            monkeypatch.setenv(name, value)

    def write_aws_files(self, directory: Path, app_id: str | None = None) -> None:
        """`config` and `credentials` in `directory` (e.g. a host's /root/.aws) that send
        boto3 here, as an instance profile would give credentials on AWS."""
        directory.mkdir(parents=True, exist_ok=True)
        config = ["[default]", f"region = {self.region}", f"endpoint_url = {self.url}"]
        if app_id:
            config.append(f"sdk_ua_app_id = {app_id}")
        (directory / "config").write_text("\n".join(config) + "\n")
        (directory / "credentials").write_text(
            f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        )

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client for this server (whatever the environment says); `config` goes to
        botocore.config.Config (e.g. retries={"total_max_attempts": 1})."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            region_name=self.region,
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(**config),
        )

    # -- the log and the backend --

    def calls(self, action: str | None = None, service: str | None = None) -> list[Logged]:
        with self.lock:
            return [
                c
                for c in self._log.entries()
                if action in (None, c.call.action) and service in (None, c.call.service)
            ]

    def clear_calls(self) -> None:
        with self.lock:
            self._log.clear()

    def reset(self) -> None:
        """Forget everything: moto's state (all services), the call log, faults, and the
        `pending_for` and `describe_lag` settings."""
        from moto.core.base_backend import BackendDict

        with self.lock:
            BackendDict.reset()
            self._log.clear()
            self._pending.clear()
            self._launched.clear()
            self.pending_for = self.describe_lag = 0.0
        self.faults.clear()

    def ec2_backend(self, region: str | None = None) -> Any:
        """moto's EC2 backend of `region` (hold `lock` while using it)."""
        from moto.ec2.models import ec2_backends

        return ec2_backends[ACCOUNT][region or self.region]

    def instances(self) -> list[InstanceView]:
        """Every instance in every region moto has state for, as the backend holds it."""
        from moto.ec2.models import ec2_backends

        with self.lock:
            self._promote_pending()
            regions = list((ec2_backends.get(ACCOUNT) or {}).items())
            return [
                _view(region, instance)
                for region, backend in regions
                for instance in backend.all_instances()
            ]

    def public_key(self, key_name: str, region: str | None = None) -> str | None:
        """The OpenSSH public key moto holds for key pair `key_name` (created or imported)."""
        with self.lock:
            pair = self.ec2_backend(region).key_pairs.get(key_name)
            return pair.material_public.decode() if pair else None

    def free_address(self, instance_id: str) -> None:
        """Give terminated `instance_id`'s private IP back to its subnet (see the class
        docstring); a no-op for an instance that is not terminated or not known."""
        with self.lock:
            if (instance := self._instance(instance_id)) is not None:
                free_address(instance.ec2_backend, instance)

    def _instance(self, instance_id: str) -> Any:
        """moto's instance `instance_id`, in whichever region holds it, or None."""
        for backend in self._ec2_regions().values():
            if (instance := backend.get_instance_by_id(instance_id)) is not None:
                return instance
        return None

    def _terminated(self, backend: Any, instance: Any) -> None:
        if not self.hosts_own_addresses:
            free_address(backend, instance)

    def _promote_pending(self) -> None:
        now = time.monotonic()
        for instance_id, ready in list(self._pending.items()):
            if ready > now:
                continue
            del self._pending[instance_id]
            instance = self._instance(instance_id)
            if instance is not None and instance.state == "pending":
                instance._state.name, instance._state.code = "running", 16

    def _ec2_regions(self) -> dict[str, Any]:
        from moto.ec2.models import ec2_backends

        return dict((ec2_backends.get(ACCOUNT) or {}).items())

    # -- WSGI: the fault injector in front of moto --

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        call = self._parse(environ)
        failing = fire(self.faults.pick(call), call)
        response: Response | None = None
        if failing is None or failing.after:
            response = self._forward(environ, call)
        if failing is not None:
            assert failing.error is not None
            status = failing.error_status()
            body = error_body(call, failing.error, failing.error_message(call), status)
            response = (status, [("Content-Type", "text/xml")], body)
        assert response is not None
        status, headers, body = response
        error = None
        if status >= 400:
            found = re.search(rb"<Code>([^<]+)</Code>", body)
            error = found.group(1).decode() if found else f"HTTP {status}"
        with self.lock:
            self._log.append(Logged(call, status, error, failing is not None))
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(
            f"{status} {_REASONS.get(status, 'Status')}",
            [*headers, ("Content-Length", str(len(body)))],
        )
        return [body]

    def _parse(self, environ: dict[str, Any]) -> Call:
        body = b""
        if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
        params = dict(parse_qsl(body.decode(), keep_blank_values=True))
        scope = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
        region, service = scope.groups() if scope else (None, None)
        action = params.get("Action") or environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2]
        app_id = _APP_ID.search(environ.get("HTTP_USER_AGENT", ""))
        with self.lock:
            self._seq += 1
            seq = self._seq
            zone = params.get("Placement.AvailabilityZone")
            subnet = params.get("SubnetId") or params.get("NetworkInterface.1.SubnetId")
            if zone is None and subnet and service == "ec2":
                with contextlib.suppress(Exception):
                    zone = self.ec2_backend(region).get_subnet(subnet).availability_zone
        return Call(
            seq, service, region, action or None, params, zone, app_id.group(1) if app_id else None
        )

    def _forward(self, environ: dict[str, Any], call: Call) -> Response:
        with self.lock:
            self._promote_pending()
            token = call.params.get("ClientToken")
            if call.service == "ec2" and call.action == "RunInstances" and token:
                backend = self.ec2_backend(call.region)
                earlier = [i.id for i in backend.all_instances() if i.client_token == token]
                if earlier:  # EC2 answers a repeated token with the instances it launched
                    return self._replay_run(environ, earlier)
            response = self._moto(environ)
            if call.service != "ec2" or response[0] != 200:
                return response
            if call.action == "RunInstances":
                self._launched_now(call, response[2])
            if call.action == "TerminateInstances":
                backend = self.ec2_backend(call.region)
                for key, value in call.params.items():
                    if key.startswith("InstanceId.") and (i := backend.get_instance_by_id(value)):
                        self._terminated(backend, i)
            if call.action == "DescribeInstances" and self.describe_lag > 0:
                return self._hide_recent(call, response)
            return response

    def _moto(self, environ: dict[str, Any]) -> Response:
        captured: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
            captured[:] = [int(status.split(maxsplit=1)[0]), list(headers)]

        chunks = self._app(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        return captured[0], captured[1], body

    def _replay_run(self, environ: dict[str, Any], instance_ids: list[str]) -> Response:
        form = {"Action": "DescribeInstances", "Version": "2016-11-15"}
        form.update({f"InstanceId.{n}": i for n, i in enumerate(instance_ids, 1)})
        body = urlencode(form).encode()
        sub = dict(environ, CONTENT_LENGTH=str(len(body)), **{"wsgi.input": io.BytesIO(body)})
        status, headers, answer = self._moto(sub)
        if status != 200:
            return status, headers, answer
        described = ET.fromstring(answer)
        for element in described.iter():  # moto's namespace, whatever its spelling
            element.tag = element.tag.rpartition("}")[2]
        reservation = described.find("reservationSet/item")
        root = ET.Element("RunInstancesResponse", xmlns=EC2_XMLNS)
        ET.SubElement(root, "requestId").text = str(uuid.uuid4())
        root.extend(list(reservation) if reservation is not None else [])
        return 200, [("Content-Type", "text/xml")], ET.tostring(root, encoding="UTF-8")

    def _launched_now(self, call: Call, answer: bytes) -> None:
        now = time.monotonic()
        backend = self.ec2_backend(call.region)
        for instance_id in re.findall(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", answer):
            if self.describe_lag > 0:
                self._launched[instance_id.decode()] = now
            instance = backend.get_instance_by_id(instance_id.decode())
            if instance is not None and self.pending_for > 0:
                ready = now + self.pending_for
                instance._state.name, instance._state.code = "pending", 0
                self._pending[instance.id] = ready

    def _hide_recent(self, call: Call, response: Response) -> Response:
        """DescribeInstances without the instances launched less than `describe_lag` ago,
        as EC2's eventual consistency may answer; naming one is InvalidInstanceID.NotFound."""
        now = time.monotonic()
        recent = {i for i, made in self._launched.items() if now - made < self.describe_lag}
        named = [v for k, v in call.params.items() if k.startswith("InstanceId.")]
        if missing := [i for i in named if i in recent]:
            message = f"The instance ID '{missing[0]}' does not exist"
            body = error_body(call, "InvalidInstanceID.NotFound", message, 400)
            return 400, [("Content-Type", "text/xml")], body
        root = ET.fromstring(response[2])
        for element in root.iter():
            element.tag = element.tag.rpartition("}")[2]
        reservations = root.find("reservationSet")
        for reservation in list(reservations if reservations is not None else []):
            instances = reservation.find("instancesSet")
            for item in list(instances if instances is not None else []):
                if item.findtext("instanceId") in recent and instances is not None:
                    instances.remove(item)
            if instances is None or len(instances) == 0:
                assert reservations is not None
                reservations.remove(reservation)
        root.set("xmlns", EC2_XMLNS)
        return 200, response[1], ET.tostring(root, encoding="UTF-8")


_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _view(region: str, instance: Any) -> InstanceView:
    return InstanceView(
        id=instance.id,
        region=region,
        state=instance.state,
        state_reason=instance.state_reason.code,
        private_ip=instance.private_ip,
        public_ip=instance.public_ip,
        key_name=instance.key_name,
        subnet_id=instance.subnet_id,
        zone=instance.placement.zone,
        instance_type=instance.instance_type,
        lifecycle=instance.lifecycle or "on-demand",
        tags={t["key"]: t["value"] for t in instance.get_tags()},
    )


# -- a VPC in loopback space ----------------------------------------------------------------


@dataclass(frozen=True)
class LoopbackSubnet:
    id: str
    cidr: str
    zone: str


@dataclass(frozen=True)
class LoopbackVpc:
    id: str
    subnets: tuple[LoopbackSubnet, ...]

    @property
    def subnet_ids(self) -> list[str]:
        return [s.id for s in self.subnets]


def amazon_image(server: MotoServer) -> str:
    """The id of an image moto lists as Amazon's (any will do for a launch)."""
    return str(server.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def loopback_vpc(
    ec2: Any,
    region: str = REGION,
    zones: Sequence[str] = ("a", "b", "c"),
    tags: Mapping[str, str] | None = None,
) -> LoopbackVpc:
    """A VPC 127.16.0.0/16 with one subnet per zone suffix: 127.16.1.0/24 in REGIONa,
    127.16.2.0/24 in REGIONb, ... VPC and subnets carry `tags` (default
    {"launcher-test": "loopback"}) and a Name, so a provider can find them by tag or a
    config can name them (SubnetIds)."""
    tags = dict(tags or {"launcher-test": "loopback"})

    def spec(kind: str, name: str) -> list[dict[str, Any]]:
        pairs = {**tags, "Name": name}
        return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in pairs.items()]}]

    vpc = ec2.create_vpc(CidrBlock=str(LOOPBACK_NET), TagSpecifications=spec("vpc", "loopback"))
    vpc_id = vpc["Vpc"]["VpcId"]
    subnets = []
    for number, suffix in enumerate(zones, 1):
        cidr, zone = f"127.16.{number}.0/24", f"{region}{suffix}"
        made = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=cidr,
            AvailabilityZone=zone,
            TagSpecifications=spec("subnet", f"loopback-{zone}"),
        )
        subnets.append(LoopbackSubnet(made["Subnet"]["SubnetId"], cidr, zone))
    return LoopbackVpc(vpc_id, tuple(subnets))


def free_address(backend: Any, instance: Any) -> None:
    """Give terminated `instance`'s private IP back to its subnet (unless it already went
    to another instance), first in line for the next launch there."""
    if instance.state != "terminated" or not instance.subnet_id or not instance.private_ip:
        return
    with contextlib.suppress(Exception):
        subnet = backend.get_subnet(instance.subnet_id)
        if subnet._subnet_ips.get(instance.private_ip) is instance:
            subnet.del_subnet_ip(instance.private_ip)


def interrupt_spot(
    server: MotoServer, instance_id: str, hosts: InstanceHosts | None = None
) -> None:
    """AWS reclaims spot instance `instance_id`: it is terminated with StateReason
    Server.SpotInstanceTermination. Given `hosts`, its machine goes off first (its host is
    stopped), so on return its address is free for the next launch in its subnet."""
    from moto.ec2.models.instances import StateReason

    with server.lock:
        instance = server._instance(instance_id)
        if instance is None:
            raise ValueError(f"no instance {instance_id}")
        if instance.lifecycle != "spot":
            raise ValueError(f"{instance_id} is not a spot instance: AWS does not reclaim it")
    if hosts is not None:
        hosts.hold(instance_id)
        hosts.wait_gone(instance_id)
    with server.lock:
        instance.terminate()
        code = "Server.SpotInstanceTermination"
        instance.state_reason = StateReason(f"{code}: Spot instance termination", code)
        instance._reason = ""
        if hosts is None:
            server._terminated(instance.ec2_backend, instance)
        else:  # the machine is off
            free_address(instance.ec2_backend, instance)
    if hosts is not None:
        hosts.release(instance_id)


def tag(instance: Mapping[str, Any], key: str) -> str | None:
    """The value of tag `key` on an instance as DescribeInstances gives it."""
    return next((t["Value"] for t in instance.get("Tags", ()) if t["Key"] == key), None)
