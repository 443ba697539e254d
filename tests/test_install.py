"""Installing the launcher on a head over real SSH (an isolated sshd host): two installs at
once on one head, as when an `up` killed mid-install leaves its script running there and
the next `up` installs again, both end with a working installation."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from fakes.hosts.ssh import isolated_hosts, make_key
from launcher.cluster.install import VENV, PythonChoice, install_on_head
from launcher.config.model import AuthConfig
from launcher.errors import LauncherError
from launcher.providers.ssh_access import SSHAccess

HOST_IP = "127.0.6.90"
FOUND = PythonChoice()  # found: the login PATH has the test venv (`ray`, `python3`)


def test_concurrent_installs_on_one_head_both_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    key = make_key(tmp_path / "id_ed25519")
    with isolated_hosts(key, HOST_IP, 1) as (host,):
        auth = AuthConfig(ssh_user="root", ssh_private_key=str(key))
        runners = [
            SSHAccess("install", auth).runner(HOST_IP, tmp_path / f"log{i}") for i in range(2)
        ]
        for _ in range(3):  # each round from a head without the launcher
            runners[0].run(f'rm -rf "{VENV}"', {})
            outcomes: list[str] = []
            failures: list[LauncherError] = []

            def install(index: int) -> None:
                try:
                    outcomes.append(install_on_head(runners[index], {}, FOUND)[1])  # noqa: B023
                except LauncherError as exc:
                    failures.append(exc)  # noqa: B023

            threads = [threading.Thread(target=install, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert failures == []
            assert sorted(outcomes) in (["installed", "installed"], ["installed", "reused"])
            check = runners[0].run(
                f'"{VENV}/bin/python" -c "import launcher.autoscaler.daemon"', {}
            )
            assert check.ok, check.output_tail
            assert install_on_head(runners[0], {}, FOUND)[1] == "reused"
        # Another Python for the head (provider.head_python): installed again, over it.
        other = str(Path(sys.executable).parent / "python3")
        assert install_on_head(runners[0], {}, PythonChoice(explicit=other))[1] == "installed"
        assert host.path("~/.launcher/venv/.launcher-python").read_text().strip() == other
        assert install_on_head(runners[0], {}, PythonChoice(explicit=other))[1] == "reused"
        # Its Ray gone from that Python (as recorded): looked for again, and installed again.
        host.path("~/.launcher/venv/.launcher-ray").write_text("/nowhere/ray/__init__.py\n")
        assert install_on_head(runners[0], {}, PythonChoice(explicit=other))[1] == "installed"
        # Nothing of the installs is left beside the environment.
        leftovers = sorted(p.name for p in host.path("~/.launcher").iterdir())
        assert leftovers == ["venv"], leftovers
