"""The installed command, as a user runs it in a shell: exit codes and no tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher import __version__
from tests.conftest import REPO

LAUNCHER = Path(sys.executable).parent / "launcher"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=60, cwd=REPO)


def test_console_script_and_module_agree() -> None:
    for command in ([str(LAUNCHER)], [sys.executable, "-m", "launcher"]):
        result = _run(*command, "--version")
        assert result.returncode == 0
        assert __version__ in result.stdout
        help_text = _run(*command, "--help").stdout
        assert "validate" in help_text and "plan" in help_text


def test_bad_config_exit_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: aws, region: 5}\n")
    result = _run(str(LAUNCHER), "validate", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert "provider.region: expected text, got the number 5" in result.stderr
    verbose = _run(str(LAUNCHER), "-v", "validate", str(bad))
    assert verbose.returncode == 2
    assert "Traceback" in verbose.stderr


HOSTILE_BASE = "cluster_name: x\nprovider: {type: localhost}\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("upscaling_speed: .nan\n", "upscaling_speed: is not a number (.nan)"),
        (
            "available_node_types: {h: {resources: {CPU: 1.0e+308}}}\nhead_node_type: h\n",
            "more than the maximum",
        ),
        ("metadata: {deep: " + "[" * 10_000 + "]" * 10_000 + "}\n", "levels deep"),
        ("max_workers: " + "9" * 5_000 + "\n", "a number of 5000 digits"),
        ('file_mounts: {"~/../../etc/x": /tmp}\n', "outside the home directory"),
        ("/dev/zero", "more than the 4 MiB"),
        ("-n", "--cluster-name '../../x' is not a valid cluster name"),
    ],
    ids=["nan", "huge", "deep", "digits", "dotdot", "device", "name-flag"],
)
def test_hostile_inputs_one_line_exit_2(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "cluster.yaml"
    args = ["validate", str(path)]
    if content == "/dev/zero":
        args = ["validate", content]
    elif content == "-n":
        path.write_text(HOSTILE_BASE)
        args = ["status", str(path), "-n", "../../x"]
    else:
        path.write_text(HOSTILE_BASE + content)
    result = _run(str(LAUNCHER), *args)  # /dev/zero read whole times out
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_unknown_command_and_option_exit_2() -> None:
    assert _run(str(LAUNCHER), "nope").returncode == 2
    assert _run(str(LAUNCHER), "validate", "--nope", "x.yaml").returncode == 2
    assert _run(str(LAUNCHER), "validate").returncode == 2


INTERRUPTED_WHILE_LOADING = """
import os, signal, sys

class CtrlC:  # Ctrl-C arrives while the CLI's modules load
    def find_spec(self, name, path=None, target=None):
        if name == "launcher.cli.main":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["launcher", "--help"]
from launcher.__main__ import main
main()
"""


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130() -> None:
    result = _run(sys.executable, "-c", INTERRUPTED_WHILE_LOADING)
    assert result.returncode == 130, result.stderr
    assert result.stderr == "interrupted\n" and result.stdout == ""
