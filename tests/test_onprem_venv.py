"""On-prem machines whose Ray lives in a virtualenv that only the start commands name (the
usual way to pin Ray): the launcher finds that Python for its autoscaler on the head, and
`down` stops that Ray and checks that none of it is left.

The hosts are isolated test machines (fakes/hosts/ssh.py) whose login shell has no Ray:
their PATH is /etc/profile's, where `python3` is Debian's and there is no `ray`. The
virtualenv is the test's own (bound into each host at the same path), named by path in the
start commands, as `/opt/venv/bin/ray` would be.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.ssh import IsolatedHost, isolated_hosts, make_key
from tests.cluster_helpers import run

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")

VENV = Path(sys.executable).parent.parent
HEAD_IP, WORKER_IP, LONE_IP = "127.0.8.10", "127.0.8.11", "127.0.8.12"
RAY_NAMES = {"gcs_server", "raylet"}
# Ray's GCS listens on every address: a port of this module's own.
OPTIONS = (
    "--node-ip-address=$LAUNCHER_NODE_IP --num-cpus=1 --object-store-memory=100000000 "
    "--dashboard-agent-listen-port=$((52000 + ${LAUNCHER_NODE_IP##*.})) --disable-usage-stats"
)
CONFIG = f"""
cluster_name: venv-only
provider: {{type: local, head_ip: {HEAD_IP}, worker_ips: [{WORKER_IP}]}}
auth: {{ssh_user: root, ssh_private_key: KEY}}
head_start_ray_commands:
  - {VENV}/bin/ray stop
  - {VENV}/bin/ray start --head --port=6383 --include-dashboard=false {OPTIONS}
worker_start_ray_commands:
  - {VENV}/bin/ray stop
  - {VENV}/bin/ray start --address=$RAY_HEAD_IP:6383 {OPTIONS}
"""


def launcher(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(*args, env=env, timeout=400)


def without_ray_on_path(host: IsolatedHost) -> None:
    for rc in (".profile", ".bashrc"):
        (host.home / rc).write_text("")


def ray_processes(host: IsolatedHost) -> set[str]:
    names = set()
    for pid in host.processes():
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return {n for n in names if n in RAY_NAMES or n.startswith("ray::")}


@pytest.fixture(scope="module")
def venv_hosts(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, list[IsolatedHost]]]:
    tmp = tmp_path_factory.mktemp("venv-only")
    key = make_key(tmp / "id_ed25519")
    with isolated_hosts(key, HEAD_IP, 3) as hosts:
        for host in hosts:
            without_ray_on_path(host)
        yield key, hosts


def test_a_failed_up_is_taken_down_with_the_virtualenvs_ray_and_then_up_finds_it(
    venv_hosts: tuple[Path, list[IsolatedHost]], tmp_path: Path
) -> None:
    key, (head, worker, _) = venv_hosts
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    path = tmp_path / "cluster.yaml"
    config = CONFIG.replace("KEY", str(key))
    # Named outright, a Python without Ray: `up` fails after the head's Ray started.
    path.write_text(config.replace("type: local,", "type: local, head_python: /usr/bin/python3,"))
    try:
        failed = launcher("up", "-y", str(path), env=env)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        (line,) = [x for x in failed.stderr.splitlines() if "head_python" in x]
        assert "provider.head_python (/usr/bin/python3) cannot import Ray there" in line
        assert ray_processes(head) >= RAY_NAMES  # the start commands ran
        down = launcher("down", "-y", str(path), env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "Terminated 1 node(s)" in down.stdout
        assert ray_processes(head) == set()

        # Found by itself: the Python of the virtualenv the start commands name.
        path.write_text(config)
        up = launcher("up", "-y", str(path), env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        python = f"{VENV}/bin/python"
        assert head.path("~/.launcher/venv/.launcher-python").read_text().strip() == python
        count = (
            f"{python} -c 'import ray; ray.init(); "
            'print("alive", sum(n["Alive"] for n in ray.nodes()))\''
        )
        alive = launcher("exec", str(path), count, env=env)
        assert alive.returncode == 0, alive.stdout + alive.stderr
        assert "alive 2" in alive.stdout  # the head's autoscaler brought the worker up
        again = launcher("up", "-y", str(path), env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "launcher reused on the head" in again.stdout + again.stderr
    finally:
        down = launcher("down", "-y", str(path), env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Terminated 2 node(s)" in down.stdout
    assert ray_processes(head) == set() and ray_processes(worker) == set()


def test_down_names_ray_processes_it_could_not_stop_and_keeps_the_machine(
    venv_hosts: tuple[Path, list[IsolatedHost]], tmp_path: Path
) -> None:
    # A "raylet" that no Ray on the machine can stop: nothing names a `ray`, none runs
    # from a Python with Ray, and the PATH has none.
    key, (_, _, lone) = venv_hosts
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "cluster_name: stubborn\n"
        f"provider: {{type: local, head_ip: {LONE_IP}, worker_ips: [],"
        f" head_python: {VENV}/bin/python}}\n"
        f"auth: {{ssh_user: root, ssh_private_key: {key}}}\n"
        "head_start_ray_commands:\n"
        "  - cp /bin/sleep /tmp/raylet && (nohup /tmp/raylet 3600 >/dev/null 2>&1 &)\n"
        "worker_start_ray_commands: []\n"
    )
    up = launcher("up", "-y", str(path), env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert ray_processes(lone) == {"raylet"}
    refused = launcher("down", "-y", str(path), env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Terminated" not in refused.stdout
    assert f"could not stop Ray on {LONE_IP}: Ray processes still running: raylet (pid" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr
    assert lone.path(f"~/.launcher/onprem/stubborn/{LONE_IP}.json").is_file()  # still claimed

    for pid in lone.processes():
        if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
            os.kill(pid, 9)
    down = launcher("down", "-y", str(path), env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Terminated 1 node(s)" in down.stdout
    assert not lone.path("~/.launcher/onprem/stubborn").exists()
