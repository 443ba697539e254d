"""On-prem (`provider: type: local`) inputs that `up` cannot use are refused by `validate`,
in one line naming the key and the fix; and clusters whose names differ only in punctuation
or case keep separate records of the machines they use on a head they share."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.config.loader import Overrides, parse_config
from launcher.providers.onprem.claims import FileRecords, RemoteRecords
from launcher.providers.onprem.spec import OnPremSpec, records_dir
from tests.conftest import RAY_EXAMPLES, run_cli

COLLIDING = ["ml.prod", "ml_prod", "ML-prod", "ml-prod", "a" * 60 + "xyz", "a" * 60 + "xyw"]


def text(head: str = "10.0.0.1", workers: str = "[10.0.0.2]", auth: str = "{ssh_user: u}") -> str:
    return f"""
cluster_name: c
provider: {{type: local, head_ip: {json.dumps(head)}, worker_ips: {workers}}}
auth: {auth}
"""


def validate(tmp_path: Path, config: str) -> tuple[int, list[str]]:
    path = tmp_path / "onprem.yaml"
    path.write_text(config)
    result = run_cli("validate", str(path))
    return result.exit_code, result.stderr.strip().splitlines()


@pytest.mark.parametrize("auth", ["{}", "{ssh_private_key: ~/.ssh/k}", "{ssh_user: ''}"])
def test_no_ssh_user_is_refused_by_validate(tmp_path: Path, auth: str) -> None:
    code, lines = validate(tmp_path, text(auth=auth))
    assert code == 2, lines
    (line,) = [line for line in lines if "error:" in line]
    assert "auth" in line and "ssh_user" in line
    assert "set auth.ssh_user to the user to log in as on your machines" in line


def test_no_auth_at_all_is_refused_by_validate(tmp_path: Path) -> None:
    config = "cluster_name: c\nprovider: {type: local, head_ip: h1, worker_ips: [h2]}\n"
    code, lines = validate(tmp_path, config)
    assert code == 2
    assert lines == [
        f"{tmp_path / 'onprem.yaml'}: error: auth: `ssh_user` is missing; "
        "set auth.ssh_user to the user to log in as on your machines, such as "
        "`ssh_user: ubuntu`"
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "-oProxyCommand=touch /tmp/owned",  # would be an ssh option
        "root@10.0.0.1",
        "10.0.0.1:22",
        "head node",
        "../etc",
        "$(reboot)",
        "999.1.1.1",
        "10.0.0.256",
        "10.0.0",
        "fe80::zz",
        "1::2::3",
        "x" * 64,
    ],
)
def test_a_machine_that_is_no_address_or_host_name_is_refused_by_validate(
    tmp_path: Path, bad: str
) -> None:
    for config, path in (
        (text(head=bad), "provider.head_ip:"),
        (text(workers=f"[10.0.0.2, {json.dumps(bad)}]"), "provider.worker_ips[1]:"),
    ):
        code, lines = validate(tmp_path, config)
        assert code == 2, (bad, lines)
        (line,) = lines
        assert path in line, line
        assert "address" in line.split(path, 1)[1]  # says what to write instead


@pytest.mark.parametrize(
    "good",
    ["10.0.0.1", "node1", "node1.example.com", "gpu_box.lan", "::1", "fe80::1%eth0", "HEAD"],
)
def test_addresses_and_host_names_pass(tmp_path: Path, good: str) -> None:
    code, lines = validate(tmp_path, text(head=good))
    assert code == 0, lines


def test_the_ellipsis_of_rays_examples_is_a_warning(tmp_path: Path) -> None:
    code, lines = validate(tmp_path, text(workers="[h2, h3, ... ]"))
    assert code == 0
    assert any("warning: provider.worker_ips[2]: '...' is a placeholder" in line for line in lines)


def test_rays_coordinator_example_validates_with_a_warning_that_up_refuses_it() -> None:
    result = run_cli("validate", str(RAY_EXAMPLES / "local" / "example-minimal-automatic.yaml"))
    assert result.exit_code == 0
    assert "provider.coordinator_address: Ray's coordinator server is not supported" in (
        result.stderr
    )


# -- names derived from the cluster name ------------------------------------------------------


def test_derived_names_differ_for_colliding_cluster_names_and_plan_prints_them() -> None:
    spec = OnPremSpec()
    found = []
    for name in COLLIDING:
        config = parse_config(
            text().replace("cluster_name: c", f"cluster_name: {name}"), "x", Overrides()
        )
        names = spec.derived_names(config)
        assert names == {"records of machines in use": records_dir(name)}
        shown = {(r.kind, r.name) for r in spec.bootstrap_plan(config)}
        assert ("records of machines in use", records_dir(name)) in shown
        found.append(names["records of machines in use"])
    assert len(set(found)) == len(found)


def test_records_of_colliding_names_on_one_head_stay_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the autoscaler on the head keeps them (files), then as the laptop does (the
    same shell commands it sends over SSH, run here in a local shell)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    on_head = {name: FileRecords(name) for name in COLLIDING}
    for name, records in on_head.items():
        assert records.claim({"ip": "10.0.0.2", "kind": "worker", "cluster": name})
    shell = LocalShell(tmp_path)  # stands in for the SSHRunner to the head
    remote = {name: RemoteRecords(name, shell, "head") for name in COLLIDING}
    for name, records in remote.items():
        assert records.claim({"ip": "10.0.0.3", "kind": "worker", "cluster": name})
        assert not records.claim({"ip": "10.0.0.3", "kind": "worker", "cluster": name})
        assert sorted(r["ip"] for r in records.all()) == ["10.0.0.2", "10.0.0.3"]
        assert {r["cluster"] for r in records.all()} == {name}
    assert remote["ml.prod"].remove_all()
    assert on_head["ml.prod"].all() == []
    for name in COLLIDING[1:]:
        assert [r["cluster"] for r in on_head[name].all()] == [name, name]


class LocalShell:
    """The one method RemoteRecords uses of an SSHRunner, as a local `sh`."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def capture(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        done = subprocess.run(
            ["sh", "-c", command],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"HOME": str(self.home), "PATH": "/usr/bin:/bin"},
        )
        return done.returncode, done.stdout
