"""A recovering run on AWS (moto's EC2/IAM server, each instance a real SSH host running
real Ray: tests/aws_clusters.py), supervised from a controller: `launcher submit --recover
--detach` with `metadata.launcher.recover.controller` naming one more SSH host (its own PID
and mount namespaces, its own home), which gets the launcher, the run and the AWS
credentials and runs the supervisor. The laptop then "closes": no launcher process of it is
left and its launcher home is moved away, so what follows is seen as a second machine would
see it, from the cluster file and the controller alone. The head is terminated mid-run by
`kill-random-node --head --hard`; the controller's supervisor brings up a new head (a new
instance, often at the freed address of the old one, with another host key), keeps the
worker (the same instance, its Ray restarted against the new head), starts the driver
again there, resuming from the run's storage, and takes the cluster down at the end. Also: a
head of its type's fallback (a reclaimed spot head comes back on-demand) gets the head's
instance profile, as a head of the head's type does."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from fakes.aws.server import LOOPBACK_NET, MotoServer, loopback_vpc, tag
from fakes.hosts.ssh import IsolatedHost, isolated_hosts, isolation_unavailable, make_key
from launcher.config.loader import Overrides, parse_config
from launcher.providers.aws.provider import AwsProvider
from launcher.providers.base import NodeKind
from tests.aws_clusters import AwsCluster, aws_config, running_cluster
from tests.cluster_helpers import wait_for

STEPS, HOLD_AT = 8, 3
# Ray's GCS listens on every address: a port other than Ray's default, which a cluster of
# another test on this machine may hold.
GCS_PORT = 6481

# The driver: counts to STEPS, a step every 0.2 s, keeping the count in the run's storage
# and resuming from it; each start is noted there with the count it started from. The first
# attempt stops counting at HOLD_AT and waits there to be lost with its head (so the test
# need not race it). Once done it notes the Ray nodes alive, from the head it runs on, once
# it sees two (after a recovery the driver starts as soon as the new head is up, while the
# kept worker rejoins).
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
deadline = time.monotonic() + 300
while True:
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    if len(alive) >= 2 or time.monotonic() > deadline:
        break
    time.sleep(0.5)
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


CONTROLLER_IP = "127.21.0.2"


def _runs(aws: AwsCluster) -> list[dict[str, Any]]:
    listed = aws.run("jobs", "list", "--json", str(aws.path), timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


def _kind(aws: AwsCluster, kind: str) -> list[dict[str, Any]]:
    return [i for i in aws.instances() if tag(i, "launcher-node-kind") == kind]


def _supervisors(run_id: str) -> dict[str, list[int]]:
    """The processes of this box supervising `run_id`, by PID namespace."""
    found: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            namespace = os.readlink(entry / "ns" / "pid")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "launcher" in words and "supervise" in words and run_id in words:
            found.setdefault(namespace, []).append(int(entry.name))
    return found


def _assert_supervised_on(controller: IsolatedHost, run_id: str) -> None:
    """The run's one supervisor runs on the controller; none on this machine (the laptop)."""
    supervisors = _supervisors(run_id)
    assert os.readlink("/proc/self/ns/pid") not in supervisors, supervisors
    on_controller = set(controller.processes())
    assert [set(pids) <= on_controller for pids in supervisors.values()] == [True], supervisors


def _explain(aws: AwsCluster, controller: IsolatedHost, run_id: str) -> str:
    log = controller.path(f"~/.launcher-controller/runs/{aws.name}/{run_id}/supervisor.log")
    text = log.read_text(errors="replace") if log.exists() else "(no supervisor.log)"
    monitor = aws.run("monitor", "--no-follow", "--lines", "60", str(aws.path), timeout=60)
    return f"the controller's supervisor said:\n{text[-6000:]}\nthe autoscaler said:\n{monitor.stdout[-4000:]}"


def _submit_detached(aws: AwsCluster, script: Path, shared_dir: Path) -> str:
    """`submit --start --stop --recover --detach` with the config's controller: returns the
    run's id once the controller's supervisor has started its first attempt."""
    submitted = aws.run(
        "submit",
        str(aws.path),
        str(script),
        "--start",
        "--stop",
        "--recover",
        "--detach",
        "--recover-storage",
        str(shared_dir),
        timeout=600,
    )
    assert submitted.returncode == 0, submitted.stdout[-6000:] + submitted.stderr[-6000:]
    match = re.search(
        r"Run (r-[0-9a-f]+) started \(attempt 1\); supervised by the controller", submitted.stdout
    )
    assert match, submitted.stdout
    assert f"root@{CONTROLLER_IP}:22" in submitted.stdout
    return match.group(1)


def _assert_kept_and_resumed(
    aws: AwsCluster, shared_dir: Path, old_head: str, workers: set[str], ended: dict[str, Any]
) -> None:
    assert ended["state"] == "succeeded" and ended["attempts"] == 2, ended
    (recovery,) = ended["recoveries_detail"]
    assert recovery["lost_head"] == old_head
    new_head = recovery["new_head"]
    assert new_head and new_head != old_head
    assert recovery["new_head_type"] == "head"  # terminated, not reclaimed: the same type
    assert set(recovery["kept_workers"]) == workers  # the same machine, no new one
    # The driver resumed from storage on the new head, where the kept worker's Ray had
    # joined the new head's cluster.
    starts = [line.split() for line in (shared_dir / "starts").read_text().splitlines()]
    assert starts == [["1", "0"], ["2", str(HOLD_AT)]], starts
    assert int((shared_dir / "count").read_text()) == STEPS
    views = {v.id: v for v in aws.server.instances()}
    ips = {views[i].private_ip for i in (new_head, *workers)}
    alive = json.loads((shared_dir / "nodes.json").read_text())
    assert set(alive) == ips and len(alive) == 2, alive
    # Each instance was a real SSH host in loopback space, and only those three were
    # launched (no machine bought for the kept worker). `--stop` left none running.
    assert {i for i, _ in aws.hosts.started} == {old_head, new_head, *workers}
    assert all(ipaddress.ip_address(ip) in LOOPBACK_NET for _, ip in aws.hosts.started)
    assert [v.id for v in views.values() if v.state != "terminated"] == []


@pytest.mark.skipif(isolation_unavailable() is not None, reason=str(isolation_unavailable()))
def test_a_run_survives_its_head_terminated_keeping_its_worker(
    tmp_path: Path, shared_dir: Path
) -> None:
    script = tmp_path / "count.py"
    script.write_text(DRIVER)
    key = make_key(tmp_path / "controller_key")
    config = (
        CONFIG
        + "metadata:\n  launcher:\n    recover:\n      controller:\n"
        + f"        host: {CONTROLLER_IP}\n        ssh_user: root\n"
        + f"        ssh_private_key: {key}\n        python: {sys.executable}\n"
    )
    with (
        running_cluster(tmp_path, config) as aws,
        isolated_hosts(key, CONTROLLER_IP, 1) as (controller,),
    ):
        laptop_home = Path(aws.env["LAUNCHER_HOME"])
        run_id = _submit_detached(aws, script, shared_dir)

        # The laptop closes: no supervisor of the run is left on it (the only one runs in
        # the controller's PID namespace), and its launcher home is gone.
        _assert_supervised_on(controller, run_id)
        # The credentials reached the controller as 0600 files in a 0700 directory.
        secrets = controller.path(f"~/.launcher-controller/secrets/{aws.name}/{run_id}")
        assert secrets.stat().st_mode & 0o777 == 0o700
        assert {f.stat().st_mode & 0o777 for f in secrets.iterdir()} == {0o600}
        assert "AWS_ENDPOINT_URL" in (secrets / "env").read_text()
        shutil.move(laptop_home, tmp_path / "laptop-home-gone")
        aws.env["LAUNCHER_HOME"] = str(tmp_path / "second-machine")
        try:
            count = shared_dir / "count"
            wait_for(
                lambda: count.exists() and int(count.read_text() or 0) >= HOLD_AT,
                300,
                "the first attempt to count to its hold",
            )
            (running,) = _runs(aws)
            assert running["id"] == run_id and running["state"] == "running", running
            assert running["supervised"] and running["attempts"] == 1, running
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

            ended: dict[str, Any] = {}

            def run_ended() -> bool:
                (ended_now,) = _runs(aws)
                ended.update(ended_now)
                return ended_now["state"] not in ("running", "recovering")

            try:
                wait_for(run_ended, 400, "the run to end")
                # --stop, by the controller's supervisor once the run had ended.
                wait_for(lambda: not aws.instances(), 300, "the cluster to be taken down")
            except AssertionError:
                raise AssertionError(_explain(aws, controller, run_id)) from None
            supervisor_log = controller.path(
                f"~/.launcher-controller/runs/{aws.name}/{run_id}/supervisor.log"
            ).read_text(errors="replace")
            logs = aws.run("jobs", "logs", str(aws.path), run_id, timeout=120)
        finally:
            aws.env["LAUNCHER_HOME"] = str(laptop_home)
            shutil.move(tmp_path / "laptop-home-gone", laptop_home)

        _assert_kept_and_resumed(aws, shared_dir, old_head["InstanceId"], workers, ended)
        assert f"head {old_head['InstanceId']} lost" in supervisor_log, supervisor_log[-6000:]
        assert "Terminated 2 node(s)" in supervisor_log, supervisor_log[-3000:]
        # The driver's output across both attempts, from the controller (no node is left).
        assert logs.returncode == 0, logs.stdout + logs.stderr
        assert "resuming from 0" in logs.stdout, logs.stdout
        assert f"resuming from {HOLD_AT}" in logs.stdout, logs.stdout
        # The credentials there are removed once the run has ended.
        wait_for(lambda: not secrets.exists(), 30, "the credentials to be removed there")


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
