"""paramiko is imported without `invoke` (launcher/runners/paramiko_lib.py), and `invoke`
stays importable: checked in a fresh interpreter, as this one may have imported both."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from launcher.runners.ssh import SSHRunner
import paramiko
assert "paramiko" in sys.modules and "invoke" not in sys.modules, sorted(sys.modules)
assert paramiko.config.invoke is None  # Match exec, which the launcher never uses, is off
import invoke
assert callable(invoke.run)
print("ok")
"""


def test_paramiko_comes_without_invoke_and_invoke_still_imports() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
