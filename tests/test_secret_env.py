"""`--env NAME[=VALUE]` and metadata.launcher.env: parsing, the one-line refusals, and the
way values travel (a command's standard input, a node's 0600 file), on this machine."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from launcher import secret_env
from launcher.cluster import ops
from launcher.config.loader import parse_config
from launcher.errors import ConfigError, UsageError
from launcher.runners.local import LocalProcessRunner
from tests.cluster_helpers import wait_for
from tests.conftest import run_cli

LOCAL = "cluster_name: envs\nprovider: {type: localhost}\n"


def test_name_alone_takes_this_machines_value() -> None:
    assert secret_env.parse_option("TOKEN", {"TOKEN": "v"}) == ("TOKEN", "v")
    assert secret_env.parse_option("TOKEN=a=b", {}) == ("TOKEN", "a=b")
    assert secret_env.parse_option("TOKEN=", {}) == ("TOKEN", "")


def test_unset_name_is_refused_in_one_line_with_the_fix() -> None:
    with pytest.raises(UsageError) as caught:
        secret_env.parse_option("WANDB_API_KEY", {})
    message = str(caught.value)
    assert "\n" not in message
    assert "WANDB_API_KEY is not set" in message and "--env WANDB_API_KEY=VALUE" in message


@pytest.mark.parametrize("spec", ["1ABC", "A-B=x", "=x", "", "A B", "É=1"])
def test_bad_names_are_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="is not a variable name"):
        secret_env.parse_option(spec, {})


def test_config_names_resolve_from_this_machine_and_env_options_override() -> None:
    environ = {"A": "1", "B": "2"}
    assert secret_env.resolve(["B=3"], ["A", "B"], environ) == {"A": "1", "B": "3"}
    with pytest.raises(UsageError, match=r"metadata\.launcher\.env names C"):
        secret_env.resolve([], ["C"], environ)


@pytest.mark.parametrize("value", ["plain", "it's", 'a "b" $HOME `x`', "two\nlines", "", " "])
def test_script_reads_back_and_a_shell_exports_it(value: str, tmp_path: Path) -> None:
    data = secret_env.script({"X": value, "Y": "y"})
    assert secret_env.parse(data.decode()) == {"X": value, "Y": "y"}
    runner = LocalProcessRunner(tmp_path, {}, tmp_path / "log")
    printed: list[str] = []
    command = secret_env.LOAD_FROM_STDIN + 'printf "%s|" "$X" | od -An -c'
    assert runner.run(command, stdin=data, echo=printed.append).ok
    expected = LocalProcessRunner(tmp_path, {"X": value}, tmp_path / "log2")
    reference: list[str] = []
    assert expected.run('printf "%s|" "$X" | od -An -c', echo=reference.append).ok
    assert printed == reference


def test_node_file_is_0600_in_0700_and_sourced_before_commands(tmp_path: Path) -> None:
    home = tmp_path / "node"
    home.mkdir()
    runner = LocalProcessRunner(home, {}, tmp_path / "log")
    data = secret_env.script({"KEPT_SECRET": "s3cr3t-value"})
    assert runner.run(secret_env.WRITE_FILE, stdin=data).ok
    folder, file = home / ".launcher" / "secrets", home / ".launcher" / "secrets" / "env"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    said: list[str] = []
    assert runner.run(secret_env.SOURCE_FILE + "echo ${#KEPT_SECRET}", echo=said.append).ok
    assert said == ["12"]
    assert "s3cr3t" not in (tmp_path / "log").read_text()  # only the commands are logged
    # Nothing given: the file goes.
    assert runner.run(secret_env.WRITE_FILE, stdin=b"").ok
    assert not file.exists()


def test_the_head_reads_its_kept_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert secret_env.kept_on_this_node() is None
    folder = tmp_path / ".launcher" / "secrets"
    folder.mkdir(parents=True)
    (folder / "env").write_bytes(secret_env.script({"A": "x y"}))
    assert secret_env.kept_on_this_node() == {"A": "x y"}


def test_a_spawned_supervisor_finds_its_variables() -> None:
    child = {"OTHER": "o", **secret_env.for_child({"A": "1"})}
    assert secret_env.inherited(child, ["OTHER", "UNSET"]) == {"OTHER": "o", "A": "1"}


def test_config_key_is_typed_and_validated() -> None:
    config = parse_config(LOCAL + "metadata: {launcher: {env: [WANDB_API_KEY, HF_TOKEN]}}\n", "x")
    assert config.env_names == ("WANDB_API_KEY", "HF_TOKEN")
    with pytest.raises(ConfigError, match=r"metadata.launcher.env\[0\].*WANDB_API_KEY"):
        parse_config(LOCAL + "metadata: {launcher: {env: [BAD-NAME]}}\n", "x")


@pytest.mark.parametrize("verb", ["exec", "submit", "up"])
def test_cli_refuses_unset_and_bad_names_with_exit_2(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SURELY_UNSET_VARIABLE", raising=False)
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    path = tmp_path / "cluster.yaml"
    path.write_text(LOCAL)
    script = tmp_path / "job.py"
    script.write_text("print(1)\n")
    rest = {"exec": ["true"], "submit": [str(script)], "up": ["-y"]}[verb]
    for spec, words in [
        ("SURELY_UNSET_VARIABLE", "is not set on this machine"),
        ("9LIVES=1", "is not a variable name"),
    ]:
        result = run_cli(verb, str(path), *rest, "--env", spec)
        assert result.exit_code == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], lines
    assert not (tmp_path / "home").exists() or not list((tmp_path / "home").rglob("nodes"))
    assert os.environ.get("SURELY_UNSET_VARIABLE") is None


def _tmux(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], env=env, capture_output=True, text=True, check=False)


def test_a_tmux_session_gets_values_a_running_server_would_not_pass(tmp_path: Path) -> None:
    """`exec/submit --tmux --env`: the values reach the command in the session through a
    one-use 0600 file its line writes from standard input, gone once the session has read
    it; a tmux server started earlier, without them, cannot explain what the command sees."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed here (scripts/test installs it)")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "TMUX_TMPDIR": str(tmp_path)}
    env.pop("GIVEN", None)
    value = "gv-" + secrets.token_hex(8) + " $(x) 'q'"
    out = tmp_path / "seen"
    assert _tmux(env, "new-session", "-d", "-s", "earlier", "sleep 600").returncode == 0
    try:
        options = ops.RunOptions(tmux=True, secret_env={"GIVEN": value})
        line, stdin, name = ops._in_tmux(f'printf %s "$GIVEN" > {out}', options)
        assert value not in line and stdin is not None and value.encode() not in line.encode()
        ran = subprocess.run(["bash", "-c", line], input=stdin, env=env, check=False)
        assert ran.returncode == 0
        wait_for(lambda: out.is_file() and out.read_text() == value, 30, "the session's output")
        secrets_dir = home / ".launcher" / "secrets"
        assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
        assert not list(secrets_dir.iterdir())  # the one-use file is gone
        _tmux(env, "kill-session", "-t", str(name))
        # tmux failing to start the session (no server socket can be made): the file goes too.
        (tmp_path / "a-file").write_text("")
        bad = {**env, "TMUX_TMPDIR": str(tmp_path / "a-file")}
        line, stdin, _ = ops._in_tmux("true", options)
        failed = subprocess.run(
            ["bash", "-c", line], input=stdin, env=bad, capture_output=True, check=False
        )
        assert failed.returncode != 0
        assert not list(secrets_dir.iterdir())
    finally:
        _tmux(env, "kill-server")


def test_a_detached_supervisor_gets_values_in_its_environment_not_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.runs import launch, store
    from launcher.runs.model import Run

    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    run = Run("r-abc123", "envs", str(tmp_path / "cluster.yaml"), "job.py", (), 0.0)
    store.run_dir("envs", run.id).mkdir(parents=True)
    seen: dict[str, object] = {}

    class Spawned:
        def __init__(self, argv: list[str], **kw: object) -> None:
            seen["argv"], seen["env"] = argv, kw["env"]

    monkeypatch.setattr(subprocess, "Popen", Spawned)  # as launch.py calls it
    launch.spawn_supervisor(run, None, {"TOKEN": "detached-secret"})
    argv = seen["argv"]
    assert isinstance(argv, list) and not any("detached-secret" in word for word in argv)
    child = seen["env"]
    assert isinstance(child, dict)
    assert secret_env.inherited(child, []) == {"TOKEN": "detached-secret"}
