"""A recovering run on AWS (moto's EC2/IAM server, each instance a real SSH host running
real Ray: tests/aws_clusters.py): `launcher submit --recover` on a head and one worker, the
head terminated mid-run by `kill-random-node --head --hard`; a new head (a new instance,
often at the freed address of the old one, with another host key) comes up, the worker is
kept (the same instance, its Ray restarted against the new head), and the driver starts
again there, resuming from the run's storage. Also: a head of its type's fallback (a
reclaimed spot head comes back on-demand) gets the head's instance profile, as a head of
the head's type does."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.config.loader import Overrides, parse_config
from launcher.providers.aws.provider import AwsProvider
from launcher.providers.base import NodeKind
from tests.aws_clusters import AwsCluster, aws_config, running_cluster
from tests.aws_fake import LOOPBACK_NET, MotoServer, loopback_vpc, tag
from tests.cluster_helpers import wait_for
from tests.ssh_hosts import isolation_unavailable

STEPS, HOLD_AT = 8, 3
# Ray's GCS listens on every address: a port other than Ray's default, which a cluster of
# another test on this machine may hold.
GCS_PORT = 6481

# The driver: counts to STEPS, a step every 0.2 s, keeping the count in the run's storage
# and resuming from it; each start is noted there with the count it started from. The first
# attempt stops counting at HOLD_AT and waits there to be lost with its head (so the test
# need not race it). Once done it notes the Ray nodes alive, from the head it runs on.
DRIVER = f"""\
import json, os, socket, time
from pathlib import Path

storage = Path(os.environ["LAUNCHER_STORAGE_PATH"])
count_file = storage / "count"
count = int(count_file.read_text()) if count_file.exists() else 0
with (storage / "starts").open("a") as starts:
    starts.write(f"{{os.environ['LAUNCHER_RUN_ATTEMPT']}} {{count}}\\n")
print("resuming from", count, flush=True)
while count < {STEPS}:
    if os.environ["LAUNCHER_RUN_ATTEMPT"] == "1" and count >= {HOLD_AT}:
        time.sleep(0.2)
        continue
    time.sleep(0.2)
    count += 1
    (storage / "count.new").write_text(str(count))
    (storage / "count.new").replace(count_file)
    print("step", count, flush=True)
import ray
ray.init()
alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
(storage / "nodes.json").write_text(json.dumps(alive))
print("done on", alive, flush=True)
"""

CONFIG = (
    aws_config(
        """\
  head:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    max_workers: 0
  worker:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_B]}
    resources: {CPU: 1}
    min_workers: 1
    max_workers: 1
""",
        max_workers=1,
    )
    .replace(":6379", f":{GCS_PORT}")
    .replace("--port=6379", f"--port={GCS_PORT}")
)


def _runs(aws: AwsCluster) -> list[dict[str, Any]]:
    listed = aws.run("jobs", "list", "--json", str(aws.path), timeout=60)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


def _kind(aws: AwsCluster, kind: str) -> list[dict[str, Any]]:
    return [i for i in aws.instances() if tag(i, "launcher-node-kind") == kind]


def _explain(aws: AwsCluster, output: str) -> str:
    monitor = aws.run("monitor", "--no-follow", "--lines", "60", str(aws.path), timeout=60)
    return f"submit said:\n{output[-6000:]}\nthe autoscaler said:\n{monitor.stdout[-4000:]}"


@pytest.mark.skipif(isolation_unavailable() is not None, reason=str(isolation_unavailable()))
def test_a_run_survives_its_head_terminated_keeping_its_worker(
    tmp_path: Path, shared_dir: Path
) -> None:
    script = tmp_path / "count.py"
    script.write_text(DRIVER)
    with running_cluster(tmp_path, CONFIG) as aws:
        argv = [str(aws.path), str(script), "--start", "--stop", "--recover"]
        submit = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "launcher",
                "submit",
                *argv,
                "--recover-storage",
                str(shared_dir),
            ],
            env=aws.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            count = shared_dir / "count"
            wait_for(
                lambda: (
                    submit.poll() is not None
                    or (count.exists() and int(count.read_text() or 0) >= HOLD_AT)
                ),
                300,
                "the first attempt to count to its hold",
            )
            assert submit.poll() is None, submit.communicate()[0][-6000:]
            (old_head,) = _kind(aws, "head")
            workers = {i["InstanceId"] for i in _kind(aws, "worker")}
            assert len(workers) == 1 and all(
                tag(i, "launcher-node-status") == "up-to-date" for i in _kind(aws, "worker")
            )

            killed = aws.run("kill-random-node", str(aws.path), "--head", "--hard", "-y")
            assert killed.returncode == 0, killed.stdout + killed.stderr
            assert f"Terminated head {old_head['InstanceId']}" in killed.stdout, killed.stdout
            (gone,) = aws.instances("terminated", "shutting-down")
            assert gone["InstanceId"] == old_head["InstanceId"]

            try:
                output, _ = submit.communicate(timeout=400)
            except subprocess.TimeoutExpired:
                submit.kill()
                raise AssertionError(_explain(aws, submit.communicate()[0])) from None
            assert submit.returncode == 0, _explain(aws, output)
        finally:
            if submit.poll() is None:
                submit.kill()
                submit.wait()

        assert f"head {old_head['InstanceId']} lost" in output, output[-6000:]
        (ended,) = _runs(aws)
        assert ended["state"] == "succeeded" and ended["attempts"] == 2, ended
        (recovery,) = ended["recoveries_detail"]
        assert recovery["lost_head"] == old_head["InstanceId"]
        new_head = recovery["new_head"]
        assert new_head and new_head != old_head["InstanceId"]
        assert recovery["new_head_type"] == "head"  # terminated, not reclaimed: the same type
        assert set(recovery["kept_workers"]) == workers  # the same machine, no new one

        # The driver resumed from storage on the new head, where the kept worker's Ray had
        # joined the new head's cluster.
        starts = [line.split() for line in (shared_dir / "starts").read_text().splitlines()]
        assert starts == [["1", "0"], ["2", str(HOLD_AT)]], starts
        assert int(count.read_text()) == STEPS
        views = {v.id: v for v in aws.server.instances()}
        ips = {views[i].private_ip for i in (new_head, *workers)}
        alive = json.loads((shared_dir / "nodes.json").read_text())
        assert set(alive) == ips and len(alive) == 2, alive
        # Each instance was a real SSH host in loopback space, and only those three were
        # launched (no machine bought for the kept worker). `--stop` left none running.
        assert {i for i, _ in aws.hosts.started} == {old_head["InstanceId"], new_head, *workers}
        assert all(ipaddress.ip_address(ip) in LOOPBACK_NET for _, ip in aws.hosts.started)
        assert "Terminated 2 node(s)" in output, output[-3000:]
        assert [v.id for v in views.values() if v.state != "terminated"] == []


def test_a_head_of_a_fallback_type_gets_the_head_s_instance_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovering run replaces a reclaimed spot head with its type's fallback: that head
    runs the autoscaler too, so it gets the head's instance profile (a worker of the same
    type does not)."""
    with MotoServer() as server:
        server.apply_env(monkeypatch)
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
        ec2 = server.client("ec2")
        a = loopback_vpc(ec2).subnet_ids[0]
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        node = f"{{InstanceType: m5.large, ImageId: {ami}, SubnetIds: [{a}]"
        text = f"""
cluster_name: fallback-head
max_workers: 2
provider: {{type: aws, region: us-west-2, use_internal_ips: true}}
auth: {{ssh_user: root}}
available_node_types:
  head-spot:
    node_config: {node}, InstanceMarketOptions: {{MarketType: spot}}}}
    max_workers: 0
  ondemand:
    node_config: {node}}}
    max_workers: 2
head_node_type: head-spot
metadata: {{launcher: {{fallbacks: {{head-spot: [ondemand]}}}}}}
"""
        provider = AwsProvider(parse_config(text, "fallback.yaml", Overrides()))
        provider.bootstrap()
        ondemand = provider.config.node_types["ondemand"]
        head = provider.create_nodes(ondemand, NodeKind.HEAD, 1, {})[0]
        worker = provider.create_nodes(ondemand, NodeKind.WORKER, 1, {})[0]
        by_id = {
            i["InstanceId"]: i
            for r in ec2.describe_instances(InstanceIds=[head.id, worker.id])["Reservations"]
            for i in r["Instances"]
        }
        profile = server.client("iam").get_instance_profile(
            InstanceProfileName="launcher-head-fallback-head"
        )
        assert (
            by_id[head.id].get("IamInstanceProfile", {}).get("Arn")
            == (profile["InstanceProfile"]["Arn"])
        )
        assert "IamInstanceProfile" not in by_id[worker.id]
