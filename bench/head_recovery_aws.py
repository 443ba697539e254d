"""The AWS site of bench/bench_head_recovery.py (`--provider aws`): each arm's cluster on a
fresh moto EC2/IAM server in this process, every instance a real SSH host running real Ray,
as tests/aws_clusters.py and tests/test_aws_recover.py run them.

A loopback VPC (fakes/aws/server.py's `loopback_vpc`), all nodes in its first subnet
(127.16.1.0/24, so each has its own last octet and its own dashboard agent port), and
`use_internal_ips: true`: the launcher reaches the instances at their private addresses
only, never at an address moto invents outside loopback. `InstanceHosts` makes each running
instance an `IsolatedHost` (its own PID and mount namespaces, its own /root and /tmp) on its
address; a terminated instance's host is powered off, killing all it ran. Each head's death
is when EC2 (moto) accepted the TerminateInstances that took it (`TimedServer`); its machine
is off a poll (0.2 s) later.

The cluster: a spot head of CPU 0 whose fallback is an on-demand head type, two spot
workers of CPU 2 (min_workers 2) with an on-demand fallback, as examples/clusters/
local-recover.yaml has them; setup commands as the tests use (a line in ~/setup.log, and a
check that the node's Python imports Ray Tune), plus `sleep N` with --node-setup-s. The
sweep's storage and summary are under /var/tmp, which every host sees at the same path
(tests/conftest.py's `shared_dir`). `up` installs the launcher on each new head, as on AWS.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchError
from fakes.aws.faults import Call
from fakes.aws.server import InstanceHosts, MotoServer, amazon_image, loopback_vpc
from fakes.hosts.ssh import isolation_unavailable, ray_start_commands

NAME = "recovering-run"
SHARED_DIR = "/var/tmp"  # every host sees it at the same path (not /root, /tmp, /dev/shm)
LAUNCHER = str(Path(sys.executable).parent / "launcher")
# Ray's GCS listens on every address: a port of its own, not one another cluster on this
# machine (a test's) may hold.
GCS_PORT = 6491
LISTED = ["pending", "running", "shutting-down", "stopping", "stopped"]
UNLISTED_TIMEOUT_S = 120.0

NODE = "{InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET]"
SPOT = ", InstanceMarketOptions: {MarketType: spot}"
CONFIG = f"""\
cluster_name: {NAME}
max_workers: 4
idle_timeout_minutes: 5
provider:
  type: aws
  region: us-west-2
  use_internal_ips: true
  cache_stopped_nodes: false
auth:
  ssh_user: root
available_node_types:
  head:
    node_config: {NODE}{SPOT}}}
    resources: {{CPU: 0}}
    max_workers: 0
  head-on-demand:
    node_config: {NODE}}}
    resources: {{CPU: 0}}
    max_workers: 0
  spot:
    node_config: {NODE}{SPOT}}}
    resources: {{CPU: 2}}
    min_workers: 2
    max_workers: 2
  on-demand:
    node_config: {NODE}}}
    resources: {{CPU: 2}}
    min_workers: 0
    max_workers: 2
head_node_type: head
metadata:
  launcher:
    fallbacks:
      head: [head-on-demand]
      spot: [on-demand]
    recover:
      max_restarts_on_errors: 0
setup_commands:
  - echo "setup on $LAUNCHER_NODE_IP" >> ~/setup.log
  - python3 -c 'import ray.tune'
"""


def cluster_text(ami: str, subnet: str, node_setup_s: float) -> str:
    """The cluster file for moto's image `ami` and loopback subnet `subnet`; Ray started as
    on the tests' hosts, on GCS_PORT (the types' resources give each node its CPUs)."""
    text = CONFIG.replace("AMI", ami).replace("SUBNET", subnet)
    if node_setup_s:
        text += f"  - sleep {node_setup_s:g}\n"
    start = ray_start_commands(num_cpus=1).replace(":6379", f":{GCS_PORT}")
    return text + start.replace("--port=6379", f"--port={GCS_PORT}")


class TimedServer(MotoServer):
    """MotoServer noting when each head instance was terminated: when the TerminateInstances
    that took it came in (answered with success)."""

    def __init__(self) -> None:
        super().__init__()
        self.heads_terminated: dict[str, float] = {}

    def _forward(
        self, environ: dict[str, Any], call: Call
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if call.service != "ec2" or call.action != "TerminateInstances":
            return super()._forward(environ, call)
        at = time.time()
        response = super()._forward(environ, call)
        if response[0] == 200:
            with self.lock:
                for key, value in call.params.items():
                    instance = self._instance(value) if key.startswith("InstanceId.") else None
                    tags = {t["key"]: t["value"] for t in instance.get_tags()} if instance else {}
                    if tags.get("launcher-node-kind") == "head":
                        self.heads_terminated.setdefault(value, at)
        return response


@dataclass
class AwsSite:
    cluster: Path
    env: dict[str, str]
    server: TimedServer
    hosts: InstanceHosts
    left: list[str] = field(default_factory=list)

    def deaths(self) -> dict[str, float]:
        with self.server.lock:
            return dict(self.server.heads_terminated)

    def listed(self) -> list[str]:
        """The cluster's instances EC2 lists as not terminated."""
        reply = self.server.client("ec2").describe_instances(
            Filters=[
                {"Name": "tag:launcher-cluster", "Values": [NAME]},
                {"Name": "instance-state-name", "Values": LISTED},
            ]
        )
        return [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]]

    def wait_unlisted(self) -> None:
        deadline = time.monotonic() + UNLISTED_TIMEOUT_S
        while self.listed():
            if time.monotonic() > deadline:
                raise BenchError(f"instances still listed {UNLISTED_TIMEOUT_S:g} s after down")
            time.sleep(0.1)


def aws_site(
    node_setup_s: float, arm_env: Callable[[Path], dict[str, str]]
) -> Callable[[Path, bool], contextlib.AbstractContextManager[AwsSite]]:
    """Opens an arm's AWS site in `work` (under SHARED_DIR); `arm_env(home)` is the arm's
    environment, to which the server's (endpoint, fake credentials, region) is added."""

    @contextlib.contextmanager
    def opened(work: Path, keep: bool) -> Iterator[AwsSite]:
        reason = isolation_unavailable()
        if reason is not None:
            raise BenchError(f"the AWS site needs isolated hosts: {reason}")
        server = TimedServer()
        with server, InstanceHosts(server) as hosts:
            ec2 = server.client("ec2")
            subnet = loopback_vpc(ec2).subnet_ids[0]
            path = work / "cluster.yaml"
            path.write_text(cluster_text(amazon_image(server), subnet, node_setup_s))
            env = {**arm_env(work / "home"), **server.env()}
            for variable in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
                env.pop(variable, None)
            site = AwsSite(path, env, server, hosts)
            try:
                yield site
            finally:
                if keep:
                    keep_logs(site, work)
                site.left += clean_up(site)

    return opened


def keep_logs(site: AwsSite, work: Path) -> None:
    """The nodes' setup logs, and from each machine still on its autoscaler log and Ray's."""
    home = Path(site.env["LAUNCHER_HOME"])
    with contextlib.suppress(OSError):
        shutil.copytree(home / "clusters" / NAME / "logs", work / "logs", dirs_exist_ok=True)
    for instance, host in site.hosts.running().items():
        with contextlib.suppress(OSError):
            monitor = host.path("~/.launcher/head/monitor.log")
            if monitor.exists():
                shutil.copy(monitor, work / f"monitor-{instance}.log")
            ray_logs = host.path("/tmp/ray/session_latest/logs")
            if ray_logs.exists():
                shutil.copytree(ray_logs, work / "ray" / instance, dirs_exist_ok=True)


def clean_up(site: AwsSite) -> list[str]:
    """`launcher down`, until nothing is listed; whatever is left terminated. What was left
    (and what went wrong with the hosts), if anything."""
    left = []
    try:
        done = subprocess.run(
            [LAUNCHER, "down", "-y", str(site.cluster)], env=site.env, capture_output=True,
            text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            left.append(f"`launcher down` failed: {(done.stdout + done.stderr)[-500:]}")
    except subprocess.TimeoutExpired:
        left.append("`launcher down` timed out")
    try:
        site.wait_unlisted()
    except BenchError:
        still = site.listed()
        left.append(f"{len(still)} instance(s) listed after down, terminated: {still}")
        site.server.client("ec2").terminate_instances(InstanceIds=still)
    if site.hosts.outside:
        left.append(f"instances outside loopback, never contacted: {sorted(site.hosts.outside)}")
    left += [f"instance hosts: {error}" for error in site.hosts.errors]
    return left
