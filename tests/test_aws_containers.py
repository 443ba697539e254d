"""Ray's published AWS example (aws/example-full.yaml, which runs every node in a docker
container) end to end: the launcher CLI against moto's EC2/IAM server, each instance in a
loopback VPC a real SSH host (fakes/aws/hosts.py `InstanceHosts`) with the stand-in container
engine (fakes/hosts/fake_docker.py, installed by fakes/hosts/containers.py `equip`), and real Ray in
the "containers". The head's autoscaler runs in the head's container and launches the worker,
and starts it again, in a new container, when its machine stops (cache_stopped_nodes).

The example is read as published and changed only where this machine needs it; `example_full`
makes the changes and fails if anything else differs:
- `provider.use_internal_ips: true`: moto's public addresses (54.x) are outside this machine;
  the nodes are reached at their private 127.16.x.y ones, where the SSH hosts listen;
- `auth.ssh_user: root`: the test hosts log in root;
- each node type's `node_config.ImageId`: an image moto knows (the example's is a real AMI);
- each node type's `node_config.SubnetIds`: the loopback VPC's subnets in the example's two
  zones (us-west-2a, us-west-2b), since the default VPC's addresses are not on this machine;
- the worker type's `min_workers: 1` (the example's 0 starts no worker until there is demand):
  the head's autoscaler launches one worker as soon as it runs;
- the workers' `--object-manager-port=8076` in `worker_start_ray_commands`: Ray's object
  manager listens on all addresses, and the test machines share this box's network, so each
  worker takes a port of its own from its address (the head keeps 8076).
Nothing else changes: the region, zones, image, container name, run options, spot workers,
BlockDeviceMappings and the rest of Ray's start commands are the example's. The example has
no setup commands that need the internet. Ray on each machine is told its own address and a
dashboard agent port of its own by the machine's `ray` (fakes/hosts/containers.py `equip`),
since the test machines share this box's network; a machine of its own would find both by
itself.

On EC2 a container on the host's network reaches the instance metadata service for the head's
credentials; here each host's /root/.aws stands in for it, so `boot` names those files in
AWS_* variables of the host's shell, which the stand-in engine passes into `--net=host`
containers (fakes/hosts/fake_docker.py), with the metadata service turned off so nothing looks
beyond this machine.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.aws.server import InstanceHosts, MotoServer, loopback_vpc, tag
from fakes.hosts.containers import FAKE_DOCKER, containers_on, engine_calls, equip
from fakes.hosts.ssh import COUNT_NODES, NAMESPACES, IsolatedHost, isolation_unavailable
from launcher.runners.container import KEEP_ALIVE
from tests.cluster_helpers import wait_for
from tests.conftest import RAY_EXAMPLES

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

IMAGE = "rayproject/ray-ml:latest-gpu"  # the example's image
CLUSTER = "default"  # the example's cluster name
HEAD, WORKER = "ray.head.default", "ray.worker.default"
CONTAINER_HOME = "/root/fake-docker/home"  # the stand-in image's HOME on a host
MARKER = b"FAKE_DOCKER_CONTAINER=ray_container"  # in the environment of the container's processes
AWS_ENV = (
    "export AWS_CONFIG_FILE=/root/.aws/config AWS_SHARED_CREDENTIALS_FILE=/root/.aws/credentials"
    " AWS_EC2_METADATA_DISABLED=true\n"
)
CHANGED = {
    ("provider", "use_internal_ips"),
    ("auth", "ssh_user"),
    *(
        ("available_node_types", kind, "node_config", key)
        for kind in (HEAD, WORKER)
        for key in ("ImageId", "SubnetIds")
    ),
    ("available_node_types", WORKER, "min_workers"),
    ("worker_start_ray_commands",),
}
# Ray's object manager listens on every address: on machines sharing one network each needs
# a port of its own (the head keeps the example's 8076).
WORKER_PORT = "$((8000 + ${LAUNCHER_NODE_IP##*.}))"


def example_full(ami: str, subnets: list[str]) -> str:
    """Ray's aws/example-full.yaml with the changes the module docstring lists; fails if
    anything else would differ."""
    original = (RAY_EXAMPLES / "aws" / "example-full.yaml").read_text()
    text = original
    published_ami = "ami-0a2363a9cff180a64 # Deep Learning AMI (Ubuntu) Version 30"
    for old, new, count in (
        (
            "    cache_stopped_nodes: True # If not present, the default is True.\n",
            "    cache_stopped_nodes: True # If not present, the default is True.\n"
            "    use_internal_ips: true\n",
            1,
        ),
        ("    ssh_user: ubuntu\n", "    ssh_user: root\n", 1),
        (
            f"            ImageId: {published_ami}\n",
            f"            ImageId: {ami}\n            SubnetIds: [{', '.join(subnets)}]\n",
            2,
        ),
        ("        min_workers: 0\n", "        min_workers: 1\n", 1),
        (
            "    - ray start --address=$RAY_HEAD_IP:6379 --object-manager-port=8076\n",
            f"    - ray start --address=$RAY_HEAD_IP:6379 --object-manager-port={WORKER_PORT}\n",
            1,
        ),
    ):
        assert text.count(old) == count, old
        text = text.replace(old, new)
    before, after = leaves(yaml.safe_load(original)), leaves(yaml.safe_load(text))
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert changed == CHANGED
    return text


def leaves(node: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every value of a YAML document that is not a non-empty mapping, by its path."""
    if isinstance(node, dict) and node:
        found: dict[tuple[str, ...], Any] = {}
        for key, value in node.items():
            found.update(leaves(value, (*path, str(key))))
        return found
    return {path: node}


def boot(host: IsolatedHost) -> None:
    """What each test machine's image holds: the stand-in engine and a `ray` that names the
    machine's address (`equip`), and the stand-in for the metadata service's credentials."""
    equip(host)
    for rc in (".profile", ".bashrc"):
        with (host.home / rc).open("a") as out:
            out.write(AWS_ENV)


@dataclass
class Example:
    server: MotoServer
    hosts: InstanceHosts
    path: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "launcher", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )

    def instances(self, *states: str) -> list[dict[str, Any]]:
        reply = self.server.client("ec2").describe_instances(
            Filters=[
                {"Name": "tag:launcher-cluster", "Values": [CLUSTER]},
                {"Name": "instance-state-name", "Values": list(states)},
            ]
        )
        return [i for r in reply["Reservations"] for i in r["Instances"]]

    def live(self, node_type: str) -> list[dict[str, Any]]:
        return [
            i
            for i in self.instances("pending", "running", "stopping", "stopped")
            if tag(i, "launcher-node-type") == node_type
        ]

    def host(self, instance: dict[str, Any]) -> IsolatedHost:
        found: IsolatedHost = self.hosts.wait_for(instance["InstanceId"])
        return found


def container_processes(host: IsolatedHost) -> dict[str, str]:
    """The host's processes that run in its container: "PID start-time" -> name."""
    found = {}
    for pid in host.processes():
        try:
            if MARKER in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found[_identity(pid)] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
    return found


def _identity(pid: int) -> str:
    """`pid` with its start time, so that a reused PID is not taken for it."""
    return f"{pid} {Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[19]}"


def alive(identity: str) -> bool:
    """Whether the process `identity` names still runs (a zombie has ended)."""
    pid = int(identity.split(maxsplit=1)[0])
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z" and _identity(pid) == identity
    except OSError:
        return False


def assert_container(host: IsolatedHost) -> None:
    """The host's one container runs the example's image with its options."""
    made = engine_calls(host)
    assert ["pull", IMAGE] in made, (host.ip, made)  # pull_before_run: True
    (run,) = [c for c in made if c[0] == "run"]
    assert run[run.index("--name") + 1] == "ray_container" and "--net=host" in run
    assert run[run.index("--ulimit") + 1] == "nofile=65536:65536"  # the example's run_options
    assert run[-1 - len(KEEP_ALIVE) :] == [IMAGE, *KEEP_ALIVE]
    assert containers_on(host) == ["ray_container"]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Example]:
    tmp = tmp_path_factory.mktemp("aws-example-full")
    with MotoServer() as server, InstanceHosts(server, on_boot=boot) as hosts:
        ec2 = server.client("ec2")
        vpc = loopback_vpc(ec2)
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        path = tmp / "example-full.yaml"
        path.write_text(example_full(ami, vpc.subnet_ids[:2]))
        env = {**os.environ, **server.env(), "LAUNCHER_HOME": str(tmp / "home")}
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(name, None)
        made = Example(server, hosts, path, env)
        yield made
        made.run("down", "-y", str(path))
        hosts.check()


def test_up_starts_the_head_in_its_container(example: Example) -> None:
    result = example.run("up", "-y", str(example.path))
    assert result.returncode == 0, result.stdout + result.stderr
    (head,) = example.live(HEAD)
    host = example.host(head)
    assert_container(host)
    inside = host.path("~/fake-docker/home")
    # The launcher's own files on the head are in the container, not on the host.
    assert (inside / "ray_bootstrap_config.yaml").is_file()
    assert not host.path("~/ray_bootstrap_config.yaml").exists()
    assert (inside / ".launcher/venv/bin/python").exists()
    assert not host.path("~/.launcher/venv").exists()
    # Ray's head and the launcher's autoscaler run in the container.
    names = set(container_processes(host).values())
    assert {"gcs_server", "raylet"} <= names, names


def test_the_heads_autoscaler_launches_a_worker_in_its_own_container(example: Example) -> None:
    def worker_ready() -> bool:
        workers = example.live(WORKER)
        return any(tag(w, "launcher-node-status") == "up-to-date" for w in workers)

    try:
        wait_for(worker_ready, 240, "the worker the head's autoscaler launches")
    except AssertionError as failed:
        log = example.run("monitor", "--no-follow", "--lines", "80", str(example.path)).stdout
        raise AssertionError(f"{failed}; the head's autoscaler said:\n{log}") from None
    (worker,) = example.live(WORKER)
    (head,) = example.live(HEAD)
    assert worker.get("InstanceLifecycle") == "spot"  # the example's spot workers
    launched = {c.call.origin for c in example.server.calls("RunInstances")}
    assert head["InstanceId"] in launched  # the head's autoscaler (in its container) did it
    host = example.host(worker)
    assert_container(host)
    assert "raylet" in container_processes(host).values()
    counted = example.run("exec", str(example.path), f"echo home=$HOME; {COUNT_NODES}")
    assert counted.returncode == 0, counted.stdout + counted.stderr
    assert f"home={CONTAINER_HOME}" in counted.stdout  # exec runs in the head's container
    assert "alive 2" in counted.stdout
    assert any(c[0] == "exec" and "ray_container" in c for c in engine_calls(example.host(head)))


def test_second_up_reruns_nothing(example: Example) -> None:
    nodes = [*example.live(HEAD), *example.live(WORKER)]
    hosts = [example.host(n) for n in nodes]
    before = {h.ip: (len(engine_calls(h)), container_processes(h)) for h in hosts}
    result = example.run("up", "-y", str(example.path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "created" not in out.replace("(nothing created)", ""), out
    assert "launcher reused on the head" in out and "autoscaler running on the head" in out
    assert {n["InstanceId"] for n in [*example.live(HEAD), *example.live(WORKER)]} == {
        n["InstanceId"] for n in nodes
    }
    for host in hosts:
        calls, processes = before[host.ip]
        new = engine_calls(host)[calls:]
        assert not [c for c in new if c[0] in ("pull", "run", "rm", "stop")], (host.ip, new)
        assert containers_on(host) == ["ray_container"]
        ray = {p: n for p, n in processes.items() if n in ("gcs_server", "raylet")}
        assert ray and ray.items() <= container_processes(host).items(), host.ip  # not restarted


def test_a_worker_stopped_and_started_again_gets_a_new_container(example: Example) -> None:
    """The machine of a worker stops (cache_stopped_nodes keeps it): the head's autoscaler
    starts it again for min_workers, and its container, exited with the machine, is
    replaced."""
    (worker,) = example.live(WORKER)
    host = example.host(worker)
    before = len(engine_calls(host))
    example.hosts.hold(worker["InstanceId"])  # the machine is off before EC2 says "stopped"
    example.hosts.wait_gone(worker["InstanceId"])
    example.server.client("ec2").stop_instances(InstanceIds=[worker["InstanceId"]])
    example.hosts.release(worker["InstanceId"])

    def set_up_again() -> bool:
        (now,) = example.live(WORKER)
        return (
            now["State"]["Name"] == "running"
            and any(c[0] == "run" for c in engine_calls(host)[before:])
            and tag(now, "launcher-node-status") == "up-to-date"
        )

    wait_for(set_up_again, 120, "the stopped worker to be started and set up again")
    assert [w["InstanceId"] for w in example.live(WORKER)] == [worker["InstanceId"]]
    new = [c[:2] for c in engine_calls(host)[before:] if c[0] in ("rm", "run")]
    assert new == [["rm", "-f"], ["run", "-d"]], new
    assert "raylet" in container_processes(host).values()


def test_down_ends_the_containers_and_terminates_every_instance(example: Example) -> None:
    nodes = [*example.live(HEAD), *example.live(WORKER)]
    running = {n["InstanceId"]: container_processes(example.host(n)) for n in nodes}
    assert all(running.values()), running
    result = example.run("down", "-y", str(example.path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert example.instances("pending", "running", "stopping", "stopped", "shutting-down") == []
    assert {i["InstanceId"] for i in example.instances("terminated")} >= set(running)
    for instance_id, processes in running.items():
        example.hosts.wait_gone(instance_id)
        assert not [p for p in processes if alive(p)], instance_id
    # Only loopback addresses were ever made hosts (and so contacted).
    assert example.hosts.started and not example.hosts.outside


def test_a_container_does_not_outlive_its_machines_boot(tmp_path: Path) -> None:
    """The example's cache_stopped_nodes stops and restarts workers: after a restart the
    stand-in engine reports the container exited, as docker does after a reboot."""
    env = {"PATH": os.environ["PATH"], "FAKE_DOCKER_ROOT": str(tmp_path)}
    docker = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_DOCKER))}"
    running = f"{docker} inspect --format '{{{{.State.Running}}}}' c"

    def sh(*prefix: str, command: str) -> subprocess.CompletedProcess[str]:
        argv = [*prefix, "sh", "-c", command]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)

    started = f"{docker} run -d --name c img tail -f /dev/null >/dev/null && {running}"
    assert sh(*NAMESPACES, command=started).stdout.strip() == "true"  # a boot of its own
    assert sh(command=running).stdout.strip() == "false"  # that boot is over
    refused = sh(command=f"{docker} exec c true")
    assert refused.returncode == 1 and "is not running" in refused.stderr
