"""AWS clusters end to end: the launcher CLI against moto's EC2/IAM server, where each
instance in a loopback VPC (127.16.0.0/16) becomes a real SSH host running real Ray
(fakes/aws/server.py `InstanceHosts`). The autoscaler runs on the head from the wheel `up`
installs there and reaches the same moto server through the head's ~/.aws/config, as an
instance profile would give it credentials on AWS.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.aws.faults import Call
from fakes.aws.server import (
    LOOPBACK_NET,
    interrupt_spot,
    tag,
)
from fakes.hosts.ssh import COUNT_NODES, isolation_unavailable
from launcher.autoscaler.spec import PID_FILE
from launcher.cluster.lifecycle import SKIPPED_BOOTSTRAP
from tests.aws_clusters import AwsCluster, aws_config, running_cluster
from tests.cluster_helpers import wait_for

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

CONFIG = aws_config(
    """\
  head:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    max_workers: 0
  spot:
    node_config:
      InstanceType: m5.large
      ImageId: AMI
      SubnetIds: [SUBNET_A, SUBNET_B]
      InstanceMarketOptions: {MarketType: spot}
    resources: {CPU: 1}
    min_workers: 1
    max_workers: 2
  ondemand:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A, SUBNET_B]}
    resources: {CPU: 1}
    max_workers: 2
""",
    extra="""\
metadata:
  launcher:
    fallbacks:
      spot: [ondemand]
setup_commands:
  - echo "setup on $LAUNCHER_NODE_IP" >> ~/setup.log
""",
)
ALIVE_IPS = (
    "python -c 'import ray; ray.init(); "
    'print(*[n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]])\''
)


def status_of(instance: dict[str, Any], status: str) -> bool:
    return tag(instance, "launcher-node-status") == status


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsCluster]:
    with running_cluster(tmp_path_factory.mktemp("aws"), CONFIG) as cluster:
        yield cluster


def test_up_runs_ray_on_ec2_instances(aws: AwsCluster) -> None:
    result = aws.run("up", "-y", str(aws.path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "created key pair launcher-aws-e2e-us-west-2" in out
    assert "created security group launcher-aws-e2e" in out
    assert "launcher installed on the head" in out
    heads = [i for i in aws.instances() if tag(i, "launcher-node-kind") == "head"]
    assert len(heads) == 1 and "IamInstanceProfile" in heads[0]
    spot = aws.of_type("spot")
    assert len(spot) == 1 and spot[0].get("InstanceLifecycle") == "spot"
    assert "IamInstanceProfile" not in spot[0]
    assert tag(spot[0], "launcher-node-status") == "up-to-date"
    counted = aws.run("exec", str(aws.path), COUNT_NODES)
    assert counted.returncode == 0, counted.stdout + counted.stderr
    assert "alive 2" in counted.stdout
    head_ip = heads[0]["PrivateIpAddress"]
    assert aws.run("get-head-ip", str(aws.path)).stdout.strip() == head_ip
    assert aws.hosts.host(heads[0]["InstanceId"]).path("~/setup.log").read_text() == (
        f"setup on {head_ip}\n"
    )
    # Only loopback addresses were ever made hosts (and so contacted).
    assert aws.hosts.started
    assert all(ipaddress.ip_address(ip) in LOOPBACK_NET for _, ip in aws.hosts.started)
    assert not aws.hosts.outside


def test_second_up_finds_the_same_head_and_reruns_nothing(aws: AwsCluster) -> None:
    before = {i["InstanceId"] for i in aws.instances()}
    aws.server.clear_calls()
    result = aws.run("up", "-y", str(aws.path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "created" not in out.replace("(nothing created)", "")
    assert "autoscaler running on the head" in out
    assert {i["InstanceId"] for i in aws.instances()} == before
    head = next(i for i in aws.instances() if tag(i, "launcher-node-kind") == "head")
    assert aws.hosts.host(head["InstanceId"]).path("~/setup.log").read_text().count("\n") == 1
    # Nothing changed since the last up bootstrapped this config: one listing, no bootstrap.
    assert SKIPPED_BOOTSTRAP in out
    mine = [c.action for c in aws.server.calls() if c.call.origin is None]
    assert mine and set(mine) == {"DescribeInstances"}, mine
    # --no-config-cache looks at the cloud's resources again (and finds them there).
    aws.server.clear_calls()
    again = aws.run("up", "-y", "--no-config-cache", str(aws.path))
    assert again.returncode == 0, again.stdout + again.stderr
    assert SKIPPED_BOOTSTRAP not in again.stdout + again.stderr
    looked = {c.action for c in aws.server.calls() if c.call.origin is None}
    assert {"DescribeSecurityGroups", "GetInstanceProfile"} <= looked, looked


def test_an_up_after_the_autoscaler_died_or_the_file_changed_is_not_a_no_op(
    aws: AwsCluster,
) -> None:
    # The autoscaler killed on the head: the next up starts it again (its cloud resources,
    # unchanged, are still not looked at).
    stop = (
        f"pid=$(cat {PID_FILE}) && kill $pid && for i in $(seq 100); do "
        "kill -0 $pid 2>/dev/null || exit 0; sleep 0.1; done; exit 1"
    )
    killed = aws.run("exec", str(aws.path), stop)
    assert killed.returncode == 0, killed.stdout + killed.stderr
    again = aws.run("up", "-y", str(aws.path))
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "autoscaler started on the head" in out
    # A changed file (a comment only): the receipt does not name it, so up bootstraps.
    aws.path.write_text(aws.path.read_text() + "# changed\n")
    aws.server.clear_calls()
    changed = aws.run("up", "-y", str(aws.path))
    out = changed.stdout + changed.stderr
    assert changed.returncode == 0, out
    assert SKIPPED_BOOTSTRAP not in out and "autoscaler restarted on the head" in out
    looked = {c.action for c in aws.server.calls() if c.call.origin is None}
    assert "DescribeSecurityGroups" in looked, looked


def test_a_reclaimed_spot_worker_is_replaced_by_its_fallback(aws: AwsCluster) -> None:
    spot = aws.of_type("spot")[0]
    aws.server.faults.no_capacity(market="spot")  # spot capacity gone everywhere
    try:
        interrupt_spot(aws.server, spot["InstanceId"], aws.hosts)
        try:
            wait_for(
                lambda: any(
                    status_of(i, "failed") or status_of(i, "up-to-date")
                    for i in aws.of_type("ondemand")
                ),
                180,
                "an on-demand worker standing in for the reclaimed spot worker",
            )
            assert not any(status_of(i, "failed") for i in aws.of_type("ondemand"))
        except AssertionError as failed:
            log = aws.run("monitor", "--no-follow", "--lines", "60", str(aws.path)).stdout
            head = next(i for i in aws.instances() if tag(i, "launcher-node-kind") == "head")
            known = aws.hosts.host(head["InstanceId"]).path(
                "~/.launcher/clusters/aws-e2e/known_hosts"
            )
            raise AssertionError(
                f"{failed}; the head's autoscaler said:\n{log}\nits known_hosts:\n"
                f"{known.read_text() if known.exists() else '(none)'}"
            ) from None
    finally:
        aws.server.faults.clear()
    replacement = aws.of_type("ondemand")[0]
    assert tag(replacement, "launcher-stands-in-for") == "spot"
    assert "InstanceLifecycle" not in replacement
    log = aws.run("monitor", "--no-follow", "--lines", "400", str(aws.path))
    assert f"{spot['InstanceId']} was preempted in {spot['Placement']['AvailabilityZone']}" in (
        log.stdout
    ), log.stdout
    # EC2 hands a terminated instance's address to the next launch in its subnet (the
    # fake does too): the replacement is a new machine at the reclaimed worker's address,
    # with another host key, which the head accepted as the new instance's own.
    assert replacement["PrivateIpAddress"] == spot["PrivateIpAddress"]
    host = aws.hosts.host(replacement["InstanceId"])
    assert f"setup on {spot['PrivateIpAddress']}" in host.path("~/setup.log").read_text()
    head_known = aws.run("exec", str(aws.path), "cat ~/.launcher/clusters/aws-e2e/known_hosts")
    pinned = [line.split() for line in head_known.stdout.splitlines() if line.strip()]
    at_address = [f for f in pinned if f[0] == spot["PrivateIpAddress"]]
    assert [f[-1] for f in at_address] == [f"launcher-node={replacement['InstanceId']}"], pinned
    # Ray runs there: a live node at that address (the reclaimed one may still be listed
    # until its health checks time out) and the replacement's own raylet.
    alive = aws.run("exec", str(aws.path), ALIVE_IPS)
    assert replacement["PrivateIpAddress"] in alive.stdout.split(), alive.stdout + alive.stderr
    assert any(
        Path(f"/proc/{pid}/comm").read_text().strip() == "raylet" for pid in host.processes()
    )
    # The head's autoscaler made these calls itself, with the head's credentials.
    head = next(i for i in aws.instances() if tag(i, "launcher-node-kind") == "head")
    origins = {c.call.origin for c in aws.server.calls("RunInstances")}
    assert head["InstanceId"] in origins


def test_submit_then_down_leaves_no_instance(aws: AwsCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import sys, ray\nray.init()\nprint('job args', sys.argv[1:])\n")
    result = aws.run("submit", "--stop", str(aws.path), str(script), "x", "y")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "job args ['x', 'y']" in out
    assert aws.instances() == []
    status = aws.run("status", "--json", str(aws.path))
    assert json.loads(status.stdout or "{}").get("nodes", []) == [] or status.returncode != 0
    down = aws.run("down", "-y", str(aws.path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Nothing to take down" in down.stdout


def test_down_catches_the_late_launch_of_an_autoscaler_it_had_to_kill(
    aws: AwsCluster,
) -> None:
    """The head's autoscaler is inside a RunInstances call that EC2 carries out late; `down`
    kills it when it does not stop in time (here after 1 s), then watches for what the
    call still makes and terminates it."""
    up = aws.run("up", "-y", str(aws.path))  # the test before took the cluster down
    assert up.returncode == 0, up.stdout + up.stderr
    head = next(i for i in aws.instances() if tag(i, "launcher-node-kind") == "head")
    arrived = threading.Event()

    def from_head(call: Call) -> bool:
        if call.origin != head["InstanceId"]:
            return False
        arrived.set()
        return True

    def launched() -> int:
        return sum(c.call.origin == head["InstanceId"] for c in aws.server.calls("RunInstances"))

    def until_the_autoscaler_is_killed(call: Call) -> None:
        """Holds the head's launch until `down` has killed the autoscaler that sent it."""
        host = aws.hosts.host(head["InstanceId"])
        wait_for(
            lambda: not any("launcher.autoscaler" in _command_line(p) for p in host.processes()),
            240,
            "down to kill the autoscaler",
        )

    earlier = launched()
    aws.server.faults.add(
        "RunInstances", when=from_head, effect=until_the_autoscaler_is_killed, times=1
    )
    try:
        more = "import ray; ray.init(); from ray.autoscaler.sdk import request_resources; "
        asked = aws.run("exec", str(aws.path), f"python -c '{more}request_resources(num_cpus=3)'")
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert arrived.wait(120), "the autoscaler never launched for the requested CPUs"
        before = {i["InstanceId"] for i in aws.instances()}
        # The held launch lands as soon as the autoscaler is killed (within a second): 10 s
        # of watching, two of `down`'s looks 5 s apart, is plenty here (60 s by default, a
        # read timeout of the SDKs).
        env = {
            **aws.env,
            "LAUNCHER_AUTOSCALER_STOP_WAIT_S": "1",
            "LAUNCHER_LATE_LAUNCH_WATCH_S": "10",
        }
        down = subprocess.run(
            [sys.executable, "-m", "launcher", "down", "-y", str(aws.path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        aws.server.faults.clear()
    out = down.stdout + down.stderr
    assert down.returncode == 0, out
    assert "was killed" in out, out
    wait_for(lambda: launched() > earlier, 60, "the delayed launch to be carried out")
    late = [
        i
        for i in aws.instances(
            "pending", "running", "stopping", "stopped", "shutting-down", "terminated"
        )
        if i["InstanceId"] not in before
    ]
    assert late, "the delayed launch made nothing"
    assert all(i["State"]["Name"] in ("shutting-down", "terminated") for i in late), late
    assert aws.instances() == []


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
