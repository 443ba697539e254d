"""On-prem clusters (`provider: type: local`) end to end, over real SSH, with real Ray.

Each machine is an isolated test host (fakes/hosts/ssh.py): its own sshd on 127.0.6.x,
its own processes, home and /tmp. The launcher is run as a user runs it (the CLI in a
subprocess); the autoscaler runs on the head from the wheel `up` installs there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.hosts.ssh import COUNT_NODES, IsolatedHost, isolated_hosts, make_key, ray_start_commands
from launcher.cluster.lifecycle import UpOptions, up
from launcher.config.loader import Overrides
from launcher.errors import ProviderError
from tests.cluster_helpers import on_terminal, run

pytestmark = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs openssh-server")

HEAD_IP = "127.0.6.2"
WORKER_IPS = ("127.0.6.3", "127.0.6.4", "127.0.6.5")
CONFIG = """
cluster_name: onprem-e2e
provider:
  type: local
  head_ip: 127.0.6.2
  worker_ips: [127.0.6.3, 127.0.6.4, 127.0.6.5]
auth:
  ssh_user: root
  ssh_private_key: {key}
idle_timeout_minutes: 5
file_mounts:
  ~/data: {data}
  ~/single.txt: {data}/a.txt
rsync_exclude: ["*.skip"]
rsync_filter: [".gitignore"]
file_mounts_sync_continuously: true
cluster_synced_files: [~/shared]
setup_commands:
  - echo "setup on $LAUNCHER_NODE_IP" >> ~/setup.log
head_setup_commands:
  - mkdir -p ~/shared && echo made-on-the-head > ~/shared/h.txt
""" + ray_start_commands(num_cpus=2)


def launcher(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return run(*args, env=env, timeout=timeout)


class Cluster:
    def __init__(self, tmp: Path, hosts: list[IsolatedHost], key: Path) -> None:
        self.hosts = {h.ip: h for h in hosts}
        self.data = tmp / "data"
        self.data.mkdir()
        (self.data / "a.txt").write_text("alpha\n")
        (self.data / "b.skip").write_text("excluded\n")
        (self.data / "sub").mkdir()
        (self.data / "sub" / "c.txt").write_text("gamma\n")
        (self.data / ".gitignore").write_text("*.log\n")
        (self.data / "sub" / "run.log").write_text("ignored\n")
        self.path = tmp / "cluster.yaml"
        self.path.write_text(CONFIG.replace("{key}", str(key)).replace("{data}", str(self.data)))
        self.env = {**os.environ, "LAUNCHER_HOME": str(tmp / "launcher-home")}

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return launcher(*args, env=self.env, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("onprem")
    key = make_key(tmp / "id_ed25519")
    with isolated_hosts(key, HEAD_IP, 1 + len(WORKER_IPS)) as hosts:
        made = Cluster(tmp, hosts, key)
        yield made
        made.run("down", "-y", str(made.path))


def test_up_sets_up_head_and_three_workers_over_ssh(cluster: Cluster) -> None:
    result = cluster.run("up", "-y", str(cluster.path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "launcher installed on the head" in result.stdout + result.stderr
    for ip, host in cluster.hosts.items():
        assert host.path("~/data/a.txt").read_text() == "alpha\n", ip
        assert host.path("~/data/sub/c.txt").read_text() == "gamma\n", ip
        assert not host.path("~/data/b.skip").exists(), ip
        assert not host.path("~/data/sub/run.log").exists(), ip
        assert host.path("~/shared/h.txt").read_text() == "made-on-the-head\n", ip
        assert host.path("~/single.txt").read_text() == "alpha\n", ip
        assert host.path("~/setup.log").read_text() == f"setup on {ip}\n"
    counted = cluster.run("exec", str(cluster.path), COUNT_NODES)
    assert counted.returncode == 0, counted.stdout + counted.stderr
    assert "alive 4" in counted.stdout
    ips = cluster.run("get-worker-ips", str(cluster.path))
    assert sorted(ips.stdout.split()) == sorted(WORKER_IPS)
    assert cluster.run("get-head-ip", str(cluster.path)).stdout.strip() == HEAD_IP


def test_second_up_changes_nothing(cluster: Cluster) -> None:
    started = time.monotonic()
    result = cluster.run("up", "-y", str(cluster.path))
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert "launcher reused on the head" in result.stdout + result.stderr
    assert "autoscaler running on the head" in result.stdout + result.stderr
    for ip, host in cluster.hosts.items():
        assert host.path("~/setup.log").read_text() == f"setup on {ip}\n", ip
    print(f"no-op up on 4 hosts: {elapsed:.2f} s")


def test_exec_submit_and_rsync(cluster: Cluster, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, ray\nray.init()\n"
        "print('cpus', int(ray.cluster_resources()['CPU']), sys.argv[1])\n"
    )
    submitted = cluster.run("submit", str(cluster.path), str(script), "hello")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "cpus 8 hello" in submitted.stdout
    failed = cluster.run("exec", str(cluster.path), "exit 7")
    assert failed.returncode == 7
    upload = tmp_path / "up"
    upload.mkdir()
    (upload / "x.txt").write_text("x\n")
    assert cluster.run("rsync-up", str(cluster.path), f"{upload}/", "~/uploaded/").returncode == 0
    assert cluster.hosts[HEAD_IP].path("~/uploaded/x.txt").read_text() == "x\n"
    back = tmp_path / "back"
    got = cluster.run("rsync-down", str(cluster.path), "~/uploaded/", f"{back}/")
    assert got.returncode == 0, got.stderr
    assert (back / "x.txt").read_text() == "x\n"


def test_changed_mounts_reach_every_node_without_setup(cluster: Cluster) -> None:
    (cluster.data / "a.txt").write_text("changed\n")
    result = cluster.run("up", "-y", str(cluster.path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert cluster.hosts[HEAD_IP].path("~/data/a.txt").read_text() == "changed\n"
    deadline = time.monotonic() + 90  # the autoscaler copies them to workers every 10 s
    while time.monotonic() < deadline:
        copies = {h.path("~/data/a.txt").read_text() for h in cluster.hosts.values()}
        if copies == {"changed\n"}:
            break
        time.sleep(1)
    assert copies == {"changed\n"}
    for ip, host in cluster.hosts.items():
        assert host.path("~/setup.log").read_text() == f"setup on {ip}\n", ip


def test_attach_opens_a_shell_on_the_head(cluster: Cluster) -> None:
    typed = b"echo on-$LAUNCHER_NODE_IP-$((6 * 7)); exit 3\n"
    output, code = on_terminal(["attach", str(cluster.path)], cluster.env, typed)
    assert f"on-{HEAD_IP}-42" in output
    assert code == 3


def test_port_forward_reaches_a_port_on_the_head(cluster: Cluster) -> None:
    one_request = (
        'import http.server as h; h.HTTPServer(("127.0.0.1", 8765), '
        "h.SimpleHTTPRequestHandler).handle_request()"
    )
    serve = f"cd ~/data && timeout 120 python3 -c '{one_request}'"
    got: list[str] = []

    def fetch() -> None:  # until the forward and the server are up, however slow
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not got:
            try:
                with urllib.request.urlopen("http://127.0.0.1:18765/sub/c.txt", timeout=30) as r:
                    got.append(r.read().decode())
            except OSError:
                time.sleep(0.3)

    fetcher = threading.Thread(target=fetch)
    fetcher.start()
    cluster.run("exec", "-p", "18765:8765", str(cluster.path), serve, timeout=180)
    fetcher.join()
    assert got == ["gamma\n"]


def test_a_worker_whose_ray_stops_is_set_up_again(cluster: Cluster) -> None:
    host = cluster.hosts[WORKER_IPS[1]]
    raylets = [pid for pid in host.processes() if _name(pid) == "raylet"]
    assert raylets
    for pid in raylets:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if host.path("~/setup.log").read_text().count("setup on") == 2:
            break
        time.sleep(1)
    assert host.path("~/setup.log").read_text().count("setup on") == 2
    counted = ""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and "alive 4" not in counted:
        counted = cluster.run("exec", str(cluster.path), COUNT_NODES).stdout
    assert "alive 4" in counted
    log = cluster.run("monitor", "--no-follow", "--lines", "500", str(cluster.path)).stdout
    assert f"terminate {WORKER_IPS[1]}: Ray on it stopped" in log


def test_status_lists_the_machines_in_use(cluster: Cluster) -> None:
    result = cluster.run("status", "--json", str(cluster.path))
    assert result.returncode == 0, result.stderr
    import json

    nodes = json.loads(result.stdout)["nodes"]
    assert sorted(n["ip"] for n in nodes) == sorted([HEAD_IP, *WORKER_IPS])
    assert {n["status"] for n in nodes} == {"up-to-date"}


def test_down_stops_ray_everywhere_and_frees_the_machines(cluster: Cluster) -> None:
    result = cluster.run("down", "-y", str(cluster.path))
    assert result.returncode == 0, result.stdout + result.stderr
    for ip, host in cluster.hosts.items():
        names = {_name(pid) for pid in host.processes()}
        assert not names & {"raylet", "gcs_server"}, (ip, names)
    assert not cluster.hosts[HEAD_IP].path("~/.launcher/onprem/onprem-e2e").exists()
    status = cluster.run("get-head-ip", str(cluster.path))
    assert status.returncode != 0


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# -- failures, on a head-only cluster without Ray ------------------------------------------
HEAD_ONLY = """
cluster_name: onprem-small
provider:
  type: local
  head_ip: {ip}
  worker_ips: []
auth:
  ssh_user: root
  ssh_private_key: {key}
setup_commands:
  - "{setup}"
head_start_ray_commands:
  - echo started >> ~/started.log
"""


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return make_key(tmp_path / "id_ed25519")


def _small(
    tmp_path: Path, key: Path, ip: str, setup: str = "echo ok"
) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "small.yaml"
    path.write_text(HEAD_ONLY.format(ip=ip, key=key, setup=setup))
    return path, {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home")}


def test_a_head_that_never_answers_is_named_with_the_last_error(
    tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, env = _small(tmp_path, key, "127.0.6.40")
    monkeypatch.setenv("LAUNCHER_HOME", env["LAUNCHER_HOME"])
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        up(str(path), Overrides(), UpOptions(ready_timeout_s=2), lambda e: None, lambda q: True)
    assert time.monotonic() - started < 60
    message = str(caught.value)
    assert "127.0.6.40" in message and "within 2 s" in message
    assert "connection refused" in message


def test_a_head_that_refuses_then_comes_up_is_waited_for(tmp_path: Path, key: Path) -> None:
    with isolated_hosts(key, "127.0.6.41", 1, start=False) as (host,):
        path, env = _small(tmp_path, key, host.ip)
        timer = threading.Timer(3.0, host.start)
        timer.start()
        try:
            result = launcher("up", "-y", str(path), env=env)
        finally:
            timer.join()
        assert result.returncode == 0, result.stdout + result.stderr
        assert host.path("~/started.log").read_text() == "started\n"
        assert launcher("down", "-y", str(path), env=env).returncode == 0


def test_a_dropped_connection_during_setup_is_rerun(tmp_path: Path, key: Path) -> None:
    with isolated_hosts(key, "127.0.6.42", 1) as (host,):
        marker = "~/setup-runs.log"
        path, env = _small(tmp_path, key, host.ip, f"echo run >> {marker} && sleep 2")

        def drop_once_setup_runs() -> None:  # during its `sleep 2`, however slow `up` was
            deadline = time.monotonic() + 240
            while not host.path(marker).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            host.drop_sessions()

        dropper = threading.Thread(target=drop_once_setup_runs, daemon=True)
        dropper.start()
        result = launcher("up", "-y", str(path), env=env)
        dropper.join()
        assert result.returncode == 0, result.stdout + result.stderr
        assert host.path(marker).read_text() == "run\nrun\n"
        assert launcher("down", "-y", str(path), env=env).returncode == 0


def test_a_changed_host_key_stops_the_launcher_with_the_way_out(tmp_path: Path, key: Path) -> None:
    with isolated_hosts(key, "127.0.6.43", 1) as (host,):
        path, env = _small(tmp_path, key, host.ip)
        assert launcher("up", "-y", str(path), env=env).returncode == 0
        host.new_host_key()
        result = launcher("exec", str(path), "true", env=env)
        assert result.returncode == 1
        assert "host key changed" in result.stderr and "ssh-keygen -R" in result.stderr
        assert "Traceback" not in result.stderr
        hint = result.stderr.split("`")[1]  # the command the message names
        subprocess.run(hint, shell=True, check=True, capture_output=True)
        assert launcher("exec", str(path), "true", env=env).returncode == 0
        assert launcher("down", "-y", str(path), env=env).returncode == 0
