"""Containers (`docker:`): which container each node gets, the command lines, and clusters
whose setup and Ray run in containers.

The end-to-end tests here use fakes/hosts/fake_docker.py, a stand-in for `docker` and `podman`
that records images and containers and runs `exec`'d commands on the host with the
container's own environment and home directory (its docstring says exactly what it models),
and run only on machines without podman: where podman (and docker-registry) are installed,
tests/test_podman.py runs the same flows against the real engine. Everything else is real:
the launcher, sshd on isolated hosts (fakes/hosts/ssh.py) and Ray, which runs in the
"containers" of Ray's own on-prem example config, read unchanged but for its addresses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.containers import FAKE_DOCKER, calls, containers_on, engine_calls, equip
from fakes.hosts.podman import real_engine_unavailable
from fakes.hosts.ssh import IsolatedHost, isolated_hosts, make_key
from launcher import secret_env
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.runners.container import (
    KEEP_ALIVE,
    LABEL,
    ContainerRunner,
    ContainerSpec,
    ContainerStart,
    ContainerState,
    HostFacts,
    StartAction,
    container_for,
    decide_start,
    exec_argv,
    parse_facts,
    parse_state,
    run_command,
    same_image,
)
from launcher.runners.local import LocalProcessRunner
from launcher.updater.hashing import node_hashes
from tests.cluster_helpers import on_terminal, run
from tests.conftest import RAY_EXAMPLES, run_cli

BASE = """
cluster_name: boxes
provider: {type: local, head_ip: 127.0.6.60, worker_ips: [127.0.6.61]}
auth: {ssh_user: root}
max_workers: 4
available_node_types:
  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}
  cpu: {node_config: {}, resources: {CPU: 2}, max_workers: 2}
  gpu:
    node_config: {}
    resources: {CPU: 2, GPU: 1}
    max_workers: 2
    docker: {worker_image: "ray:gpu", pull_before_run: false, worker_run_options: ["--gpus 1"]}
head_node_type: head
"""
PLAIN = "\n".join(line for line in BASE.splitlines() if "docker:" not in line) + "\n"


def config(docker: str, base: str = BASE) -> ClusterConfig:
    return parse_config(base + docker, "cluster.yaml", local_files=False)


# -- which container a node gets --------------------------------------------------------------
def test_head_and_worker_images_and_options_follow_rays_rules() -> None:
    made = config(
        "docker:\n  image: ray:cpu\n  head_image: ray:head\n  run_options: [--ulimit nofile=65536:65536]\n"
        "  head_run_options: [--cpus 1]\n  worker_run_options: [-e W=1]\n"
    )
    head = container_for(made, "head", head=True)
    cpu = container_for(made, "cpu", head=False)
    gpu = container_for(made, "gpu", head=False)
    assert head is not None and cpu is not None and gpu is not None
    assert (head.image, head.run_options) == (
        "ray:head",
        ("--ulimit nofile=65536:65536", "--cpus 1"),
    )
    assert (cpu.image, cpu.run_options) == ("ray:cpu", ("--ulimit nofile=65536:65536", "-e W=1"))
    assert (gpu.image, gpu.run_options) == ("ray:gpu", ("--ulimit nofile=65536:65536", "--gpus 1"))
    assert head.pull_before_run and cpu.pull_before_run and not gpu.pull_before_run
    assert head.name == cpu.name == "ray_container" and head.engine == "docker"
    assert not gpu.detect_gpus and cpu.detect_gpus  # the user chose GPUs for that type


def test_no_image_or_no_container_name_means_the_host() -> None:
    assert container_for(config("", PLAIN), "head", head=True) is None
    no_image = config('docker: {image: "", container_name: x}\n', PLAIN)
    assert container_for(no_image, "cpu", head=False) is None
    named = config("docker: {image: ray}\n", PLAIN)
    nameless = dataclasses.replace(
        named, docker=dataclasses.replace(named.docker, container_name="")
    )
    assert container_for(nameless, "head", head=True) is None  # as in Ray (validate refuses it)


def test_run_command_is_the_engine_argv_with_the_users_options_as_shell_words() -> None:
    spec = ContainerSpec(
        "docker",
        "ray_container",
        "rayproject/ray-ml:latest-gpu",
        pull_before_run=True,
        run_options=("--ulimit nofile=65536:65536",),
        mounts=("~/.launcher/onprem/c", "~/.ssh:ro"),
    )
    facts = HostFacts("/home/me", "/home/ray", gpus=True, mem_available_kb=1_000_000)
    assert shlex.split(run_command(spec, facts)) == [
        "docker", "run", "-d", "--name", "ray_container", "--net=host",
        "--label", f"{LABEL}={spec.digest}", "-e", "LC_ALL=C.UTF-8", "-e", "LANG=C.UTF-8",
        "-v", "/home/me/.launcher/onprem/c:/home/ray/.launcher/onprem/c",
        "-v", "/home/me/.ssh:/home/ray/.ssh:ro",
        "--gpus", "all", "--shm-size=337920000b",  # 30% of available memory, plus 10%
        "--ulimit", "nofile=65536:65536",
        "rayproject/ray-ml:latest-gpu", *KEEP_ALIVE,
    ]  # fmt: skip


def test_detection_is_skipped_when_disabled_or_set_by_the_user() -> None:
    facts = HostFacts("/root", gpus=True, mem_available_kb=10**12)
    huge = run_command(ContainerSpec("docker", "c", "i", True), facts)
    assert f"--shm-size={200 * 10**9}b" in huge  # capped as Ray caps its object store
    disabled = config(
        "docker:\n  image: i\n  disable_automatic_runtime_detection: true\n"
        "  disable_shm_size_detection: true\n"
    )
    user_set = config("docker:\n  image: i\n  run_options: ['--shm-size=1g', '--runtime=nvidia']\n")
    for made in (disabled, user_set):
        spec = container_for(made, "head", head=True)
        assert spec is not None
        words = shlex.split(run_command(spec, facts))
        assert "--gpus" not in words and not any(w.startswith("--shm-size=2") for w in words)
    podman = container_for(config("docker: {image: i, use_podman: true}\n"), "head", head=True)
    assert podman is not None
    words = shlex.split(run_command(podman, HostFacts("/root", gpus=True)))
    assert words[0] == "podman" and words[words.index("--device") + 1] == "nvidia.com/gpu=all"


def test_exec_passes_the_environment_as_data() -> None:
    spec = ContainerSpec("docker", "ray_container", "i", True)
    hostile = "a b'c\"$(touch /tmp/pwned) `x` $HOME\nline"
    argv = exec_argv(spec, "echo $X", {"X": hostile, "RAY_HEAD_IP": "10.0.0.1"})
    assert argv == [
        "docker", "exec", "-e", f"X={hostile}", "-e", "RAY_HEAD_IP=10.0.0.1",
        "ray_container", "bash", "--login", "-c", "-i", "echo $X",
    ]  # fmt: skip
    assert shlex.split(shlex.join(argv)) == argv  # survives the host's shell unchanged
    assert exec_argv(spec, "bash", {}, terminal=True)[:3] == ["docker", "exec", "-it"]
    with pytest.raises(ValueError, match="not valid"):
        exec_argv(spec, "true", {"A-B": "1"})


def test_a_running_container_is_kept_only_if_started_from_the_same_spec() -> None:
    spec = ContainerSpec("docker", "c", "img:2", True)
    assert decide_start(None, spec).action is StartAction.START
    assert (
        decide_start(ContainerState(True, "img:2", spec.digest), spec).action is StartAction.REUSE
    )
    changed = decide_start(ContainerState(True, "img:1", "old"), spec)
    assert changed.action is StartAction.REPLACE and "img:1 to img:2" in changed.reason
    stopped = decide_start(ContainerState(False, "img:2", spec.digest), spec)
    assert stopped.action is StartAction.REPLACE and "stopped" in stopped.reason
    foreign = decide_start(ContainerState(True, "img:2", None), spec)
    assert foreign.action is StartAction.REPLACE and "not started by the launcher" in foreign.reason


def test_an_image_is_the_same_whatever_the_engine_added_to_its_name() -> None:
    # Real podman reports the registry it pulled a short name from, docker its defaults.
    spec = ContainerSpec("podman", "c", "launcher-test/small:1", True)
    pulled = ContainerState(True, "127.0.7.250:5000/launcher-test/small:1", "old options")
    assert decide_start(pulled, spec).reason == "its run options changed"
    older = ContainerState(True, "127.0.7.250:5000/launcher-test/small:0", "old options")
    assert decide_start(older, spec).reason == (
        "the image changed from launcher-test/small:0 to launcher-test/small:1"
    )
    hub = ContainerState(True, "docker.io/library/ubuntu:22.04", "old")
    assert (
        "from ubuntu:22.04 to"
        in decide_start(hub, ContainerSpec("docker", "c", "ray", True)).reason
    )
    for reported, wanted in [
        ("docker.io/library/ubuntu:latest", "ubuntu"),
        ("docker.io/rayproject/ray:latest", "rayproject/ray"),
        ("localhost/ray:1", "ray:1"),
        ("quay.io/x/ray:1", "quay.io/x/ray:1"),
        ("ray@sha256:ab", "ray@sha256:ab"),
    ]:
        assert same_image(reported, wanted), (reported, wanted)
    for reported, wanted in [
        ("quay.io/x/ray:1", "ghcr.io/x/ray:1"),
        ("127.0.7.250:5000/ray:1", "ray:2"),
        ("ray:1", "localhost:5000/ray:1"),
        ("rayproject/ray:latest", "rayproject/ray-ml"),
    ]:
        assert not same_image(reported, wanted), (reported, wanted)


def test_what_the_host_reports_is_parsed() -> None:
    noise = "bash: no job control in this shell\n"
    assert parse_state(noise + "@@state absent") is None
    assert parse_state(f'@@state true\timg\t{{"{LABEL}":"abc"}}') == ContainerState(
        True, "img", "abc"
    )
    assert parse_state("@@state false\timg\tnull") == ContainerState(False, "img", None)
    facts = parse_facts(
        noise + '@@home /home/me\n@@gpus\n@@mem 2048\n@@env ["PATH=/bin","HOME=/home/ray"]'
    )
    assert facts == HostFacts("/home/me", "/home/ray", gpus=False, mem_available_kb=2048)
    assert parse_facts("@@home /root\n@@env \n").image_home == "/root"


def test_a_new_image_sets_the_node_up_again_but_keeps_its_start() -> None:
    one, two = config("docker: {image: a}\n", PLAIN), config("docker: {image: b}\n", PLAIN)
    first = node_hashes(one, "cpu", head=False, cwd=Path.cwd())
    second = node_hashes(two, "cpu", head=False, cwd=Path.cwd())
    assert first.setup != second.setup and first.start == second.start
    host = node_hashes(config("", PLAIN), "cpu", head=False, cwd=Path.cwd())
    assert host.setup not in (first.setup, second.setup)


# -- validate and plan --------------------------------------------------------------------------
def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


def test_validate_names_a_missing_image_or_container_name(tmp_path: Path) -> None:
    nameless = run_cli(
        "validate", _write(tmp_path, BASE + 'docker: {image: i, container_name: ""}\n')
    )
    assert nameless.exit_code == 2
    assert "docker.container_name: is empty" in nameless.stderr
    head_only = run_cli("validate", _write(tmp_path, BASE + "docker: {head_image: i}\n"))
    assert head_only.exit_code == 2
    assert "available_node_types.cpu: workers of cpu have no image" in head_only.stderr
    assert "available_node_types.gpu" not in head_only.stderr  # its type names one
    workers_only = run_cli("validate", _write(tmp_path, BASE + "docker: {worker_image: i}\n"))
    assert workers_only.exit_code == 2 and "no image for the head" in workers_only.stderr
    fine = run_cli(
        "validate", _write(tmp_path, BASE + "docker: {head_image: h, worker_image: w}\n")
    )
    assert fine.exit_code == 0, fine.stderr
    assert "docker" not in fine.stderr


def test_plan_shows_each_nodes_container(tmp_path: Path) -> None:
    docker = "docker: {image: ray:cpu, container_name: box, run_options: [--ulimit nofile=8:8]}\n"
    result = run_cli("plan", _write(tmp_path, BASE + docker))
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "container: box from ray:cpu (docker run --net=host --ulimit nofile=8:8" in out
    assert "container: box from ray:gpu" in out and "pulled only if missing" in out
    assert "initialization (on the host):" in out and "setup (in the container):" in out
    as_json = run_cli("plan", "--json", _write(tmp_path, BASE + docker))
    assert as_json.exit_code == 0, as_json.stderr
    containers = {n["node_type"]: n["container"] for n in json.loads(as_json.stdout)["nodes"]}
    assert containers["cpu"]["image"] == "ray:cpu" and containers["gpu"]["image"] == "ray:gpu"
    assert containers["cpu"]["run_options"] == ["--ulimit nofile=8:8"]
    assert {c["name"] for c in containers.values()} == {"box"}
    bare = run_cli("plan", "--json", _write(tmp_path, PLAIN))
    assert all(n["container"] is None for n in json.loads(bare.stdout)["nodes"])


# -- the runner, around a real process runner, with the stand-in engine -----------------------
@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """This machine as a host with the stand-in `docker` on its PATH (state in tmp_path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "podman"):
        (bin_dir / name).symlink_to(FAKE_DOCKER)
    root = tmp_path / "engine"
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "FAKE_DOCKER_ROOT": str(root),
    }
    yield root, env
    for record in (root / "containers").glob("*.json"):  # end what a failed test left
        subprocess.run([str(bin_dir / "docker"), "rm", "-f", record.stem], env=env, check=False)


def _host(tmp_path: Path, env: dict[str, str]) -> LocalProcessRunner:
    home = tmp_path / "host-home"
    home.mkdir(exist_ok=True)
    return LocalProcessRunner(home, env, tmp_path / "node.log")


def test_runner_starts_reuses_and_replaces_the_container(
    tmp_path: Path, engine: tuple[Path, dict[str, str]]
) -> None:
    root, env = engine
    host = _host(tmp_path, env)
    name = f"t{os.getpid()}"
    spec = ContainerSpec("docker", name, "img:1", True, ("--ulimit nofile=64:64",))
    runner = ContainerRunner(host, spec)
    assert runner.ensure() == ContainerStart(True, f"container {name} started (img:1)")
    assert ["pull", "img:1"] in calls(root)
    run = next(c for c in calls(root) if c[0] == "run")
    assert run[run.index("--ulimit") + 1] == "nofile=64:64" and "--net=host" in run
    hostile = "a b'c\"$(touch pwned) `touch pwned2` $HOME"
    out: list[str] = []
    result = runner.run('echo "$HOME|$X"; pwd', {"X": hostile}, echo=out.append)
    inside = str(root / "home")
    assert result.ok and out[-2:] == [f"{inside}|{hostile}", inside]
    assert not list(Path(inside).glob("pwned*")) and not list(host.home.glob("pwned*"))
    assert runner.run("exit 7").exit_code == 7
    said: list[str] = []
    secret = secret_env.script({"S": "in-container-secret"})
    command = secret_env.LOAD_FROM_STDIN + 'echo "${#S}"'
    assert runner.run(command, stdin=secret, echo=said.append).ok and said[-1] == "19"
    assert "in-container-secret" not in (tmp_path / "node.log").read_text()

    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "b.txt").write_text("b\n")
    (data / "a.txt").write_text("a\n")
    (data / "skip.log").write_text("no\n")
    runner.put(f"{data}/", "~/data/", excludes=("*.log",))
    runner.put(str(data / "a.txt"), "~/one/a-copy.txt")
    runner.put(str(data), "~/whole/")
    assert (Path(inside) / "data/sub/b.txt").read_text() == "b\n"
    assert not (Path(inside) / "data/skip.log").exists()
    assert (Path(inside) / "one/a-copy.txt").read_text() == "a\n"
    assert (Path(inside) / "whole/data/a.txt").read_text() == "a\n"
    assert not (host.home / "data").exists()  # staged under ~/.launcher only
    back = tmp_path / "back"
    runner.get("~/data/", f"{back}/")
    runner.get("~/one/a-copy.txt", str(tmp_path / "copy.txt"))
    assert (back / "sub/b.txt").read_text() == "b\n" and (
        tmp_path / "copy.txt"
    ).read_text() == "a\n"

    sleeper = runner.run("nohup sleep 300 >/dev/null 2>&1 & echo $!")
    assert sleeper.ok
    assert ContainerRunner(host, spec).ensure() == ContainerStart(
        False, f"container {name} reused (img:1)"
    )
    assert sum(c[0] == "run" for c in calls(root)) == 1

    newer = ContainerSpec("docker", name, "img:2", True, ("--ulimit nofile=64:64",))
    replaced = ContainerRunner(host, newer).ensure()
    assert replaced.fresh
    assert replaced.message == f"container {name} replaced: the image changed from img:1 to img:2"
    assert not (Path(inside) / "data").exists()  # a new container starts from its image
    pid = int(sleeper.output_tail.splitlines()[-1])
    assert not _alive(pid)  # the old container's processes ended with it


def test_runner_names_a_host_without_the_engine(tmp_path: Path) -> None:
    # A PATH with a shell and the basics but no engine (this machine may have one).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "cat", "awk", "tail", "tar"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    host = _host(tmp_path, {"PATH": str(bin_dir)})
    runner = ContainerRunner(host, ContainerSpec("podman", "c", "i", True))
    with pytest.raises(Exception, match="podman is not installed on the host"):
        runner.ensure()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


# -- end to end: isolated SSH hosts, real Ray, the stand-in engine ------------------------------
HEAD_IP, WORKER_IP, SMALL_IP = "127.0.6.60", "127.0.6.61", "127.0.6.62"
needs_sshd = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")
# The stand-in engine is for machines without a real one.
without_engine = pytest.mark.skipif(
    real_engine_unavailable() is None,
    reason="this machine has podman: tests/test_podman.py runs this flow against it",
)


def launcher(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(*args, env=env, timeout=400)


@contextlib.contextmanager
def ssh_agent(tmp: Path, key: Path) -> Iterator[str]:
    """An ssh-agent holding `key`: how a user whose config names no key logs in."""
    sock = tmp / "agent.sock"
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True)
        yield str(sock)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)


def example_full(head: str, workers: list[str]) -> str:
    """Ray's local/example-full.yaml with only its placeholders for addresses, user and
    worker counts filled in; fails if anything else would change."""
    original = (RAY_EXAMPLES / "local" / "example-full.yaml").read_text()
    text = original
    for old, new in {
        "YOUR_HEAD_NODE_HOSTNAME": head,
        "[WORKER_NODE_1_HOSTNAME, WORKER_NODE_2_HOSTNAME, ... ]": f"[{', '.join(workers)}]",
        "YOUR_USERNAME": "root",
        "TYPICALLY_THE_NUMBER_OF_WORKER_IPS": str(len(workers)),
    }.items():
        assert old in text
        text = text.replace(old, new)
    before, after = original.splitlines(), text.splitlines()
    assert len(before) == len(after)
    changed = [a.split(":")[0].strip() for a, b in zip(before, after, strict=True) if a != b]
    assert changed == ["head_ip", "worker_ips", "ssh_user", "min_workers", "max_workers"]
    return text


class Example:
    def __init__(self, tmp: Path, head: IsolatedHost, worker: IsolatedHost, agent: str) -> None:
        self.head, self.worker = head, worker
        self.path = tmp / "example-full.yaml"
        self.path.write_text(example_full(head.ip, [worker.ip]))
        self.env = {
            **os.environ,
            "LAUNCHER_HOME": str(tmp / "launcher-home"),
            "SSH_AUTH_SOCK": agent,
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return launcher(*args, env=self.env)


IMAGE = "rayproject/ray-ml:latest-gpu"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Example]:
    tmp = tmp_path_factory.mktemp("example-full")
    key = make_key(tmp / "id_ed25519")
    with isolated_hosts(key, HEAD_IP, 2) as (head, worker), ssh_agent(tmp, key) as agent:
        equip(head, key)  # the head machine reaches the workers with its own key
        equip(worker)
        made = Example(tmp, head, worker, agent)
        yield made
        made.run("down", "-y", str(made.path))


@needs_sshd
@without_engine
def test_example_full_comes_up_in_containers(example: Example) -> None:
    result = example.run("up", "-y", str(example.path))
    assert result.returncode == 0, result.stdout + result.stderr
    for host in (example.head, example.worker):
        made = engine_calls(host)
        assert ["pull", IMAGE] in made, host.ip
        (run,) = [c for c in made if c[0] == "run"]
        assert run[run.index("--name") + 1] == "ray_container" and "--net=host" in run
        assert run[run.index("--ulimit") + 1] == "nofile=65536:65536"  # the example's option
        assert run[-1 - len(KEEP_ALIVE) :] == [IMAGE, *KEEP_ALIVE]
        assert containers_on(host) == ["ray_container"]
    inside = example.head.path("~/fake-docker/home")
    # The launcher's own files on the head are in the container, not on the host.
    assert (inside / "ray_bootstrap_config.yaml").is_file()
    assert not example.head.path("~/ray_bootstrap_config.yaml").exists()
    assert (inside / ".launcher/venv/bin/python").exists()
    assert not example.head.path("~/.launcher/venv").exists()
    # The autoscaler in the head's container claimed the worker in the host's records.
    assert example.head.path(f"~/.launcher/onprem/default/{WORKER_IP}.json").is_file()


@needs_sshd
@without_engine
def test_exec_and_rsync_reach_into_the_head_container(example: Example, tmp_path: Path) -> None:
    status = example.run("exec", str(example.path), "ray status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "Autoscaler status" in status.stdout and "Resources" in status.stdout
    assert "autoscaler failed" not in status.stdout
    count = "python -c \"import ray; ray.init(); print(sum(n['Alive'] for n in ray.nodes()))\""
    alive = example.run("exec", str(example.path), f"echo home=$HOME; {count}")
    assert alive.returncode == 0, alive.stdout + alive.stderr
    assert "home=/root/fake-docker/home" in alive.stdout  # the container's home
    assert alive.stdout.strip().splitlines()[-1] == "2"
    upload = tmp_path / "up"
    upload.mkdir()
    (upload / "x.txt").write_text("x\n")
    sent = example.run("rsync-up", str(example.path), f"{upload}/", "~/uploaded/")
    assert sent.returncode == 0, sent.stderr
    assert example.head.path("~/fake-docker/home/uploaded/x.txt").read_text() == "x\n"
    assert not example.head.path("~/uploaded").exists()


@needs_sshd
@without_engine
def test_attach_opens_a_shell_in_the_head_container(example: Example) -> None:
    typed = b"echo in-$HOME-$((6 * 7)); exit 3\n"
    output, code = on_terminal(["attach", str(example.path)], example.env, typed)
    assert "in-/root/fake-docker/home-42" in output
    assert code == 3
    assert any(c[:2] == ["exec", "-it"] for c in engine_calls(example.head))


@needs_sshd
@without_engine
def test_second_up_reuses_the_containers_and_reruns_nothing(example: Example) -> None:
    before = {h.ip: len(engine_calls(h)) for h in (example.head, example.worker)}
    result = example.run("up", "-y", str(example.path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "launcher reused on the head" in result.stdout + result.stderr
    assert "autoscaler running on the head" in result.stdout + result.stderr
    for host in (example.head, example.worker):
        new = engine_calls(host)[before[host.ip] :]
        assert not [c for c in new if c[0] in ("pull", "run", "rm", "stop")], (host.ip, new)
        assert containers_on(host) == ["ray_container"]


@needs_sshd
@without_engine
def test_down_removes_the_containers_and_everything_in_them(example: Example) -> None:
    result = example.run("down", "-y", str(example.path))
    assert result.returncode == 0, result.stdout + result.stderr
    for host in (example.head, example.worker):
        assert containers_on(host) == [], host.ip
        assert ["rm", "-f", "ray_container"] in engine_calls(host)
        names = {_name(pid) for pid in host.processes()}
        assert not names & {"raylet", "gcs_server"}, (host.ip, names)
    assert not example.head.path("~/.launcher/onprem/default").exists()


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


SMALL = """
cluster_name: boxes-small
provider: {type: local, head_ip: HEAD_ADDRESS, worker_ips: []}
auth: {ssh_user: root, ssh_private_key: KEY}
docker:
  image: IMAGE
  container_name: small
  use_podman: true
  pull_before_run: false
  head_run_options: ["--ulimit nofile=1024:1024"]
file_mounts:
  ~/data: DATA
  ~/single.txt: DATA/a.txt
initialization_commands:
  - echo "init in $HOME" >> ~/init.log
setup_commands:
  - echo "setup in $HOME for $LAUNCHER_NODE_IP" >> ~/setup.log
head_start_ray_commands:
  - echo started >> ~/started.log
"""


@needs_sshd
@without_engine
def test_mounts_and_setup_go_into_the_container_and_a_new_image_replaces_it(  # noqa: PLR0915
    tmp_path: Path,
) -> None:
    key = make_key(tmp_path / "id_ed25519")
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("alpha\n")
    (data / "sub" / "b.txt").write_text("beta\n")
    path = tmp_path / "small.yaml"
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "launcher-home")}

    def write(image: str) -> None:
        text = SMALL.replace("HEAD_ADDRESS", SMALL_IP).replace("KEY", str(key))
        path.write_text(text.replace("DATA", str(data)).replace("IMAGE", image))

    with isolated_hosts(key, SMALL_IP, 1) as (host,):
        equip(host)
        inside = host.path("~/fake-docker/home")
        write("example/one:1")
        try:
            first = launcher("up", "-y", str(path), env=env)
            assert first.returncode == 0, first.stdout + first.stderr
            assert host.path("~/init.log").read_text() == "init in /root\n"  # on the host
            setup = f"setup in /root/fake-docker/home for {SMALL_IP}\n"
            assert (inside / "setup.log").read_text() == setup
            assert not host.path("~/setup.log").exists()
            assert (inside / "data/sub/b.txt").read_text() == "beta\n"
            assert (inside / "single.txt").read_text() == "alpha\n"
            assert not host.path("~/data").exists() and not host.path("~/single.txt").exists()
            log = [json.loads(line) for line in host.path("~/fake-docker/calls.log").open()]
            assert {entry["engine"] for entry in log} == {"podman"}
            made = [entry["argv"] for entry in log]
            assert ["image", "inspect", "example/one:1"] in made  # pulled only if missing
            assert made.index(["pull", "example/one:1"]) > made.index(
                ["image", "inspect", "example/one:1"]
            )
            (run,) = [c for c in made if c[0] == "run"]
            assert run[run.index("--ulimit") + 1] == "nofile=1024:1024"

            # The container is gone (the machine rebooted): --restart-only sets up a new one.
            fake = {**os.environ, "FAKE_DOCKER_ROOT": str(host.path("~/fake-docker"))}
            subprocess.run([str(FAKE_DOCKER), "rm", "-f", "small"], env=fake, check=True)
            again = launcher("up", "-y", "--restart-only", str(path), env=env)
            assert again.returncode == 0, again.stdout + again.stderr
            assert "container small started" in again.stdout + again.stderr
            assert (inside / "setup.log").read_text() == setup
            assert (inside / "data/sub/b.txt").read_text() == "beta\n"
            assert (inside / "started.log").read_text() == "started\n"

            write("example/two:1")
            second = launcher("up", "-y", str(path), env=env)
            assert second.returncode == 0, second.stdout + second.stderr
            replaced = "replaced: the image changed from example/one:1 to example/two:1"
            assert replaced in second.stdout + second.stderr
            assert host.path("~/init.log").read_text() == "init in /root\n" * 2
            assert (inside / "setup.log").read_text() == setup  # a new container's home
            assert (inside / "started.log").read_text() == "started\n"
            assert containers_on(host) == ["small"]
        finally:
            down = launcher("down", "-y", str(path), env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert containers_on(host) == []
