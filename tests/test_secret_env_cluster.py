"""`--env` and metadata.launcher.env on a real localhost cluster: the values reach the
driver (exec, exec in tmux, submit, a recovering run's), an attached shell, and Ray's tasks on a worker the head's autoscaler
started, while no file the launcher, Ray or `cluster-dump` writes, and no command line seen
while the commands ran, holds them; only each node's documented secrets file does."""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.paths import cluster_dir
from tests.cluster_helpers import kill_cluster, on_terminal, run, status, temp_dir_of, wait_for

pytest.importorskip("ray", reason="needs Ray (the ray extra)")

JOB = """\
import hashlib, os, sys
import ray

def digest(name):
    value = os.environ.get(name)
    return "unset" if value is None else hashlib.sha256(value.encode()).hexdigest()[:16]

names = sys.argv[1:]
ray.init()

@ray.remote(num_cpus=0, resources={"wk": 1})
def on_worker(names):
    return [digest(n) for n in names]

print("driver", *[digest(n) for n in names])
print("worker", *ray.get(on_worker.remote(names)))
"""


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _config(name: str) -> str:
    return (
        f"cluster_name: {name}\n"
        "max_workers: 1\n"
        "provider: {type: localhost}\n"
        "available_node_types:\n"
        "  head: {node_config: {}, resources: {CPU: 1}, max_workers: 0}\n"
        "  worker: {node_config: {}, resources: {CPU: 1, wk: 1}, min_workers: 1, max_workers: 1}\n"
        "head_node_type: head\n"
        "metadata: {launcher: {env: [FROM_CONFIG]}}\n"
    )


class ProcessWatch:
    """`ps -ww -eo args` taken every 0.2 s while it runs."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            taken = subprocess.run(
                ["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=False
            )
            self.seen.append(taken.stdout)
            self._stop.wait(0.2)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def secret_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Path, dict[str, str]]]:
    home = tmp_path / "launcher-home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    name = "tsecretenv"
    path = tmp_path / "cluster.yaml"
    path.write_text(_config(name))
    planted = {"PLANTED": "pv" + secrets.token_hex(16), "FROM_CONFIG": "cv" + secrets.token_hex(16)}
    env = {**os.environ, **planted}
    yield name, path, env
    run("down", "-y", str(path), timeout=120, env=env)
    kill_cluster(name)


def _files_holding(root: Path, values: list[str]) -> list[str]:
    found = []
    needles = [v.encode() for v in values]
    for file in root.rglob("*"):
        if file.is_file() and not file.is_symlink():
            try:
                data = file.read_bytes()
            except OSError:
                continue
            if any(n in data for n in needles):
                found.append(str(file))
    return found


def test_values_reach_driver_and_ray_but_no_log_record_dump_or_command_line(
    secret_cluster: tuple[str, Path, dict[str, str]], tmp_path: Path
) -> None:
    name, path, env = secret_cluster
    values = [env["PLANTED"], env["FROM_CONFIG"]]
    job = tmp_path / "job.py"
    job.write_text(JOB)
    with ProcessWatch() as watch:
        up = run("up", "-y", "--env", "PLANTED", str(path), env=env, timeout=400)
        assert up.returncode == 0, up.stdout + up.stderr
        nodes = status(path)["nodes"]
        assert sorted(n["kind"] for n in nodes) == ["head", "worker"]

        # exec: both from this machine's environment (--env NAME, the config's name), one
        # given as NAME=VALUE, seen by the driver; the kept ones by Ray's task on the worker.
        exec_env = {k: v for k, v in env.items() if k != "PLANTED"}  # from the head's file
        command = "python ~/job.py PLANTED FROM_CONFIG GIVEN"
        assert run("rsync-up", str(path), str(job), "~/job.py", env=env).returncode == 0
        given = "gv" + secrets.token_hex(16)  # in this command line only: not in `ps`'s check
        done = run("exec", "--env", f"GIVEN={given}", str(path), command, env=exec_env)
        assert done.returncode == 0, done.stdout + done.stderr
        want = [_digest(env["PLANTED"]), _digest(env["FROM_CONFIG"])]
        assert f"driver {' '.join(want)} {_digest(given)}" in done.stdout
        assert f"worker {' '.join(want)} unset" in done.stdout

        # submit: --env NAME from this machine.
        sent = run("submit", "--env", "PLANTED", str(path), str(job), "PLANTED", env=env)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert f"driver {want[0]}" in sent.stdout and f"worker {want[0]}" in sent.stdout

        _in_tmux_and_attached(path, env, exec_env, given, want, tmp_path)

        # A recovering run's driver (started detached on the head, followed from here).
        ran = run(
            "submit", "--recover", "--env", "PLANTED", str(path), str(job), "PLANTED", env=env
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert f"driver {want[0]}" in ran.stdout and f"worker {want[0]}" in ran.stdout

        dumps = tmp_path / "dumps"
        dumps.mkdir()
        dumped = run("cluster-dump", str(path), cwd=dumps, env=env)
        assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    # The watch saw the commands run (the driver on the head), never a value.
    assert any("job.py PLANTED" in s for s in watch.seen)
    leaks = {
        _masked(line, values)
        for taken in watch.seen
        for line in taken.splitlines()
        if any(v in line for v in values)
    }
    assert watch.seen and not leaks, leaks

    values.append(given)
    # Each node keeps Ray's variables in its one documented file, 0600 in a 0700 directory.
    home = Path(env["LAUNCHER_HOME"])
    kept = sorted((cluster_dir(name) / "localhost" / "nodes").glob("*/home/.launcher/secrets/env"))
    assert len(kept) == 2, kept
    for file in kept:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
        assert stat.S_IMODE(file.parent.stat().st_mode) == 0o700
    holding = set(_files_holding(home, values))
    assert {str(f) for f in kept} <= holding  # the search finds what is there
    assert not holding - {str(f) for f in kept}, holding
    ray_temp = Path(temp_dir_of(name))
    assert len([f for f in ray_temp.rglob("*") if f.is_file()]) > 10
    assert not _files_holding(ray_temp, values)
    (tarball,) = dumps.glob("*.tar.gz")
    with tarfile.open(tarball) as archive:
        members = [m for m in archive.getmembers() if m.isfile()]
        leaked = [m.name for m in members if _holds(archive, m, values)]
    assert any("/raylet" in m.name for m in members), [m.name for m in members][:20]
    assert not leaked, leaked


def _in_tmux_and_attached(
    path: Path,
    env: dict[str, str],
    exec_env: dict[str, str],
    given: str,
    want: list[str],
    tmp_path: Path,
) -> None:
    """exec --tmux --env, and attach, on the secret cluster: what the command and the shell
    see (digests of the values, never the values)."""
    # exec --tmux: the values reach the command in a detached session (tmux's server,
    # once running, would not pass this shell's environment on).
    tmux_env = {**exec_env, "TMUX_TMPDIR": str(tmp_path)}
    in_tmux = "python ~/job.py PLANTED FROM_CONFIG GIVEN > ~/tmux.out 2>&1"
    try:
        done = run("exec", "--tmux", "--env", f"GIVEN={given}", str(path), in_tmux, env=tmux_env)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_for(
            # the job's own "worker ..." line: Ray's log lines name worker.py too
            lambda: "\nworker " in "\n" + run("exec", str(path), "cat ~/tmux.out", env=env).stdout,
            120,
            "the tmux session's job",
        )
    finally:
        subprocess.run(["tmux", "kill-server"], env=tmux_env, capture_output=True, check=False)
    shown = run("exec", str(path), "cat ~/tmux.out", env=env).stdout
    assert f"driver {' '.join(want)} {_digest(given)}" in shown, shown

    # attach: the shell has the node's kept variables.
    typed = (
        "python3 -c \"import hashlib, os; print('at-' + hashlib.sha256("
        "os.environ['PLANTED'].encode()).hexdigest()[:16])\"; exit 3\n"
    )
    output, code = on_terminal(["attach", str(path)], exec_env, typed.encode())
    assert code == 3 and f"at-{want[0]}" in output, output[-2000:]


def _masked(line: str, values: list[str]) -> str:
    for value in values:
        line = line.replace(value, "<PLANTED VALUE>")
    return line[:300]


def _holds(archive: tarfile.TarFile, member: tarfile.TarInfo, values: list[str]) -> bool:
    opened = archive.extractfile(member)
    data = opened.read() if opened is not None else b""
    return any(v.encode() in data for v in values)
