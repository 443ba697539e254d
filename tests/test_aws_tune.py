"""The spot training flow on AWS end to end (DESIGN.md, "The typical day"): the launcher CLI
against moto's EC2 server, each instance a real SSH host running real Ray
(tests/test_aws_cluster.py's setup), a Ray Tune sweep (examples/tune_sweep.py) submitted to
a cluster whose workers are spot, and one spot worker reclaimed by AWS while the trials run.
The autoscaler replaces it with its on-demand fallback, and Tune resumes the lost trials
there from their checkpoints, kept in a directory every host reaches (the hosts share this
machine's file system outside /root, /tmp and /dev/shm, as a shared file system would).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.aws.server import InstanceHosts, MotoServer, interrupt_spot, loopback_vpc, tag
from fakes.hosts.ssh import isolation_unavailable, ray_start_commands
from tests.cluster_helpers import wait_for
from tests.conftest import REPO
from tests.test_aws_cluster import CONFIG, AwsCluster, status_of

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

TRIALS, STEPS, STEP_S, CHECKPOINT_EVERY = 4, 30, 1.0, 3
SWEEP = "tune-sweep"  # the experiment's name: its trials' directories are under it


def tune_config(ami: str, subnet_a: str, subnet_b: str) -> str:
    """tests/test_aws_cluster.py's cluster, made for training: the head only runs the
    driver (0 CPUs), two 2-CPU spot workers in one zone hold the four 1-CPU trials, and the
    on-demand fallback is in another zone, so its node has an address of its own. Ray is
    told those CPUs by the launcher, from the types' `resources` (the start commands say
    --num-cpus=1 everywhere; the types' resources override it, as with Ray's launcher)."""
    text = CONFIG.replace("AMI", ami).replace("SUBNET_A", subnet_a).replace("SUBNET_B", subnet_b)
    config: dict[str, Any] = yaml.safe_load(text)
    config.update(yaml.safe_load(ray_start_commands(num_cpus=1)))
    types = config["available_node_types"]
    types["head"]["resources"] = {"CPU": 0}
    types["spot"].update(resources={"CPU": 2}, min_workers=2, max_workers=2)
    types["spot"]["node_config"]["SubnetIds"] = [subnet_a]
    types["ondemand"].update(resources={"CPU": 2}, max_workers=1)
    types["ondemand"]["node_config"]["SubnetIds"] = [subnet_b]
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsCluster]:
    with MotoServer() as server, InstanceHosts(server) as hosts:
        ec2 = server.client("ec2")
        vpc = loopback_vpc(ec2)
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        a, b, _ = vpc.subnet_ids
        path = tmp_path / "cluster.yaml"
        path.write_text(tune_config(ami, a, b))
        env = {**os.environ, **server.env(), "LAUNCHER_HOME": str(tmp_path / "home")}
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(name, None)
        cluster = AwsCluster(server, hosts, vpc, path, env)
        try:
            yield cluster
        finally:
            cluster.run("down", "-y", str(path))
        hosts.check()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every host reaches at the same path (outside /root, /tmp, /dev/shm)."""
    path = Path(tempfile.mkdtemp(prefix="launcher-tune-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def checkpointed_twice(experiment: Path) -> bool:
    """Every trial has two checkpoints in storage. A trial goes on after a report only when
    Tune asks for its next result, having processed the one before, so its first checkpoint
    is registered with Tune by then (a checkpoint's directory alone may be mid-copy, or not
    yet known to Tune: a trial lost then would start again from step 0)."""
    trials = [d for d in experiment.glob("*") if d.is_dir()]
    done = [d for d in trials if len(list(d.glob("checkpoint_*/state.json"))) >= 2]
    return len(trials) == TRIALS and len(done) == TRIALS


def trials_on(aws: AwsCluster, instance: dict[str, Any]) -> int:
    """How many Tune trial processes (Ray actors of class ImplicitFunc) run on `instance`."""
    found = 0
    for pid in aws.hosts.host(instance["InstanceId"]).processes():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        found += command.startswith(b"ray::ImplicitFunc")
    return found


def sweep_losing_a_spot_worker(
    aws: AwsCluster, shared_dir: Path
) -> tuple[int, dict[str, Any], list[str]]:
    """Submit the sweep; once every trial has checkpointed, AWS reclaims a spot worker
    that runs trials. Returns the submit's exit code, the reclaimed instance and the
    instances there were just before."""
    spot = aws.of_type("spot")
    log = (shared_dir / "submit.log").open("w")
    sweep_args = {
        "--trials": TRIALS,
        "--steps": STEPS,
        "--step-seconds": STEP_S,
        "--checkpoint-every": CHECKPOINT_EVERY,
        "--name": SWEEP,
        "--storage-path": shared_dir,
        "--summary": shared_dir / "summary.json",
    }
    submit = subprocess.Popen(
        [sys.executable, "-m", "launcher", "submit", str(aws.path)]
        + [str(REPO / "examples" / "tune_sweep.py")]
        + [str(part) for pair in sweep_args.items() for part in pair],
        env=aws.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        try:
            wait_for(
                lambda: checkpointed_twice(shared_dir / SWEEP) or submit.poll() is not None,
                240,
                "every trial to write its checkpoints",
            )
            assert submit.poll() is None, "the sweep ended before the interruption"
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{explain(aws, shared_dir)}") from None
        victim = next(i for i in spot if trials_on(aws, i) > 0)
        before = [i["InstanceId"] for i in aws.instances()]
        interrupt_spot(aws.server, victim["InstanceId"], aws.hosts)
        try:
            return submit.wait(240), victim, before
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the sweep did not end within 240 s of the interruption\n"
                f"{explain(aws, shared_dir)}"
            ) from None
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
        log.close()


def explain(aws: AwsCluster, shared_dir: Path) -> str:
    """The sweep's output and the autoscaler's log, for a failure's message."""
    log = shared_dir / "submit.log"
    sweep = log.read_text()[-6000:] if log.exists() else "(none)"
    monitor = aws.run("monitor", "--no-follow", "--lines", "100", str(aws.path)).stdout
    return f"the sweep said:\n{sweep}\nthe autoscaler said:\n{monitor}"


def test_a_sweep_on_spot_workers_survives_a_reclaimed_worker(
    shared_dir: Path, aws: AwsCluster
) -> None:
    up = aws.run("up", "-y", str(aws.path))
    assert up.returncode == 0, up.stdout + up.stderr
    # Both spot workers in Ray before the sweep, so the four trials start together, two
    # on each, and all are mid-way when one worker goes.
    wait_for(
        lambda: [status_of(i, "up-to-date") for i in aws.of_type("spot")] == [True, True],
        180,
        "two spot workers up to date",
    )
    assert all(i.get("InstanceLifecycle") == "spot" for i in aws.of_type("spot"))
    code, victim, before = sweep_losing_a_spot_worker(aws, shared_dir)
    assert code == 0, explain(aws, shared_dir)
    trials = json.loads((shared_dir / "summary.json").read_text())
    assert len(trials) == TRIALS, trials
    assert all(t["error"] is None and t["last_step"] == STEPS - 1 for t in trials), trials

    # The replacement: an on-demand worker standing in for the reclaimed spot one, made
    # after the interruption, at an address of its own (its type's zone is another).
    new = [i for i in aws.of_type("ondemand") if i["InstanceId"] not in before]
    assert len(new) == 1, new
    replacement = new[0]
    assert tag(replacement, "launcher-stands-in-for") == "spot"
    assert "InstanceLifecycle" not in replacement
    monitor = aws.run("monitor", "--no-follow", "--lines", "400", str(aws.path)).stdout
    zone = victim["Placement"]["AvailabilityZone"]
    assert f"{victim['InstanceId']} was preempted in {zone}" in monitor, monitor
    assert f"spot: preempted in {zone}, falling back to ondemand" in monitor, monitor

    # The trials that ran on the reclaimed worker resumed from a checkpoint on the
    # replacement; the others ran undisturbed on the spot worker that stayed.
    lost_ip, new_ip = victim["PrivateIpAddress"], replacement["PrivateIpAddress"]
    lost = [t for t in trials if lost_ip in t["nodes"]]
    assert lost, trials
    for trial in lost:
        assert trial["nodes"] == sorted([lost_ip, new_ip]), trial
        assert trial["resumed_from"] and min(trial["resumed_from"]) > 0, trial
    (survivor,) = [i for i in aws.of_type("spot") if i["InstanceId"] != victim["InstanceId"]]
    for trial in (t for t in trials if t not in lost):
        assert trial["nodes"] == [survivor["PrivateIpAddress"]], trial
        assert not trial["resumed_from"], trial

    down = aws.run("down", "-y", str(aws.path))
    assert down.returncode == 0, down.stdout + down.stderr
    assert aws.instances() == []
