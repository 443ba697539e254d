"""Commands on this machine, as a node of the localhost provider.

Each node has its own home directory: commands run there with HOME pointing at it, so
`~/...` paths in file mounts and commands are per node, as on separate machines.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from launcher.runners.base import CommandResult, OutputSink, expand_home
from launcher.runners.shell import LineBuffer, OutputLines


class LocalProcessRunner:
    def __init__(self, home: Path, base_env: Mapping[str, str], log_path: Path) -> None:
        self.home = home
        self.base_env = dict(base_env)
        self.log_path = log_path

    def check_ready(self) -> str | None:
        return None if self.home.is_dir() else f"node directory {self.home} is missing"

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        merged = dict(os.environ)
        merged.update(self.base_env)
        merged.update(env or {})
        merged["HOME"] = str(self.home)
        return merged

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
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"$ {command}\n")
        if interactive:
            code = subprocess.call(["bash", "-c", command], env=self._env(env), cwd=self.home)
            return CommandResult(code, "")
        process = subprocess.Popen(
            ["bash", "-c", command],
            env=self._env(env),
            cwd=self.home,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a timeout or Ctrl-C stops the whole command tree
        )
        if stdin is not None:
            _send(process, stdin)
        deadline = None if timeout is None else time.monotonic() + timeout
        log = self.log_path.open("a", encoding="utf-8")
        with process.stdout or contextlib.nullcontext(), log:
            output = OutputLines(log, echo)
            try:
                finished = _pump(process, LineBuffer(output, hold_last=False), deadline)
            except BaseException:
                _kill_group(process)
                raise
        if not finished:
            # Its process group: the command and all it started that stayed in it. (One that
            # left the group and holds the output open no longer keeps this waiting.)
            _kill_group(process)
            process.wait()
            output.tail.append(f"(stopped after {timeout:g} s)")
            return CommandResult(124, output.text(), timed_out=True)
        return CommandResult(process.wait(), output.text())

    def remote_path(self, path: str) -> str:
        return expand_home(path, lambda: str(self.home))

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        copy_tree_like_rsync(local, self.remote_path(remote), excludes)

    def get(self, remote: str, local: str) -> None:
        copy_tree_like_rsync(self.remote_path(remote), local, ())


def copy_tree_like_rsync(source: str, target: str, excludes: tuple[str, ...]) -> None:
    """`rsync -a source target`, with rsync where it exists: a source ending in `/` copies
    a directory's contents, else the directory itself into `target`."""
    Path(target.rstrip("/") or "/").parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("rsync"):
        args = ["rsync", "-a", *(f"--exclude={pattern}" for pattern in excludes), source, target]
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise OSError(f"rsync {source} {target} failed: {result.stderr.strip()}")
        return
    src = Path(source)
    if src.is_dir():
        # rsync makes a missing target a directory too, and puts `source` in it.
        dest = Path(target) if source.endswith("/") else Path(target) / src.name
        ignore = shutil.ignore_patterns(*excludes) if excludes else None
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True, ignore=ignore)
    else:
        dest = Path(target)
        if target.endswith("/") or dest.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            dest = dest / src.name
        shutil.copy2(src, dest)


def _pump(process: subprocess.Popen[bytes], lines: LineBuffer, deadline: float | None) -> bool:
    """Feed `process`'s output to `lines` until it ends (True) or `deadline` passes (False).
    Reads never block past the deadline, even when a process the command left behind holds
    its output open."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            if not selector.select(wait):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                lines.finish()
                return True
            lines.feed(chunk)


def _send(process: subprocess.Popen[bytes], data: bytes) -> None:
    """Write `data` to the command's standard input, then close it."""
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError), process.stdin:
        process.stdin.write(data)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
