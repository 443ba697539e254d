"""The `docker:` flow against real podman: isolated sshd hosts (fakes/hosts/ssh.py), each with
podman and a store of its own, images pulled from a real registry on a loopback address, and
real Ray in the containers (fakes/hosts/podman.py says how images, registry and stores work).

Ray's on-prem example config (local/example-full.yaml) brings up a head and two workers on
three hosts, changed only where this test needs it: addresses, `use_podman: true`, its
`--ulimit nofile=65536:65536` lowered to what the test machines allow (16384; their root
cannot raise hard limits) with the process limit named too (else podman asks for more than
allowed), and head and worker run options the test sees on the containers. Its image name,
`rayproject/ray-ml:latest-gpu`, is pushed to the local registry, which the hosts search.
A one-host cluster then checks pulls and replacing a container whose image or options
changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakes.hosts.podman import (
    NOFILE_MAX,
    NPROC_MAX,
    Machine,
    Registry,
    equip_podman,
    registry,
    skip_without_podman,
)
from fakes.hosts.ssh import COUNT_NODES, _alive, _identity, isolated_hosts, make_key
from launcher.runners.container import ContainerSpec, HostFacts, run_command
from tests.cluster_helpers import on_terminal, run
from tests.test_containers import example_full, ssh_agent

HEAD_IP, WORKER_IPS = "127.0.7.1", ["127.0.7.2", "127.0.7.3"]
SMALL_IP = "127.0.7.10"
REGISTRY_ADDRESS = "127.0.7.250:5799"  # not 5000: a system docker-registry may hold *:5000
IMAGE = "rayproject/ray-ml:latest-gpu"
REPOSITORY = IMAGE.split(":", maxsplit=1)[0]
NAME = "ray_container"
RAY_DAEMONS = {"raylet", "gcs_server"}
NOFILE = min(16384, NOFILE_MAX)  # the example asks for 65536, more than the test machines allow


def launcher(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(*args, env=env, timeout=600)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The registry, holding Ray's example image and two versions of a small one."""
    skip_without_podman()
    with registry(tmp_path_factory.mktemp("registry"), REGISTRY_ADDRESS) as made:
        made.push("ray-ml", IMAGE)
        made.push("small:1", "launcher-test/small:1")
        made.push("small:2", "launcher-test/small:2")
        yield made


def example_podman(head: str, workers: list[str]) -> str:
    """Ray's example-full.yaml with its addresses filled in and the docker section changed
    only as the module's docstring says."""
    text = example_full(head, workers)
    original = '    run_options:   # Extra options to pass into "docker run"\n'
    original += "        - --ulimit nofile=65536:65536\n"
    assert original in text
    return text.replace(
        original,
        "    use_podman: true\n"
        "    run_options:\n"
        f"        - --ulimit nofile={NOFILE}:{NOFILE}\n"
        # Given any --ulimit, podman sets 1048576 processes unless told: more than allowed.
        f"        - --ulimit nproc={NPROC_MAX}:{NPROC_MAX}\n"
        '    head_run_options: ["--label launcher.test.role=head", "-e TEST_ROLE=head"]\n'
        '    worker_run_options: ["--label launcher.test.role=worker", "-e TEST_ROLE=worker"]\n',
    )


@dataclass
class Cluster:
    path: Path
    env: dict[str, str]
    head: Machine
    workers: list[Machine]
    registry: Registry

    @property
    def machines(self) -> list[Machine]:
        return [self.head, *self.workers]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return launcher(*args, env=self.env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, images: Registry) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("podman-example")
    key = make_key(tmp / "id_ed25519")
    with (
        isolated_hosts(key, HEAD_IP, 1 + len(WORKER_IPS), start=False) as hosts,
        ssh_agent(tmp, key) as agent,
    ):
        # The head machine reaches the workers with its own key (the config names none).
        machines = [equip_podman(h, images.address, key if h is hosts[0] else None) for h in hosts]
        for host in hosts:
            host.start()
        path = tmp / "example-full.yaml"
        path.write_text(example_podman(HEAD_IP, WORKER_IPS))
        env = {**os.environ, "LAUNCHER_HOME": str(tmp / "launcher-home"), "SSH_AUTH_SOCK": agent}
        made = Cluster(path, env, machines[0], machines[1:], images)
        try:
            yield made
        finally:
            made.run("down", "-y", str(path))
            for machine in machines:
                machine.release()


def _in_container(machine: Machine, command: str) -> str:
    return machine.podman("exec", NAME, "sh", "-c", command).stdout


def _names(pids: dict[int, str] | list[int]) -> set[str]:
    if isinstance(pids, dict):
        return set(pids.values())
    names = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
    return names


def test_up_runs_setup_and_ray_in_podman_containers_on_three_machines(cluster: Cluster) -> None:
    assert cluster.registry.manifest_gets(REPOSITORY) == 0
    result = cluster.run("up", "-y", str(cluster.path))
    assert result.returncode == 0, result.stdout + result.stderr
    # pull_before_run: true: each machine pulled the image from the registry for itself.
    assert cluster.registry.manifest_gets(REPOSITORY) == 3
    for machine in cluster.machines:
        assert machine.containers() == [NAME], machine.ip
        assert _in_container(machine, "cat /etc/test-image") == "ray-ml\n"
        role = "head" if machine is cluster.head else "worker"
        labels = json.loads(machine.inspect(NAME, "{{json .Config.Labels}}"))
        assert labels["launcher.test.role"] == role
        assert f"TEST_ROLE={role}" in json.loads(machine.inspect(NAME, "{{json .Config.Env}}"))
        limits = json.loads(machine.inspect(NAME, "{{json .HostConfig.Ulimits}}"))
        assert {"Name": "RLIMIT_NOFILE", "Soft": NOFILE, "Hard": NOFILE} in limits
        assert machine.inspect(NAME, "{{.HostConfig.NetworkMode}}") == "host"
        # Ray runs in the container (another PID namespace), not on the machine itself.
        inside = _names(machine.container_processes())
        assert "raylet" in inside, (machine.ip, inside)
        assert not _names(machine.host.processes()) & RAY_DAEMONS, machine.ip
    assert "gcs_server" in _names(cluster.head.container_processes())
    # The launcher's files on the head are in its container's filesystem, not the host's.
    head = cluster.head
    assert _in_container(head, "test -f ~/ray_bootstrap_config.yaml && echo yes") == "yes\n"
    assert _in_container(head, "test -x ~/.launcher/venv/bin/python && echo yes") == "yes\n"
    assert not head.host.path("~/ray_bootstrap_config.yaml").exists()
    assert not head.host.path("~/.launcher/venv").exists()
    # The autoscaler in the head's container claimed both workers in the host's records.
    for ip in WORKER_IPS:
        assert head.host.path(f"~/.launcher/onprem/default/{ip}.json").is_file()


def test_exec_runs_in_the_head_container(cluster: Cluster) -> None:
    command = f"echo home=$HOME role=$TEST_ROLE image=$(cat /etc/test-image); {COUNT_NODES}"
    result = cluster.run("exec", str(cluster.path), command)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "home=/root role=head image=ray-ml" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "alive 3"
    status = cluster.run("exec", str(cluster.path), "ray status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Autoscaler status" in status.stdout and "autoscaler failed" not in status.stdout


def test_rsync_up_and_down_use_the_containers_files(cluster: Cluster, tmp_path: Path) -> None:
    upload = tmp_path / "up"
    (upload / "sub").mkdir(parents=True)
    (upload / "x.txt").write_text("x\n")
    (upload / "sub" / "y.txt").write_text("y\n")
    sent = cluster.run("rsync-up", str(cluster.path), f"{upload}/", "~/uploaded/")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert _in_container(cluster.head, "cat ~/uploaded/x.txt ~/uploaded/sub/y.txt") == "x\ny\n"
    assert not cluster.head.host.path("~/uploaded").exists()
    _in_container(cluster.head, "echo made-inside > ~/uploaded/sub/z.txt")
    back = tmp_path / "back"
    got = cluster.run("rsync-down", str(cluster.path), "~/uploaded/", f"{back}/")
    assert got.returncode == 0, got.stdout + got.stderr
    assert (back / "sub" / "z.txt").read_text() == "made-inside\n"
    assert (back / "x.txt").read_text() == "x\n"


def test_attach_opens_a_shell_in_the_head_container(cluster: Cluster) -> None:
    typed = b"echo in-$HOME-$(cat /etc/test-image)-$((6 * 7)); exit 3\n"
    output, code = on_terminal(["attach", str(cluster.path)], cluster.env, typed)
    assert "in-/root-ray-ml-42" in output
    assert code == 3


def test_second_up_reuses_the_running_containers(cluster: Cluster) -> None:
    ids = {m.ip: m.inspect(NAME, "{{.Id}}") for m in cluster.machines}
    daemons = {m.ip: sorted(map(_identity, m.container_processes())) for m in cluster.machines}
    pulls = cluster.registry.manifest_gets(REPOSITORY)
    result = cluster.run("up", "-y", str(cluster.path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "launcher reused on the head" in result.stdout + result.stderr
    assert cluster.registry.manifest_gets(REPOSITORY) == pulls  # nothing pulled
    for machine in cluster.machines:
        assert machine.inspect(NAME, "{{.Id}}") == ids[machine.ip]
        # Nothing restarted: the same processes (Ray's among them) run in the container.
        assert sorted(map(_identity, machine.container_processes())) == daemons[machine.ip]


def test_down_removes_every_container_and_ray_with_them(cluster: Cluster) -> None:
    inside = {m.ip: [_identity(p) for p in m.container_processes()] for m in cluster.machines}
    assert all(inside.values())
    result = cluster.run("down", "-y", str(cluster.path))
    assert result.returncode == 0, result.stdout + result.stderr
    # The autoscaler in the head's container exited when asked (and was reaped there).
    assert "did not stop" not in result.stdout + result.stderr
    for machine in cluster.machines:
        assert machine.containers() == [], machine.ip
        assert not [i for i in inside[machine.ip] if i and _alive(i)], machine.ip
        assert not _names(machine.host.processes()) & RAY_DAEMONS, machine.ip
        # The images stay.
        assert machine.podman("image", "exists", IMAGE, check=False).returncode == 0
    assert not cluster.head.host.path("~/.launcher/onprem/default").exists()


# -- one machine: pulls, and replacing a container --------------------------------------------
SMALL = """
cluster_name: podman-small
provider: {type: local, head_ip: ADDRESS, worker_ips: []}
auth: {ssh_user: root, ssh_private_key: KEY}
docker:
  image: IMAGE
  container_name: small
  use_podman: true
  pull_before_run: PULL
  run_options: ["--label launcher.test.options=OPTIONS"]
file_mounts:
  ~/data: DATA
  ~/single.txt: DATA/a.txt
initialization_commands:
  - echo "init in $HOME" >> ~/init.log
setup_commands:
  - echo "setup from $(cat /etc/test-image)" >> ~/setup.log
head_start_ray_commands:
  - echo started >> ~/started.log
"""


@dataclass
class SmallMachine:
    machine: Machine
    key: Path


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, images: Registry) -> Iterator[SmallMachine]:
    tmp = tmp_path_factory.mktemp("podman-small")
    key = make_key(tmp / "id_ed25519")
    with isolated_hosts(key, SMALL_IP, 1, start=False) as (host,):
        machine = equip_podman(host, images.address)
        host.start()
        try:
            yield SmallMachine(machine, key)
        finally:
            machine.release()


class Small:
    def __init__(self, small: SmallMachine, tmp: Path) -> None:
        self.machine, self.key, self.path = small.machine, small.key, tmp / "small.yaml"
        self.env = {**os.environ, "LAUNCHER_HOME": str(tmp / "launcher-home")}
        self.data = tmp / "data"
        (self.data / "sub").mkdir(parents=True)
        (self.data / "a.txt").write_text("alpha\n")
        (self.data / "sub" / "b.txt").write_text("beta\n")

    def up(self, image: str, *, pull: bool, options: str, restart_only: bool = False) -> str:
        text = SMALL.replace("ADDRESS", SMALL_IP).replace("KEY", str(self.key))
        text = text.replace("DATA", str(self.data))
        text = text.replace("IMAGE", image).replace("PULL", str(pull).lower())
        self.path.write_text(text.replace("OPTIONS", options))
        more = ("--restart-only",) if restart_only else ()
        result = launcher("up", "-y", *more, str(self.path), env=self.env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout + result.stderr

    def inside(self, command: str) -> str:
        return self.machine.podman("exec", "small", "sh", "-c", command).stdout


def test_pull_before_run_and_replacing_a_changed_container(
    small: SmallMachine, images: Registry, tmp_path: Path
) -> None:
    repository = "launcher-test/small"
    cluster = Small(small, tmp_path)
    machine = cluster.machine
    # The machine has its own build of small:1, under the name it has in the registry.
    machine.load_image("built-here", f"{images.address}/{repository}:1", tmp_path)
    try:
        # pull_before_run: false, the image is there: no pull, the machine's own image.
        cluster.up(f"{repository}:1", pull=False, options="a")
        assert cluster.inside("cat /etc/test-image ~/setup.log") == (
            "built-here\nsetup from built-here\n"
        )
        assert images.manifest_gets(repository) == 0
        # Initialization ran on the machine; files went into the container only.
        host = machine.host
        assert host.path("~/init.log").read_text() == "init in /root\n"
        files = "cat ~/data/sub/b.txt ~/single.txt; test -e ~/init.log || echo no-init"
        assert cluster.inside(files) == "beta\nalpha\nno-init\n"
        assert not host.path("~/data").exists() and not host.path("~/single.txt").exists()

        # The container is gone (the machine rebooted): --restart-only sets up a new one.
        machine.podman("rm", "--force", "small")
        out = cluster.up(f"{repository}:1", pull=False, options="a", restart_only=True)
        assert "container small started" in out, out
        assert cluster.inside("cat ~/setup.log ~/data/sub/b.txt ~/started.log") == (
            "setup from built-here\nbeta\nstarted\n"
        )
        first = machine.inspect("small", "{{.Id}}")

        # Other options (pull_before_run: true now): a new container from a real pull.
        out = cluster.up(f"{repository}:1", pull=True, options="b")
        assert "container small replaced: its run options changed" in out, out
        assert images.manifest_gets(repository) == 1
        assert machine.inspect("small", "{{.Id}}") != first
        labels = json.loads(machine.inspect("small", "{{json .Config.Labels}}"))
        assert labels["launcher.test.options"] == "b"
        # A new container starts from its image: setup ran once in it, on the pulled image.
        assert cluster.inside("cat /etc/test-image ~/setup.log") == "small:1\nsetup from small:1\n"
        assert cluster.inside("cat ~/started.log") == "started\n"

        # Another image: replaced again.
        out = cluster.up(f"{repository}:2", pull=True, options="b")
        changed = "replaced: the image changed from launcher-test/small:1 to launcher-test/small:2"
        assert changed in out, out
        assert images.manifest_gets(repository) == 2
        assert cluster.inside("cat /etc/test-image ~/setup.log") == "small:2\nsetup from small:2\n"

        # Unchanged: reused, and not pulled again although pull_before_run is true.
        second = machine.inspect("small", "{{.Id}}")
        out = cluster.up(f"{repository}:2", pull=True, options="b")
        assert "up to date (nothing to do)" in out, out
        assert machine.inspect("small", "{{.Id}}") == second
        assert images.manifest_gets(repository) == 2
        assert cluster.inside("cat ~/setup.log") == "setup from small:2\n"
    finally:
        down = launcher("down", "-y", str(cluster.path), env=cluster.env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert machine.containers() == []


def test_the_container_ends_at_once_when_stopped_and_reaps_what_exits(
    small: SmallMachine,
) -> None:
    """Its keep-alive command (PID 1) ends on SIGTERM, so `podman stop` and `rm -f` do not
    wait their 10 s and then SIGKILL it, and reaps the processes left to it: a daemon that
    `exec` started and that exited is gone, not a zombie that `kill -0` still finds."""
    podman = small.machine.podman
    spec = ContainerSpec("podman", "keepalive", "launcher-test/small:1", pull_before_run=False)
    podman("pull", "launcher-test/small:1")
    podman(*shlex.split(run_command(spec, HostFacts("/root")))[1:])
    try:
        started = podman("exec", "keepalive", "sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!")
        daemon = started.stdout.strip()
        podman("exec", "keepalive", "kill", daemon)
        deadline = time.monotonic() + 60
        while (
            podman("exec", "keepalive", "test", "-e", f"/proc/{daemon}", check=False).returncode
            == 0
        ):
            assert time.monotonic() < deadline, "the exited daemon was never reaped"
            time.sleep(0.1)
        podman("kill", "--signal", "TERM", "keepalive")
        # Waits for the container to exit; the subprocess timeout fails the test otherwise.
        assert podman("wait", "keepalive").stdout.strip() == "0"
    finally:
        podman("rm", "--force", "--time", "0", "keepalive", check=False)
