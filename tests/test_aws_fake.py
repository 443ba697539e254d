"""The fake AWS of fakes/aws/server.py, through boto3 over HTTP: moto's behaviour we rely on,
fault injection, the call log, loopback instances as SSH hosts and spot interruptions.
No launcher code: these prove the test infrastructure the AWS provider is tested with."""

from __future__ import annotations

import io
import ipaddress
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.retries.standard
import botocore.retryhandler
import paramiko
import pytest
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError

from fakes.aws.server import (
    LOOPBACK_NET,
    REGION,
    Call,
    InstanceHosts,
    LoopbackVpc,
    MotoServer,
    interrupt_spot,
    loopback_vpc,
)

AMI = "ami-03cf127a"  # one of the images moto ships

# Every address this process connects to while these tests run (audit hook: it sees
# botocore's, paramiko's and the fake's own sockets alike).
_connected: list[Any] = []
_recording = threading.Event()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect" and _recording.is_set():
        _connected.append(args[1])


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    _recording.set()
    try:
        with MotoServer() as server:
            yield server
    finally:
        _recording.clear()
    inet = [a for a in _connected if isinstance(a, tuple)]
    assert inet, "the audit hook saw no connection at all"
    outside = [a for a in inet if not ipaddress.ip_address(a[0]).is_loopback]
    assert outside == [], f"connections left this machine: {outside}"


@pytest.fixture(autouse=True)
def fresh(server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.reset()
    server.apply_env(monkeypatch)


@pytest.fixture
def ec2(server: MotoServer) -> Any:
    return server.client("ec2", retries={"total_max_attempts": 1})


@pytest.fixture
def vpc(ec2: Any) -> LoopbackVpc:
    return loopback_vpc(ec2)


def _run(ec2: Any, subnet: str | None = None, **kw: Any) -> list[dict[str, Any]]:
    args: dict[str, Any] = {
        "ImageId": AMI,
        "MinCount": 1,
        "MaxCount": 1,
        "InstanceType": "m5.large",
    }
    if subnet:
        args["SubnetId"] = subnet
    args.update(kw)
    return list(ec2.run_instances(**args)["Instances"])


def _describe(ec2: Any, instance_id: str) -> dict[str, Any]:
    found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return dict(found[0]["Instances"][0])


def _ids(ec2: Any, **filters: list[str]) -> set[str]:
    spec = [{"Name": name, "Values": values} for name, values in filters.items()]
    reservations = ec2.describe_instances(Filters=spec)["Reservations"]
    return {i["InstanceId"] for r in reservations for i in r["Instances"]}


def _code(error: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = error.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


# -- moto's behaviour ----------------------------------------------------------------------


def test_loopback_subnets_give_loopback_private_ips_and_never_loopback_public_ips(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    a, b, c = vpc.subnets
    assert [(s.cidr, s.zone) for s in vpc.subnets] == [
        ("127.16.1.0/24", f"{REGION}a"),
        ("127.16.2.0/24", f"{REGION}b"),
        ("127.16.3.0/24", f"{REGION}c"),
    ]
    tagged = ec2.describe_subnets(Filters=[{"Name": "tag:launcher-test", "Values": ["loopback"]}])
    assert {s["SubnetId"] for s in tagged["Subnets"]} == set(vpc.subnet_ids)
    two = _run(ec2, a.id, MinCount=2, MaxCount=2)
    assert [i["PrivateIpAddress"] for i in two] == ["127.16.1.4", "127.16.1.5"]
    assert all("PublicIpAddress" not in i for i in two)
    in_b = _run(ec2, b.id)[0]
    assert (in_b["PrivateIpAddress"], in_b["Placement"]["AvailabilityZone"]) == (
        "127.16.2.4",
        f"{REGION}b",
    )
    nic = {"DeviceIndex": 0, "SubnetId": c.id, "AssociatePublicIpAddress": True}
    public = _describe(ec2, _run(ec2, NetworkInterfaces=[nic])[0]["InstanceId"])
    assert public["PrivateIpAddress"] == "127.16.3.4"
    assert public["PublicIpAddress"].startswith("54.214.")
    no_subnet = _describe(ec2, _run(ec2)[0]["InstanceId"])  # addresses never to contact
    assert ipaddress.ip_address(no_subnet["PrivateIpAddress"]) in ipaddress.ip_network("10.0.0.0/8")
    assert no_subnet["PublicIpAddress"].startswith("54.214.")
    views = {v.id: v for v in server.instances()}
    assert views[in_b["InstanceId"]].private_ip == "127.16.2.4"
    assert views[in_b["InstanceId"]].zone == f"{REGION}b"
    for view in views.values():
        assert view.public_ip is None or not ipaddress.ip_address(view.public_ip).is_loopback


def test_run_instances_options_key_pairs_groups_profiles_spot_and_tags(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    subnet = vpc.subnets[0].id
    assert _run(ec2, subnet, KeyName="no-such-key")[0]["KeyName"] == "no-such-key"
    with pytest.raises(ClientError) as missing_group:
        _run(ec2, subnet, SecurityGroupIds=["sg-12345678"])
    assert _code(missing_group) == ("InvalidGroup.NotFound", 400)
    with pytest.raises(ClientError) as missing_profile:
        _run(ec2, subnet, IamInstanceProfile={"Name": "no-such-profile"})
    assert _code(missing_profile)[0] == "NoSuchEntity"

    created = ec2.create_key_pair(KeyName="made")
    assert created["KeyMaterial"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    private = paramiko.RSAKey.from_private_key(io.StringIO(created["KeyMaterial"]))
    derived = f"{private.get_name()} {private.get_base64()}"
    described = ec2.describe_key_pairs(KeyNames=["made"], IncludePublicKey=True)
    assert described["KeyPairs"][0]["PublicKey"].split()[:2] == derived.split()
    assert (server.public_key("made") or "").split()[:2] == derived.split()
    ed = ec2.create_key_pair(KeyName="ed", KeyType="ed25519")["KeyMaterial"]
    assert ed.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")

    iam = server.client("iam")
    iam.create_role(RoleName="node", AssumeRolePolicyDocument="{}")
    profile = iam.create_instance_profile(InstanceProfileName="node")["InstanceProfile"]
    iam.add_role_to_instance_profile(InstanceProfileName="node", RoleName="node")
    group = ec2.create_security_group(GroupName="g", Description="d", VpcId=vpc.id)["GroupId"]
    tags = [{"Key": "ray-cluster-name", "Value": "c1"}, {"Key": "ray-node-kind", "Value": "head"}]
    launched = _run(
        ec2,
        subnet,
        KeyName="made",
        SecurityGroupIds=[group],
        IamInstanceProfile={"Arn": profile["Arn"]},
        InstanceMarketOptions={"MarketType": "spot"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )[0]
    assert launched["State"]["Name"] == "pending"
    assert launched["Tags"] == tags
    seen = _describe(ec2, launched["InstanceId"])
    assert seen["State"]["Name"] == "running"  # at once: see pending_for
    assert seen["InstanceLifecycle"] == "spot"
    assert seen["KeyName"] == "made"
    assert seen["IamInstanceProfile"]["Arn"] == profile["Arn"]
    assert [g["GroupId"] for g in seen["SecurityGroups"]] == [group]
    view = {v.id: v for v in server.instances()}[launched["InstanceId"]]
    assert (view.lifecycle, view.key_name, view.tags["ray-node-kind"]) == ("spot", "made", "head")


def test_stop_start_terminate_and_filters(ec2: Any, vpc: LoopbackVpc) -> None:
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "cluster", "Value": "c1"}]}]
    kept, stopped, gone = (
        _run(ec2, vpc.subnets[0].id, TagSpecifications=tags)[0]["InstanceId"] for _ in range(3)
    )
    other = _run(ec2, vpc.subnets[0].id)[0]["InstanceId"]
    ip = _describe(ec2, stopped)["PrivateIpAddress"]
    ec2.stop_instances(InstanceIds=[stopped])
    after_stop = _describe(ec2, stopped)
    assert (after_stop["State"]["Name"], after_stop["PrivateIpAddress"]) == ("stopped", ip)
    assert after_stop["StateReason"]["Code"] == "Client.UserInitiatedShutdown"
    ec2.start_instances(InstanceIds=[stopped])
    assert _describe(ec2, stopped)["State"]["Name"] == "running"
    answer = ec2.terminate_instances(InstanceIds=[gone])["TerminatingInstances"][0]
    assert answer["CurrentState"]["Name"] == "shutting-down"
    terminated = _describe(ec2, gone)
    assert terminated["State"]["Name"] == "terminated"
    assert terminated["StateReason"]["Code"] == "Client.UserInitiatedShutdown"
    assert _ids(ec2, **{"tag:cluster": ["c1"]}) == {kept, stopped, gone}
    live = {"tag:cluster": ["c1"], "instance-state-name": ["pending", "running"]}
    assert _ids(ec2, **live) == {kept, stopped}
    assert other in _ids(ec2, **{"subnet-id": [vpc.subnets[0].id]})
    assert gone in _ids(ec2, **{"state-reason-code": ["Client.UserInitiatedShutdown"]})
    with pytest.raises(ResponseParserError):  # an unsupported filter is an HTML 500
        _ids(ec2, **{"instance-lifecycle": ["spot"]})
    with pytest.raises(ClientError) as unknown:
        ec2.terminate_instances(InstanceIds=["i-0123456789abcdef0"])
    assert _code(unknown)[0] == "InvalidInstanceID.NotFound"


def test_pending_for_keeps_new_instances_pending_then_running(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    server.pending_for = 3600.0
    held = _run(ec2, vpc.subnets[0].id)[0]["InstanceId"]
    assert _describe(ec2, held)["State"]["Name"] == "pending"
    assert _ids(ec2, **{"instance-state-name": ["pending"]}) == {held}
    server.pending_for = 0.05
    soon = _run(ec2, vpc.subnets[0].id)[0]["InstanceId"]
    ec2.get_waiter("instance_running").wait(
        InstanceIds=[soon], WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
    )
    assert _describe(ec2, held)["State"]["Name"] == "pending"


def test_describe_lag_hides_new_instances_as_eventual_consistency_may(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    before = _run(ec2, vpc.subnets[0].id)[0]["InstanceId"]
    server.describe_lag = 3600.0
    hidden = _run(ec2, vpc.subnets[0].id, MinCount=2, MaxCount=2)
    hidden_ids = {i["InstanceId"] for i in hidden}
    assert _ids(ec2) == {before}
    with pytest.raises(ClientError) as error:
        _describe(ec2, hidden[0]["InstanceId"])
    assert _code(error) == ("InvalidInstanceID.NotFound", 400)
    assert {v.id for v in server.instances()} == {before} | hidden_ids
    server.describe_lag = 0.0
    assert _ids(ec2) == {before} | hidden_ids


def test_concurrent_calls_are_served_one_at_a_time_by_moto(
    server: MotoServer, vpc: LoopbackVpc
) -> None:
    ips: list[str] = []
    errors: list[BaseException] = []

    def launch() -> None:
        try:
            client = server.client("ec2")
            for _ in range(3):
                ips.extend(i["PrivateIpAddress"] for i in _run(client, vpc.subnets[0].id))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=launch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(ips) == len(set(ips)) == 24


def test_reset_forgets_instances_calls_and_faults(server: MotoServer, ec2: Any) -> None:
    _run(ec2)
    server.faults.add("DescribeVpcs", "InternalError")
    server.pending_for = server.describe_lag = 60.0
    server.reset()
    assert server.pending_for == server.describe_lag == 0.0
    assert server.instances() == []
    assert server.calls() == []
    assert list(server.faults) == []
    assert ec2.describe_vpcs()["Vpcs"]  # the default VPC is back


# -- faults and the call log ---------------------------------------------------------------


def test_a_fault_fires_n_times_and_is_counted_logged_and_cleared(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    fault = server.faults.no_capacity(times=2)
    for _ in range(2):
        with pytest.raises(ClientError) as error:
            _run(ec2, vpc.subnets[0].id)
        assert _code(error) == ("InsufficientInstanceCapacity", 500)
        assert "m5.large" in str(error.value)
    assert _run(ec2, vpc.subnets[0].id)
    assert (fault.seen, fault.fired, fault.exhausted) == (2, 2, True)
    runs = server.calls("RunInstances")
    assert [(c.error, c.injected) for c in runs] == [
        ("InsufficientInstanceCapacity", True),
        ("InsufficientInstanceCapacity", True),
        (None, False),
    ]
    assert len(server.instances()) == 1  # the failed calls never reached moto
    forever = server.faults.no_capacity()
    for _ in range(3):
        with pytest.raises(ClientError):
            _run(ec2, vpc.subnets[0].id)
    server.faults.clear()
    assert _run(ec2, vpc.subnets[0].id)
    assert forever.fired == 3


def test_faults_target_subnets_zones_markets_and_any_parameter(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    a, b, _ = vpc.subnets
    spot = {"InstanceMarketOptions": {"MarketType": "spot"}}
    server.faults.no_capacity(zone=a.zone, market="spot")
    with pytest.raises(ClientError):
        _run(ec2, a.id, **spot)
    assert _run(ec2, b.id, **spot)
    assert _run(ec2, a.id)  # on-demand in a
    server.faults.clear()

    seen: list[Call] = []

    def large_in_b(call: Call) -> bool:
        seen.append(call)
        return call.get("SubnetId") == b.id and call.get("InstanceType") == "m5.2xlarge"

    server.faults.add("RunInstances", "Unsupported", when=large_in_b)
    with pytest.raises(ClientError) as error:
        _run(ec2, b.id, InstanceType="m5.2xlarge")
    assert _code(error) == ("Unsupported", 400)
    assert _run(ec2, a.id, InstanceType="m5.2xlarge")
    assert [c.zone for c in seen] == [b.zone, a.zone]
    server.faults.add("RunInstances", "InsufficientInstanceCapacity", zone=f"{REGION}c")
    with pytest.raises(ClientError):
        _run(ec2, Placement={"AvailabilityZone": f"{REGION}c"})
    subnets = [c.call.subnet for c in server.calls("RunInstances")]
    assert subnets[:3] == [a.id, b.id, a.id]


def test_error_codes_have_awss_http_status_and_xml_for_ec2_and_iam(
    server: MotoServer, ec2: Any
) -> None:
    expected = {
        "InsufficientInstanceCapacity": 500,
        "SpotMaxPriceTooLow": 400,
        "MaxSpotInstanceCountExceeded": 400,
        "Unsupported": 400,
        "RequestLimitExceeded": 503,
    }
    for code, status in expected.items():
        fault = server.faults.add("DescribeInstances", code, times=1)
        with pytest.raises(ClientError) as error:
            ec2.describe_instances()
        assert _code(error) == (code, status)
        assert error.value.response["ResponseMetadata"]["RequestId"]
        assert fault.fired == 1
    iam = server.client("iam", retries={"total_max_attempts": 1})
    server.faults.add("ListRoles", "Throttling", service="iam", message="Rate exceeded")
    with pytest.raises(ClientError) as throttled:
        iam.list_roles()
    assert _code(throttled) == ("Throttling", 400)
    assert throttled.value.response["Error"]["Message"] == "Rate exceeded"
    assert server.client("sts").get_caller_identity()["Account"] == "123456789012"


def test_botocore_retries_throttling_and_capacity_errors(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What is checked is which calls botocore retries and how often, not how long it waits
    # between them: its backoff (up to 1 s, then 2 s, ... in each mode) is taken to nothing.
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", _no_delay)
    monkeypatch.setattr(botocore.retryhandler, "delay_exponential", _no_delay)
    standard = server.client("ec2", retries={"mode": "standard", "total_max_attempts": 3})
    throttle = server.faults.add("DescribeInstances", "RequestLimitExceeded", times=2)
    assert standard.describe_instances()["Reservations"] == []
    assert throttle.fired == 2
    assert [c.status for c in server.calls("DescribeInstances")] == [503, 503, 200]
    capacity = server.faults.no_capacity()
    with pytest.raises(ClientError) as error:
        standard.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)
    assert "reached max retries: 2" in str(error.value)
    assert capacity.fired == 3
    tokens = {c.call.get("ClientToken") for c in server.calls("RunInstances")}
    assert len(tokens) == 1 and None not in tokens  # botocore's token, the same each retry
    default = boto3.client("ec2")  # from server.env(), with boto3's default retries
    capacity.fired = 0
    with pytest.raises(ClientError) as error:
        default.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)
    assert "reached max retries: 2" in str(error.value)  # botocore 1.44: standard mode
    assert capacity.fired == 3
    legacy = server.client("ec2", retries={"mode": "legacy"})
    capacity.fired = 0
    with pytest.raises(ClientError):
        legacy.run_instances(ImageId=AMI, MinCount=1, MaxCount=1)
    assert capacity.fired == 5


def _no_delay(*args: object, **kwargs: object) -> float:
    return 0.0


def test_a_lost_answer_then_a_retry_launches_once_as_client_tokens_do(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    lost = server.faults.add("RunInstances", "InternalError", after=True, times=1)
    standard = server.client("ec2", retries={"mode": "standard", "total_max_attempts": 3})
    answer = _run(standard, vpc.subnets[0].id, MinCount=2, MaxCount=2)
    assert lost.fired == 1
    assert [c.status for c in server.calls("RunInstances")] == [500, 200]
    assert {i["InstanceId"] for i in answer} == {v.id for v in server.instances()}
    assert {i["PrivateIpAddress"] for i in answer} == {"127.16.1.4", "127.16.1.5"}
    again = _run(ec2, vpc.subnets[0].id, ClientToken="up-1")
    same = _run(ec2, vpc.subnets[0].id, ClientToken="up-1")
    assert [i["InstanceId"] for i in same] == [again[0]["InstanceId"]]
    assert len(server.instances()) == 3
    server.faults.add("RunInstances", "InternalError", after=True, times=1)
    with pytest.raises(ClientError):  # no retry: the caller sees an error, the instance exists
        _run(ec2, vpc.subnets[1].id)
    assert len(server.instances()) == 4


def test_effects_skip_and_delay_let_a_test_act_at_a_chosen_call(
    server: MotoServer, ec2: Any
) -> None:
    acted_on: list[int] = []
    hook = server.faults.add(
        "DescribeInstances", skip=2, times=1, delay=0.01, effect=lambda c: acted_on.append(c.seq)
    )
    for _ in range(4):
        ec2.describe_instances()
    calls = server.calls("DescribeInstances")
    assert acted_on == [calls[2].call.seq]
    assert (hook.seen, hook.fired) == (3, 1)
    assert all(c.status == 200 and not c.injected for c in calls)
    any_call = server.faults.add("*", "InternalError", skip=1, times=1)
    ec2.describe_vpcs()
    with pytest.raises(ClientError):
        ec2.describe_subnets()
    assert any_call.fired == 1
    assert [c.action for c in server.calls()][-2:] == ["DescribeVpcs", "DescribeSubnets"]


def test_the_shared_config_file_sends_boto3_here_with_an_app_id(
    server: MotoServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.write_aws_files(tmp_path, app_id="i-0123456789abcdef0")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    client = boto3.session.Session().client("ec2")
    assert client.meta.region_name == REGION
    assert client.meta.endpoint_url == server.url
    client.describe_instances()
    assert [c.call.origin for c in server.calls("DescribeInstances")] == ["i-0123456789abcdef0"]


# -- instances as SSH hosts -----------------------------------------------------------------


def _ssh(ip: str, key: paramiko.PKey, command: str) -> str:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(
        ip, username="root", pkey=key, timeout=10, allow_agent=False, look_for_keys=False
    )
    try:
        _, stdout, stderr = client.exec_command(command, timeout=60)
        out = stdout.read().decode()
        status = stdout.channel.recv_exit_status()
        assert status == 0, stderr.read().decode()
        return out
    finally:
        client.close()


def _refused(ip: str) -> bool:
    try:
        with socket.create_connection((ip, 22), 1):
            return False
    except OSError:
        return True


def test_instances_are_ssh_hosts_with_their_key_pair_and_aws_config(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    made = ec2.create_key_pair(KeyName="cluster")["KeyMaterial"]
    key = paramiko.RSAKey.from_private_key(io.StringIO(made))
    own = paramiko.Ed25519Key.from_private_key(
        io.StringIO(ec2.create_key_pair(KeyName="x", KeyType="ed25519")["KeyMaterial"])
    )
    with InstanceHosts(server) as hosts:
        first = _run(ec2, vpc.subnets[0].id, KeyName="cluster")[0]
        second = _run(ec2, vpc.subnets[1].id, KeyName="x")[0]
        outside = _run(ec2, KeyName="cluster")[0]  # default VPC: never hosted
        host = hosts.wait_for(first["InstanceId"])
        assert host.ip == first["PrivateIpAddress"] == "127.16.1.4"
        probe = (
            "cat ~/.aws/config >/dev/null && python3 -c 'import boto3; "
            'print(len(boto3.client("ec2").describe_instances()["Reservations"]))\''
        )
        assert _ssh(host.ip, key, probe).strip() == "3"
        origins = [c.call.origin for c in server.calls("DescribeInstances")]
        assert origins == [first["InstanceId"]]
        other = hosts.wait_for(second["InstanceId"])
        assert _ssh(other.ip, own, "echo $HOME").strip() == "/root"
        with pytest.raises(paramiko.AuthenticationException):
            _ssh(other.ip, key, "true")  # only the instance's own key pair

        _ssh(host.ip, key, "echo kept > ~/disk")
        ec2.stop_instances(InstanceIds=[first["InstanceId"]])
        hosts.wait_gone(first["InstanceId"])
        assert _refused(host.ip)
        ec2.start_instances(InstanceIds=[first["InstanceId"]])
        assert hosts.wait_for(first["InstanceId"]) is host
        assert _ssh(host.ip, key, "cat ~/disk").strip() == "kept"
        ec2.terminate_instances(InstanceIds=[first["InstanceId"], second["InstanceId"]])
        hosts.wait_gone(first["InstanceId"])
        hosts.wait_gone(second["InstanceId"])
        assert _refused(host.ip) and _refused(other.ip)
        hosts.check()
        assert {ip for _, ip in hosts.started} == {"127.16.1.4", "127.16.2.4"}
        assert all(ipaddress.ip_address(ip) in LOOPBACK_NET for _, ip in hosts.started)
        assert hosts.outside == {(outside["InstanceId"], outside["PrivateIpAddress"])}


def test_boot_delay_and_hold_keep_a_host_down(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    hosts = InstanceHosts(server, boot_delay=3600.0)  # not started: sync() by hand
    try:
        launched = _run(ec2, vpc.subnets[0].id)[0]["InstanceId"]
        hosts.sync()
        assert hosts.host(launched) is None
        hosts.boot_delay = 0.0
        hosts.sync()
        host = hosts.host(launched)
        assert host.running
        hosts.hold(launched)
        hosts.sync()
        assert not host.running and _refused(host.ip)
        hosts.release(launched)
        hosts.sync()
        assert host.running and hosts.running() == {launched: host}
    finally:
        hosts.close()


def test_interrupt_spot_terminates_with_aws_reason_and_takes_the_host_away(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "cluster", "Value": "c1"}]}]
    with InstanceHosts(server) as hosts:
        spot = _run(
            ec2,
            vpc.subnets[0].id,
            InstanceMarketOptions={"MarketType": "spot"},
            TagSpecifications=tags,
        )[0]["InstanceId"]
        on_demand = _run(ec2, vpc.subnets[0].id, TagSpecifications=tags)[0]["InstanceId"]
        host = hosts.wait_for(spot)
        with pytest.raises(ValueError, match="not a spot instance"):
            interrupt_spot(server, on_demand)
        interrupt_spot(server, spot, hosts)
        assert not host.running and _refused(host.ip)
        seen = _describe(ec2, spot)
        assert seen["State"] == {"Code": 48, "Name": "terminated"}
        assert seen["StateReason"]["Code"] == "Server.SpotInstanceTermination"
        assert seen["InstanceLifecycle"] == "spot"
        live = {"tag:cluster": ["c1"], "instance-state-name": ["pending", "running"]}
        assert _ids(ec2, **live) == {on_demand}
        assert _ids(ec2, **{"state-reason-code": ["Server.SpotInstanceTermination"]}) == {spot}
        hosts.wait_for(on_demand)
        hosts.check()


def test_a_terminated_instances_address_goes_to_the_next_launch_once_its_machine_is_off(
    server: MotoServer, ec2: Any, vpc: LoopbackVpc
) -> None:
    subnet = vpc.subnets[0].id

    def launch() -> tuple[str, str]:
        made = _run(ec2, subnet)[0]
        return made["InstanceId"], made["PrivateIpAddress"]

    first, address = launch()
    ec2.terminate_instances(InstanceIds=[first])
    assert launch()[1] == address  # no machines: given back at once
    hosts = InstanceHosts(server)  # not started: sync() by hand
    try:
        hosted, hosted_address = launch()
        hosts.sync()
        assert hosts.host(hosted).running
        ec2.terminate_instances(InstanceIds=[hosted])
        assert launch()[1] != hosted_address  # its machine still answers there
        hosts.sync()
        assert hosts.host(hosted) is None and _refused(hosted_address)
        assert launch()[1] == hosted_address
    finally:
        hosts.close()
    assert not server.hosts_own_addresses
