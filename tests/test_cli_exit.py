"""A finished command ends its process at once (launcher/__main__.py `_leave`), skipping the
interpreter's teardown: its exit code, its whole output and the atexit functions are kept,
and a thread still at work is waited for as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

RUN = """
import atexit, sys, threading, time
atexit.register(lambda: open({mark!r}, "w").write("atexit ran"))
{before}
sys.argv = ["launcher", *{args!r}]
from launcher.__main__ import main
main()
"""


def run(tmp_path: Path, *args: str, before: str = "") -> subprocess.CompletedProcess[str]:
    script = RUN.format(mark=str(tmp_path / "mark"), before=before, args=list(args))
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_the_code_the_output_and_the_atexit_functions_are_kept(tmp_path: Path) -> None:
    done = run(tmp_path, "--help")
    assert done.returncode == 0 and "validate" in done.stdout and done.stdout.endswith("\n")
    assert (tmp_path / "mark").read_text() == "atexit ran"
    (tmp_path / "mark").unlink()
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: aws, region: 5}\n")
    refused = run(tmp_path, "validate", str(bad))
    assert refused.returncode == 2 and "provider.region" in refused.stderr
    assert (tmp_path / "mark").read_text() == "atexit ran"


def test_a_thread_still_at_work_is_waited_for(tmp_path: Path) -> None:
    late = tmp_path / "late"
    worker = (
        "threading.Thread(target=lambda: (time.sleep(0.5), "
        f"open({str(late)!r}, 'w').write('done'))).start()"
    )
    done = run(tmp_path, "--version", before=worker)
    assert done.returncode == 0
    assert late.read_text() == "done"
