"""A run's controller without a cluster (launcher/runs/controller.py): the config's
refusals, the credentials each provider hands a controller (and that a secret reaches it only
in its 0600 file), the localhost refusal, the run record's `controller` field, and the lease
of a supervisor on a controller as a laptop judges it."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from launcher import secret_env
from launcher.cli import jobs_commands
from launcher.cli.main import cli
from launcher.cluster.install import install_on_controller
from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ControllerSettings, RecoverSettings
from launcher.errors import ConfigError, LauncherError, UsageError
from launcher.providers.registry import SPECS
from launcher.runners.base import CommandResult, OutputSink
from launcher.runners.local import LocalProcessRunner
from launcher.runs import controller as remote
from launcher.runs import controller_secrets, launch, listing, store
from launcher.runs.model import CONTROLLER_ENV, Attempt, Lease, Run, RunState

SECRET = "planted-Secret-4f1e9a"

AWS = """
cluster_name: ctl-units
provider: {type: aws, region: us-west-2}
auth: {ssh_user: ubuntu}
available_node_types:
  head: {node_config: {InstanceType: m5.large, ImageId: ami-123}, max_workers: 0}
head_node_type: head
"""
LOCALHOST = """
cluster_name: ctl-units
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 0}, max_workers: 0}
head_node_type: head
"""


@pytest.fixture(autouse=True)
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    monkeypatch.delenv(CONTROLLER_ENV, raising=False)
    return home


def _with_controller(base: str, controller: str) -> str:
    return base + f"metadata:\n  launcher:\n    recover:\n      controller: {controller}\n"


def _refusal(text: str, overrides: Overrides | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "cluster.yaml", overrides)
    return str(caught.value)


# -- the config -----------------------------------------------------------------------------
def test_a_controller_is_read_with_its_defaults(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("k")
    text = AWS.replace("{ssh_user: ubuntu}", f"{{ssh_user: ubuntu, ssh_private_key: {key}}}")
    text = text.replace("ImageId: ami-123", "ImageId: ami-123, KeyName: mine")
    config = parse_config(_with_controller(text, "{host: ctl.example.com}"), "c.yaml")
    found = config.recover.controller
    assert found is not None
    assert (found.host, found.ssh_port, found.python) == ("ctl.example.com", 22, None)
    assert found.ssh_private_key == str(key)  # the cluster's key by default
    assert found.ssh_user  # this machine's user by default


@pytest.mark.parametrize(
    ("controller", "path", "what"),
    [
        ("{host: ctl, ssh_port: 70000}", "controller.ssh_port", "65535"),
        ("{host: '-oProxyCommand=x'}", "controller.host", "such as ctl.example.com"),
        ("{host: ctl, python: 'python 3'}", "controller.python", "Python 3.11+"),
        ("{ssh_user: bob}", "controller", "host"),
        ("{host: ctl, user: bob}", "controller", "user"),
        ("{host: ctl, ssh_private_key: /nowhere/id}", "ssh_private_key", "not a file"),
    ],
)
def test_a_bad_controller_is_refused_naming_its_path(controller: str, path: str, what: str) -> None:
    message = _refusal(_with_controller(AWS, controller))
    line = next(line for line in message.splitlines() if path in line)
    assert "metadata.launcher.recover" in line and what in line, message


def test_a_localhost_cluster_refuses_a_controller_in_one_line() -> None:
    message = _refusal(_with_controller(LOCALHOST, "{host: ctl}"))
    (line,) = [line for line in message.splitlines() if "controller" in line]
    assert "metadata.launcher.recover.controller" in line
    assert "processes of this machine" in line and "remove the controller" in line
    # The same from the command line's --controller.
    message = _refusal(LOCALHOST, Overrides(controller="ctl"))
    assert "processes of this machine" in message
    with pytest.raises(UsageError, match="cannot be supervised from a controller"):
        controller_secrets.collect(SPECS["localhost"], {}, Path("/nonexistent"))


def test_the_command_line_names_the_controller() -> None:
    config = parse_config(
        _with_controller(AWS, "{host: ctl, python: /opt/py/bin/python3}"),
        "c.yaml",
        Overrides(controller="admin@other.example.com:2222"),
    )
    assert config.recover.controller == ControllerSettings(
        "other.example.com", "admin", 2222, None, "/opt/py/bin/python3"
    )
    # --controller alone does not turn recovery on (--recover does).
    alone = parse_config(AWS, "c.yaml", Overrides(controller="ctl")).recover
    assert not alone.enabled and alone.controller is not None
    with pytest.raises(UsageError, match="not a number"):
        parse_config(AWS, "c.yaml", Overrides(controller="ctl:ssh"))
    message = _refusal(AWS, Overrides(controller="bad host"))
    assert "controller.host" in message


def test_submit_refuses_controller_without_recover(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(AWS)
    script = tmp_path / "s.py"
    script.write_text("")
    result = CliRunner().invoke(
        cli, ["submit", str(path), str(script), "--no-recover", "--controller", "ctl"]
    )
    assert result.exit_code == 2 and "go with --recover" in result.output, result.output


# -- credentials ----------------------------------------------------------------------------
def _home(tmp_path: Path, files: Mapping[str, str]) -> Path:
    home = tmp_path / "user"
    for name, text in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return home


def test_aws_credentials_are_the_set_variables_and_the_aws_files(tmp_path: Path) -> None:
    home = _home(tmp_path, {".aws/credentials": "[default]\n", ".aws/config": "[default]\n"})
    bundle = tmp_path / "ca.pem"
    bundle.write_text("CA")
    environ = {
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ENDPOINT_URL_EC2": "http://127.0.0.1:5001",
        "AWS_CA_BUNDLE": str(bundle),
        "AWS_PROFILE": "",  # set but empty: not sent
        "GOOGLE_APPLICATION_CREDENTIALS": "/g.json",  # another provider's
        "HOME": "/home/u",
    }
    found = controller_secrets.collect(SPECS["aws"], environ, home)
    assert dict(found.variables) == {
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ENDPOINT_URL_EC2": "http://127.0.0.1:5001",
    }
    assert dict(found.files) == {
        "AWS_SHARED_CREDENTIALS_FILE": home / ".aws/credentials",
        "AWS_CONFIG_FILE": home / ".aws/config",
        "AWS_CA_BUNDLE": bundle,
    }


def test_gcp_kubernetes_and_onprem_credentials(tmp_path: Path) -> None:
    home = _home(
        tmp_path,
        {".config/gcloud/application_default_credentials.json": "{}", ".kube/config": "k"},
    )
    environ = {
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": "http://127.0.0.1:1/compute/v1/",
        "GOOGLE_CLOUD_PROJECT": "p",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    gcp = controller_secrets.collect(SPECS["gcp"], environ, home)
    assert dict(gcp.variables) == {
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": "http://127.0.0.1:1/compute/v1/",
        "GOOGLE_CLOUD_PROJECT": "p",
    }
    assert dict(gcp.files) == {
        "GOOGLE_APPLICATION_CREDENTIALS": home
        / ".config/gcloud/application_default_credentials.json"
    }
    key_file = tmp_path / "sa.json"
    key_file.write_text("{}")
    named = controller_secrets.collect(
        SPECS["gcp"], {"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)}, home
    )
    assert dict(named.files) == {"GOOGLE_APPLICATION_CREDENTIALS": key_file}
    kube = controller_secrets.collect(SPECS["kubernetes"], environ, home)
    assert (dict(kube.variables), dict(kube.files)) == ({}, {"KUBECONFIG": home / ".kube/config"})
    listed = controller_secrets.collect(
        SPECS["kubernetes"], {"KUBECONFIG": f"/nowhere:{home / '.kube/config'}"}, home
    )
    assert dict(listed.files) == {"KUBECONFIG": home / ".kube/config"}
    onprem = controller_secrets.collect(SPECS["local"], environ, home)
    assert (dict(onprem.variables), dict(onprem.files)) == ({}, {})


class _FakeRunner:
    """A controller as a runner sees it: records every command (and its environment) and
    every file put there, with its mode here at the time."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.commands: list[str] = []
        self.puts: dict[str, tuple[bytes, int]] = {}

    def check_ready(self) -> str | None:
        return None

    def run(
        self,
        command: str,
        env: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        echo: OutputSink | None = None,
        interactive: bool = False,
        stdin: bytes | None = None,
    ) -> CommandResult:
        self.commands.append(command + repr(dict(env or {})))
        if "command -v" in command:
            return CommandResult(0, "@@python /usr/bin/python3\n@@reuse yes\n")
        return CommandResult(0, "")

    def capture(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        self.commands.append(command)
        return 0, "@@pid 4242\n"

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        source = Path(local)
        items = [source] if source.is_file() else [p for p in source.rglob("*") if p.is_file()]
        for item in items:
            where = remote if item == source else f"{remote}/{item.relative_to(source)}"
            self.puts[where] = (item.read_bytes(), stat.S_IMODE(item.stat().st_mode))
            if item.name == controller_secrets.ENV_FILE:
                assert stat.S_IMODE(item.parent.stat().st_mode) == 0o700

    def get(self, remote: str, local: str) -> None:
        raise AssertionError("not used")

    def remote_path(self, path: str) -> str:
        return self.home + path[1:] if path.startswith("~") else path


def test_a_planted_secret_reaches_the_controller_only_in_its_0600_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("HOME", str(_home(tmp_path, {".aws/credentials": f"key={SECRET}\n"})))
    data = tmp_path / "data.txt"
    data.write_text("mounted")
    path = tmp_path / "cluster.yaml"
    mounts = f"file_mounts: {{/srv/data.txt: {data}}}\n"
    path.write_text(_with_controller(AWS + mounts, "{host: ctl, ssh_user: ops}"))
    config = parse_config(path.read_text(), str(path))
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    chosen = RecoverSettings(enabled=True, controller=config.recover.controller)
    run = launch.create_run(config, script, (), chosen, stop=True, controller="ops@ctl:22")
    ctl = remote.Controller(ControllerSettings("ctl", "ops"))
    fake = _FakeRunner("/home/ops")
    ctl.runner = fake  # type: ignore[assignment]
    said: list[str] = []

    run_value = "rv-" + SECRET  # the run's own `--env WANDB_API_KEY`
    given = {"WANDB_API_KEY": run_value}
    assert remote.start(ctl, config, run, None, said.append, given) == 4242

    secrets = f"/home/ops/.launcher-controller/secrets/ctl-units/{run.id}"
    holding = {where for where, (data, _) in fake.puts.items() if SECRET.encode() in data}
    assert holding == {f"{secrets}/env", f"{secrets}/AWS_SHARED_CREDENTIALS_FILE"}, holding
    for where in holding:
        assert fake.puts[where][1] == 0o600
    env = fake.puts[f"{secrets}/env"][0].decode()
    assert "export AWS_ACCESS_KEY_ID=AKIAEXAMPLE" in env
    # The supervisor there finds the run's variable, as a detached one here does.
    assert secret_env.inherited(secret_env.parse(env), []) == given
    assert not any(run_value in c for c in fake.commands)
    assert f"AWS_SHARED_CREDENTIALS_FILE={secrets}/AWS_SHARED_CREDENTIALS_FILE" in env
    assert not any(SECRET in c for c in fake.commands)
    assert not any(SECRET in line for line in said)
    assert any("chmod 700" in c and secrets in c for c in fake.commands)
    # Nothing of it stays here but the user's own files.
    for item in tmp_path.rglob("*"):
        if item.is_file() and SECRET.encode() in item.read_bytes():
            assert item.name == "credentials", item
    # The run, its script and the cluster file as the controller reads it (no controller).
    folder = f"/home/ops/.launcher-controller/runs/ctl-units/{run.id}"
    shipped = Run.from_json(fake.puts[f"{folder}/run.json"][0].decode())
    assert shipped.controller == "ops@ctl:22" and shipped.config_path == f"{folder}/cluster.yaml"
    shipped_config = yaml.safe_load(fake.puts[f"{folder}/cluster.yaml"][0])
    assert "controller" not in shipped_config["metadata"]["launcher"]["recover"]
    # A file mount's source goes too, and the controller's cluster file names the copy.
    assert shipped_config["file_mounts"] == {"/srv/data.txt": f"{folder}/files/0/data.txt"}
    assert fake.puts[f"{folder}/files/0/data.txt"][0] == b"mounted"
    assert fake.puts[f"{folder}/script/train.py"][0] == b"print('hi')\n"
    (spawn,) = [c for c in fake.commands if "setsid" in c]
    assert "jobs supervise" in spawn and "< /dev/null" in spawn and f"{secrets}/env" in spawn


# -- the run's record and its lease ---------------------------------------------------------
def _run(**changes: object) -> Run:
    base = Run(
        id="r-1", cluster_name="c", config_path="/c.yaml", script="s.py", args=(), created_at=1.0
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_run_record_keeps_its_controller() -> None:
    run = _run(controller="root@10.0.0.5:2222")
    assert Run.from_json(run.to_json()) == run
    old = run.to_json().replace('"controller": "root@10.0.0.5:2222",', "")
    assert '"controller"' not in old
    assert Run.from_json(old).controller is None  # a record from before controllers
    settings = remote.settings_from("root@10.0.0.5:2222", None, "/k")
    assert settings == ControllerSettings("10.0.0.5", "root", 2222, "/k", None)


def test_a_lease_held_on_a_controller_is_live_to_the_laptop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time()
    gone = 2**22 + 12345  # no such process here
    # A supervisor on the controller may share this machine's host name (a container) and
    # has process ids of its own: its lease names the controller, so it is held.
    monkeypatch.setenv(CONTROLLER_ENV, "controller root@ctl:22")
    lease = Lease.mine(now)
    assert lease.host == "controller root@ctl:22" and lease.is_mine()
    monkeypatch.delenv(CONTROLLER_ENV)
    held = Lease(lease.host, gone, now)
    assert held.live(now) and not held.is_mine()
    assert not held.live(now + 60)  # lapsed all the same once its heartbeat stops
    assert not Lease(socket.gethostname(), gone, now).live(now)  # here, and gone
    assert os.getpid() == Lease.mine(now).pid


# -- the controller's side, on a shell of this machine ---------------------------------------
class _Shell(LocalProcessRunner):
    """A controller that is a directory of this machine (HOME there): what the SSH runner
    does with `capture`, done by a local shell."""

    def capture(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        done = subprocess.run(
            ["sh", "-c", command],
            env={**os.environ, "HOME": str(self.home)},
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout.decode("utf-8", errors="replace")  # as SSHRunner

    def close(self) -> None:
        pass


def _shell_controller(tmp_path: Path) -> tuple[remote.Controller, Path]:
    home = tmp_path / "ctl"
    home.mkdir()
    ctl = remote.Controller(ControllerSettings("ctl", "ops"))
    ctl.runner = _Shell(home, {}, tmp_path / "ctl.log")  # type: ignore[assignment]
    return ctl, home / remote.HOME


def test_runs_logs_and_cancels_are_read_and_written_on_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher_home: Path
) -> None:
    ctl, there = _shell_controller(tmp_path)
    run = _run(controller="ops@ctl:22", cluster_name="ctl-units", updated_at=5.0)
    log = "=== launcher: attempt 1 on head i-1 ===\nstep 1\nstep 2\n"
    monkeypatch.setenv("LAUNCHER_HOME", str(there))  # as the supervisor there keeps it
    store.save(run)
    store.append_log(run.cluster_name, run.id, log.encode())
    monkeypatch.setenv("LAUNCHER_HOME", str(launcher_home))

    assert remote.runs(ctl, "ctl-units") == [run]
    assert remote.runs(ctl, "other") == []
    seen = remote.status(ctl, run, 0)
    assert (seen.run, seen.log, seen.supervisor_alive) == (run, log.encode(), False)
    assert remote.status(ctl, run, 0, os.getpid()).supervisor_alive
    remote.request_cancel(ctl, run)
    monkeypatch.setenv("LAUNCHER_HOME", str(there))
    assert store.cancel_requested(run.cluster_name, run.id)
    ended = dataclasses.replace(run, state=RunState.SUCCEEDED, updated_at=9.0)
    store.save(ended)
    monkeypatch.setenv("LAUNCHER_HOME", str(launcher_home))
    printed: list[str] = []
    assert remote.follow(ctl, run, printed.append, offset=len(log) - 7) == ended
    assert "".join(printed) == "step 2\n"
    assert remote.wait_ended(ctl, run) == ended


def test_the_launcher_is_installed_on_a_controller_without_ray(tmp_path: Path) -> None:
    ctl, there = _shell_controller(tmp_path)
    python, how = install_on_controller(ctl.runner, remote.VENV, sys.executable, "boto3", "aws")
    assert (python, how) == (str(there / "venv" / "bin" / "python"), "installed")
    imported = subprocess.run(
        [python, "-c", "import launcher.cli.main, boto3, launcher; print(launcher.__file__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,  # not the checkout, whose launcher `python -c` would import first
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(str(there / "venv")), imported.stdout  # its own copy
    again = install_on_controller(ctl.runner, remote.VENV, sys.executable, "boto3", "aws")
    assert again == (python, "reused")
    with pytest.raises(LauncherError, match=r"controller\.python"):
        install_on_controller(ctl.runner, "other-venv", "/nowhere/python3")


def test_jobs_list_logs_and_cancel_of_a_run_its_controller_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher_home: Path
) -> None:
    """From a machine with the cluster file only: the run is listed as the controller holds
    it (supervised there), its output is the controller's log, and a cancel is asked of the
    controller's supervisor (played here by a thread that waits for the request)."""
    ctl, there = _shell_controller(tmp_path)
    monkeypatch.setattr(remote, "Controller", lambda settings: ctl)
    path = tmp_path / "cluster.yaml"
    path.write_text(_with_controller(AWS, "{host: ctl, ssh_user: ops}"))
    now = time.time()
    run = _run(
        cluster_name="ctl-units",
        controller="ops@ctl:22",
        attempts=(Attempt(1, "i-1", now),),
        supervisor=Lease("controller ops@ctl:22", 2**22 + 7, now),
        updated_at=now,
    )
    folder = there / "runs" / "ctl-units" / run.id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(run.to_json())
    (folder / "driver.log").write_text("=== launcher: attempt 1 on head i-1 ===\nstep 1\n")

    listed = CliRunner().invoke(cli, ["jobs", "list", "--json", str(path)])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert (row["id"], row["state"], row["supervised"]) == (run.id, "running", True)
    logs = CliRunner().invoke(cli, ["jobs", "logs", "--json", str(path)])
    assert json.loads(logs.output)["attempts"][0]["output"] == "step 1\n", logs.output

    def supervisor_there() -> None:
        while not (folder / "cancel").exists():
            time.sleep(0.05)
        ended = dataclasses.replace(run, state=RunState.CANCELLED, updated_at=time.time())
        (folder / "run.json").write_text(ended.to_json())

    thread = threading.Thread(target=supervisor_there, daemon=True)
    thread.start()
    cancelled = CliRunner().invoke(cli, ["jobs", "cancel", "-y", str(path), run.id])
    thread.join(5)
    assert cancelled.exit_code == 0, cancelled.output
    assert "its driver is stopped" in cancelled.output
    assert not store.local_runs("ctl-units")  # nothing of it kept here


def test_a_run_is_not_taken_up_here_while_its_controller_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The laptop's record of a run it gave a controller carries no lease: with the
    controller silent, `jobs logs --follow` must not start a second supervisor here."""
    ctl, _ = _shell_controller(tmp_path)

    def silent(command: str, timeout: float = 60.0) -> tuple[int, str]:
        raise OSError("ssh ops@ctl: no route to host")

    ctl.runner.capture = silent  # type: ignore[method-assign]
    monkeypatch.setattr(remote, "Controller", lambda settings: ctl)
    monkeypatch.setattr(listing.replica, "fetch", lambda provider, config: [])
    path = tmp_path / "cluster.yaml"
    path.write_text(_with_controller(AWS, "{host: ctl, ssh_user: ops}"))
    run = _run(cluster_name="ctl-units", controller="ops@ctl:22", config_path=str(path))
    store.save(run)
    taken: list[Run] = []
    monkeypatch.setattr(jobs_commands, "_take_up", lambda settings, run, *a: taken.append(run))

    result = CliRunner().invoke(cli, ["jobs", "logs", "--follow", str(path), run.id])
    assert result.exit_code == 1, result.output
    assert "may still be supervised there" in result.output and "no route" in result.output
    assert taken == []


# -- a controller that fails on the way -----------------------------------------------------
def test_a_connection_lost_while_installing_names_the_controller(tmp_path: Path) -> None:
    """SSHRunner.run gives exit 255 for a connection that failed: that is the controller
    not reached, not its Python missing."""

    class Unreached(_FakeRunner):
        def run(
            self, command: str, env: Mapping[str, str] | None = None, **_: object
        ) -> CommandResult:
            return CommandResult(255, "connection to ops@ctl kept dropping: connection refused")

    with pytest.raises(LauncherError) as caught:
        install_on_controller(Unreached("/home/ops"), remote.VENV, None, name="ops@ctl:22")
    message = str(caught.value)
    assert "could not reach the controller ops@ctl:22" in message and "refused" in message
    assert "python" not in message.lower()


def _submit_with_lifecycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctl: remote.Controller, *flags: str
) -> tuple[object, list[str]]:
    from launcher.cli import cluster_commands

    monkeypatch.setattr(remote, "Controller", lambda settings: ctl)
    events: list[str] = []
    monkeypatch.setattr(cluster_commands, "_up", lambda *a, **k: events.append("up"))
    monkeypatch.setattr(cluster_commands, "down_cluster", lambda *a, **k: events.append("down"))
    path = tmp_path / "cluster.yaml"
    path.write_text(_with_controller(AWS, "{host: ctl, ssh_user: ops}"))
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    result = CliRunner().invoke(
        cli, ["submit", str(path), str(script), "--recover", "--start", "--stop", *flags]
    )
    return result, events


def test_an_unreachable_controller_fails_before_the_run_is_made_and_start_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, _ = _shell_controller(tmp_path)

    def unreachable(path: str) -> str:
        raise OSError("ssh ops@ctl: connection refused")

    ctl.runner.remote_path = unreachable  # type: ignore[method-assign]
    result, events = _submit_with_lifecycle(tmp_path, monkeypatch, ctl, "--detach")
    assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
    assert "could not reach the controller ops@ctl:22" in result.output  # type: ignore[attr-defined]
    assert not store.local_runs("ctl-units")  # no run left here that nobody supervises
    assert events == ["up", "down"]  # what --start brought up goes down with --stop


def test_a_supervisor_that_exits_there_leaves_no_run_and_start_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, there = _shell_controller(tmp_path)

    def start(controller: remote.Controller, config: object, run: Run, *a: object) -> int:
        folder = there / "runs" / "ctl-units" / run.id
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(run.to_json())
        (folder / remote.SUPERVISOR_LOG).write_text("error: the config is refused here\n")
        return 2**22 + 99  # no such process: it exited

    monkeypatch.setattr(remote, "start", start)
    result, events = _submit_with_lifecycle(tmp_path, monkeypatch, ctl, "--detach")
    assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
    assert "exited" in result.output and "refused here" in result.output  # type: ignore[attr-defined]
    assert not store.local_runs("ctl-units")
    assert not list((there / "runs" / "ctl-units").iterdir())  # nor there
    assert events == ["up", "down"]


def test_a_supervisor_started_there_keeps_the_cluster_up_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--stop is the controller's once its supervisor has started the run."""
    ctl, there = _shell_controller(tmp_path)

    def start(controller: remote.Controller, config: object, run: Run, *a: object) -> int:
        folder = there / "runs" / "ctl-units" / run.id
        folder.mkdir(parents=True)
        begun = dataclasses.replace(run, attempts=(Attempt(1, "i-1", time.time()),))
        (folder / "run.json").write_text(begun.to_json())
        return os.getpid()

    monkeypatch.setattr(remote, "start", start)
    result, events = _submit_with_lifecycle(tmp_path, monkeypatch, ctl, "--detach")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "supervised by the controller ops@ctl:22" in result.output  # type: ignore[attr-defined]
    assert events == ["up"]
    assert len(store.local_runs("ctl-units")) == 1


def test_following_from_a_controller_keeps_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher_home: Path
) -> None:
    """The next offset is the bytes read: an invalid byte, or a character cut in two at a
    read's end, neither skips nor repeats what follows."""
    ctl, there = _shell_controller(tmp_path)
    run = _run(controller="ops@ctl:22", cluster_name="ctl-units", updated_at=5.0)
    parts = [b"a\xff\n", b"caf\xc3", b"\xa9 step 2\n"]

    def on_controller(change: Callable[[], None]) -> None:
        monkeypatch.setenv("LAUNCHER_HOME", str(there))
        change()
        monkeypatch.setenv("LAUNCHER_HOME", str(launcher_home))

    on_controller(lambda: store.save(run))
    on_controller(lambda: store.append_log(run.cluster_name, run.id, parts[0]))
    printed: list[str] = []

    def write(text: str) -> None:  # the supervisor there writes on between two reads
        printed.append(text)
        if len(printed) < len(parts):
            part = parts[len(printed)]
            on_controller(lambda: store.append_log(run.cluster_name, run.id, part))
        else:
            ended = dataclasses.replace(run, state=RunState.SUCCEEDED, updated_at=9.0)
            on_controller(lambda: store.save(ended))

    remote.follow(ctl, run, write, every_s=0.01)
    assert "".join(printed) == b"".join(parts).decode("utf-8", errors="replace")
    assert "".join(printed) == "a\ufffd\ncaf\u00e9 step 2\n"


def test_jobs_list_reads_the_nodes_copies_too_when_a_controller_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run known only from the nodes' copies (supervised from another machine) is listed
    beside the controller's; per run, the newer record wins."""
    ctl, there = _shell_controller(tmp_path)
    monkeypatch.setattr(remote, "Controller", lambda settings: ctl)
    path = tmp_path / "cluster.yaml"
    path.write_text(_with_controller(AWS, "{host: ctl, ssh_user: ops}"))
    held = _run(id="r-held", cluster_name="ctl-units", controller="ops@ctl:22", updated_at=5.0)
    folder = there / "runs" / "ctl-units" / held.id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(held.to_json())
    elsewhere = _run(id="r-else", cluster_name="ctl-units", created_at=2.0, updated_at=3.0)
    stale = dataclasses.replace(held, state=RunState.FAILED)  # as new: the controller's wins
    newer = dataclasses.replace(elsewhere, state=RunState.SUCCEEDED, updated_at=4.0)
    monkeypatch.setattr(listing.replica, "fetch", lambda provider, config: [stale, newer])
    monkeypatch.setattr(listing, "make_provider", lambda config: None)

    config = parse_config(path.read_text(), str(path))
    found = {r.id: r for r in listing.known_runs(config)}
    assert set(found) == {"r-held", "r-else"}
    assert found["r-held"].state is RunState.RUNNING  # the controller's
    assert found["r-else"].state is RunState.SUCCEEDED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("root@[::1]:2222", ControllerSettings("::1", "root", 2222)),
        ("root@[2001:db8::5]", ControllerSettings("2001:db8::5", "root", 22)),
        ("root@2001:db8::5", ControllerSettings("2001:db8::5", "root", 22)),
        ("root@ctl.example.com:2200", ControllerSettings("ctl.example.com", "root", 2200)),
        ("root@ctl", ControllerSettings("ctl", "root", 22)),
    ],
)
def test_one_reading_of_a_controller_for_the_config_and_the_run(
    text: str, expected: ControllerSettings
) -> None:
    config = parse_config(AWS, "c.yaml", Overrides(controller=text)).recover.controller
    assert config == expected
    assert remote.settings_from(text, None, None) == expected
    assert remote.settings_from(str(expected), None, None) == expected  # the run's field
    with pytest.raises(UsageError, match="IPv6"):
        parse_config(AWS, "c.yaml", Overrides(controller="root@[::1"))


@pytest.mark.parametrize("ends", [True, False])
def test_the_credentials_there_go_once_the_supervisor_there_has_ended_the_run(
    tmp_path: Path, ends: bool
) -> None:
    """A supervisor that lets go of the run (SIGTERM) leaves them to whoever takes it up
    there."""
    ctl, there = _shell_controller(tmp_path)
    run = _run(controller="ops@ctl:22", cluster_name="ctl-units")
    folder = there / "runs" / "ctl-units" / run.id
    folder.mkdir(parents=True)
    secrets = there / "secrets" / "ctl-units" / run.id
    secrets.mkdir(parents=True)
    (secrets / "env").write_text(f"export AWS_SECRET_ACCESS_KEY={SECRET}\n")
    last = dataclasses.replace(run, state=RunState.SUCCEEDED if ends else RunState.RUNNING)
    (tmp_path / "last.json").write_text(last.to_json())
    python = tmp_path / "python"  # `jobs supervise` plays the run's end; the rest is Python
    python.write_text(
        f'#!/bin/sh\nif [ "$1" = -m ]; then cp {tmp_path / "last.json"} run.json; exit 3; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)

    pid = remote._spawn(ctl, str(python), str(secrets), str(folder), "c.yaml", run, None)
    wait_for_exit = time.monotonic() + 20
    while time.monotonic() < wait_for_exit and remote.status(ctl, run, 0, pid).supervisor_alive:
        time.sleep(0.05)
    assert (folder / "run.json").is_file()
    assert secrets.exists() is not ends
    assert (there / "secrets" / "ctl-units").exists() is not ends


def test_an_attached_submit_follows_the_controller_to_the_run_s_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, there = _shell_controller(tmp_path)

    def start(controller: remote.Controller, config: object, run: Run, *a: object) -> int:
        folder = there / "runs" / "ctl-units" / run.id
        folder.mkdir(parents=True)
        attempt = Attempt(1, "i-1", time.time(), exit_code=3)
        failed = dataclasses.replace(
            run, attempts=(attempt,), state=RunState.FAILED, config_path="/there/c.yaml"
        )
        (folder / "run.json").write_text(failed.to_json())
        (folder / "driver.log").write_bytes("step caf\u00e9\n".encode())
        return os.getpid()

    monkeypatch.setattr(remote, "start", start)
    result, events = _submit_with_lifecycle(tmp_path, monkeypatch, ctl)
    assert result.exit_code == 3, result.output  # type: ignore[attr-defined]
    assert "step caf\u00e9\n" in result.output and "failed" in result.output  # type: ignore[attr-defined]
    assert events == ["up"]  # the controller's supervisor takes it down
    (kept,) = store.local_runs("ctl-units")
    assert kept.state is RunState.FAILED and kept.config_path == str(tmp_path / "cluster.yaml")
