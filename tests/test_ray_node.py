"""Finding the Ray a node runs and stopping it (launcher/runners/ray_node.py), run for real:
each scenario is a shell in PID, mount and network namespaces of its own (so `ray stop`
and the process scans see only its processes, and its Ray's ports clash with nothing),
whose PATH has no Ray, as on a machine whose Ray lives in a virtualenv only the start
commands name."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.runners.ray_node import (
    RayProcess,
    find_python_script,
    gcs_port,
    parse_processes,
    parse_python,
    ray_paths,
    stop_script,
)

VENV_BIN = Path(sys.executable).parent
RAY = VENV_BIN / "ray"
BARE_PATH = "/usr/bin:/bin"  # no Ray here (Debian's python3 has none)
ISOLATION = ["unshare", "--pid", "--fork", "--mount-proc", "--net", "--kill-child"]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for PID and network namespaces"
    probe = subprocess.run([*ISOLATION, "true"], check=False, capture_output=True)
    if probe.returncode != 0:
        return f"unshare cannot make namespaces here: {probe.stderr.decode().strip()}"
    has_ray = subprocess.run(
        ["/usr/bin/python3", "-c", "import ray"], check=False, capture_output=True
    )
    if has_ray.returncode == 0:
        return "/usr/bin/python3 has Ray, so no PATH here lacks it"
    return None


needs_namespaces = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def _in_namespace(steps: dict[str, str], setup: str = "") -> dict[str, tuple[int, str]]:
    """Run `setup`, then each step's shell, in fresh namespaces with PATH lacking Ray;
    returns each step's exit code and output."""
    script = ["ip link set lo up", setup]
    for name, step in steps.items():
        script.append(
            f'out=$(bash -c {shlex.quote(step)} 2>&1); rc=$?\necho "=== {name} $rc"; echo "$out"'
        )
    done = subprocess.run(
        [*ISOLATION, "bash", "-c", "\n".join(script)],
        env={"PATH": BARE_PATH, "HOME": os.environ.get("HOME", "/root")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    results: dict[str, tuple[int, str]] = {}
    name, code, lines = None, 0, []
    for line in done.stdout.splitlines():
        if line.startswith("=== "):
            if name is not None:
                results[name] = (code, "\n".join(lines))
            _, name, rc = line.split()
            code, lines = int(rc), []
        else:
            lines.append(line)
    if name is not None:
        results[name] = (code, "\n".join(lines))
    assert set(results) == set(steps), done.stdout + done.stderr
    return results


def test_ray_paths_are_the_ray_executables_the_commands_name() -> None:
    commands = [
        "/opt/venv/bin/ray stop",
        "ulimit -n 65536; /opt/venv/bin/ray start --head --port=6379",
        "RAY_x=1 ~/env/bin/ray start --address=$RAY_HEAD_IP:6379",
        "$HOME/other/bin/ray status  # ${HOME}/commented/bin/ray",
        'echo "see /not/a/command/ray"',
        "ray stop",
        "/path/with space/ray stop",
        "unbalanced 'quote",
    ]
    assert ray_paths(commands) == ("/opt/venv/bin/ray", "~/env/bin/ray", "$HOME/other/bin/ray")


def test_the_gcs_port_is_the_heads_start_command_port() -> None:
    assert gcs_port(["ray stop", "ray start --head --port=6379"]) == 6379
    assert gcs_port(["/v/bin/ray start --head --port 6383 --num-cpus=1"]) == 6383
    assert gcs_port(["ray start --head --port=$PORT"]) == 6379  # not known here
    assert gcs_port(["ray start --address=x:7000 --port=1"]) == 6379  # not a head start
    assert gcs_port([]) == 6379


def test_parsing_what_the_node_printed() -> None:
    noise = "bash: no job control in this shell\n"
    assert parse_python(noise + "@@python /opt/venv/bin/python\n") == (
        "/opt/venv/bin/python",
        (),
    )
    assert parse_python("@@tried /a/python3 /usr/bin/python3") == (
        None,
        ("/a/python3", "/usr/bin/python3"),
    )
    assert parse_python("@@tried (none found)") == (None, ())
    assert parse_processes(noise + "@@ray 12 raylet\n@@ray 13 python /v/bin/python\n") == (
        RayProcess(12, "raylet"),
        RayProcess(13, "python"),
    )


@needs_namespaces
def test_a_virtualenv_ray_is_found_and_stopped_through_what_runs(tmp_path: Path) -> None:
    # A `ray` the start commands name that does nothing when asked to stop: the launcher
    # must not believe it, and stop Ray with the running processes' own Python.
    broken = tmp_path / "stale" / "bin" / "ray"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\nexit 0\n")
    broken.chmod(0o755)
    start = (
        f"{RAY} start --head --node-ip-address=127.0.0.2 --port=6379 --num-cpus=1 "
        "--include-dashboard=false --disable-usage-stats >/dev/null 2>&1"
    )
    count = "ps -eo comm= | grep -cE '^(raylet|gcs_server)$'"
    results = _in_namespace(
        {
            "no-ray-yet": find_python_script(None, []),
            "from-the-commands": find_python_script(None, [str(RAY)]),
            "start": f"{start} && {count}",
            "from-processes": find_python_script(None, []),
            "explicit-without-ray": find_python_script("/usr/bin/python3", []),
            "explicit-in-home": find_python_script("~/nothing/python", []),
            "stop": stop_script([str(broken)]),
            "left": f"{count}; true",
            "stopped-again": stop_script([str(broken)]),
        }
    )
    code, out = results["no-ray-yet"]
    found, tried = parse_python(out)
    assert code == 3 and found is None and "/usr/bin/python3" in tried
    assert parse_python(results["from-the-commands"][1])[0] == str(VENV_BIN / "python")
    assert results["start"] == (0, "2"), results["start"]
    assert parse_python(results["from-processes"][1])[0] == str(VENV_BIN / "python")
    code, out = results["explicit-without-ray"]
    assert (code, parse_python(out)) == (3, (None, ("/usr/bin/python3",)))
    home = os.environ.get("HOME", "/root")
    assert parse_python(results["explicit-in-home"][1]) == (None, (f"{home}/nothing/python",))
    assert results["stop"][0] == 0, results["stop"]
    assert results["left"][1].strip() == "0"
    assert results["stopped-again"] == (0, "")


@needs_namespaces
def test_ray_processes_nothing_can_stop_are_named(tmp_path: Path) -> None:
    # A "raylet" with no Ray anywhere to stop it (no `ray`, no Python of Ray running).
    raylet = tmp_path / "raylet"
    shutil.copy("/bin/sleep", raylet)
    results = _in_namespace(
        {"stop": stop_script(["/nowhere/bin/ray"])},
        setup=f"{raylet} 600 & pid=$!\n"
        'until [ "$(cat /proc/$pid/comm 2>/dev/null)" = raylet ]; do sleep 0.05; done',
    )
    code, out = results["stop"]
    assert code == 4
    (left,) = parse_processes(out)
    assert left.name == "raylet"
