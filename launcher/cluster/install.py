"""Putting the launcher the user runs onto a remote head, so the autoscaler there runs the
exact same code.

`build_wheel` packs the running installation (the `launcher` package with its schemas, price
table and defaults) into a wheel named by a digest of its contents. `install_on_head` finds
the head's Python with Ray (`runners.ray_node`: the one `provider.head_python` names, else
that of the Ray running there or named by the start commands, else `ray` or `python3` on
the PATH), copies the wheel to the head and installs it into a virtual environment of its
own (`~/.launcher/venv`) that also sees that Python's packages (Ray and its dependencies,
as the user's setup installed them). A head whose environment already holds the same
digest over the same Python is left alone.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import json
import shlex
import uuid
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import launcher
from launcher.config.schema import schema_dir
from launcher.errors import LauncherError
from launcher.files import replacing
from launcher.paths import launcher_home
from launcher.providers.ssh_access import known_hosts_path
from launcher.runners.base import CommandResult, CommandRunner
from launcher.runners.ray_node import find_python_script, parse_python

VENV = "$HOME/.launcher/venv"
# What the autoscaler imports on the head; missing ones are installed with pip.
_NEEDED = ("launcher.autoscaler.daemon", "ray", "yaml", "jsonschema", "paramiko")


@dataclass(frozen=True)
class Wheel:
    path: Path
    digest: str

    @property
    def python(self) -> str:
        """The head's interpreter with this wheel installed (a shell word: `$HOME` expands)."""
        return f"{VENV}/bin/python"


def _package_files() -> list[tuple[str, bytes]]:
    """(path in the wheel, contents) of the running launcher, sorted."""
    package = Path(launcher.__file__).resolve().parent
    files: dict[str, bytes] = {}
    for path in package.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[f"launcher/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    schemas = schema_dir()
    for path in schemas.rglob("*.json"):
        files[f"launcher/_schemas/{path.relative_to(schemas).as_posix()}"] = path.read_bytes()
    return sorted(files.items())


def _requirements(extra: str | None = None) -> list[str]:
    """The launcher's own requirements, or those of one of its extras (`aws`...)."""
    try:
        required = importlib.metadata.requires(launcher.DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    if extra is None:
        return [r for r in required if "extra ==" not in r]
    marker = f'extra == "{extra}"'
    return [r.split(";")[0].strip() for r in required if marker in r]


def _digest(files: list[tuple[str, bytes]]) -> str:
    hasher = hashlib.sha256()
    for name, data in files:
        hasher.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return hasher.hexdigest()[:16]


@functools.cache
def package_digest() -> str:
    """The running launcher's digest: that of the wheel `build_wheel` makes of it (read
    once per process: a command runs the launcher it started with)."""
    return _digest(_package_files())


def build_wheel() -> Wheel:
    """The running launcher as a wheel (built once per content, cached in $LAUNCHER_HOME)."""
    digest = package_digest()
    version = f"{launcher.__version__}+{digest}"
    stem = launcher.DISTRIBUTION.replace("-", "_")  # a wheel's file name form
    path = launcher_home() / "wheels" / f"{stem}-{version}-py3-none-any.whl"
    if path.exists():
        return Wheel(path, digest)
    files = _package_files()
    info = f"{stem}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {launcher.DISTRIBUTION}",
        f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in _requirements()),
    ]
    files += [
        (f"{info}/METADATA", ("\n".join(metadata) + "\n").encode()),
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: launcher\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{info}/entry_points.txt", b"[console_scripts]\nlauncher = launcher.__main__:main\n"),
    ]
    record = [f"{name},sha256={_b64_digest(data)},{len(data)}" for name, data in files]
    record.append(f"{info}/RECORD,,")
    path.parent.mkdir(parents=True, exist_ok=True)
    # A file of this build's own: `up`s of other clusters may build the same wheel at once.
    with replacing(path) as partial, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return Wheel(path, digest)


def _b64_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _probe_script(digest: str, choice: PythonChoice) -> str:
    """Shell for the head: find its Python with Ray (`@@python P`, or `@@tried ...` and exit
    3), then say whether the environment there is this wheel's over that same Python
    (`@@reuse yes`). One round trip, and cheap on a no-op `up`, which runs it every time:
    an environment installed for the same wheel and the same choice (head_python and the
    start commands' `ray` paths), whose Python and Ray are still there, is reused without
    looking further (no process scan, no Python started)."""
    find = find_python_script(choice.explicit, choice.ray_paths)
    recorded = f'PY=$(cat "{VENV}/.launcher-python" 2>/dev/null)'
    return "\n".join(
        [
            f'if [ "$(cat "{VENV}/.launcher-digest" 2>/dev/null)" = {digest} ] && '
            f'[ "$(cat "{VENV}/.launcher-choice" 2>/dev/null)" = {choice.digest} ] && '
            f'{recorded} && [ -x "$PY" ] && [ -x "{VENV}/bin/python" ] && '
            f'[ -f "$(cat "{VENV}/.launcher-ray" 2>/dev/null)" ]; then',
            '  echo "@@python $PY"; echo "@@reuse yes"; exit 0',
            "fi",
            f"found=$(\n{find}\n)",
            'echo "$found"',
            "PY=$(echo \"$found\" | sed -n 's/^@@python //p')",
            '[ -n "$PY" ] || exit 3',
            "exit 0",
        ]
    )


@dataclass(frozen=True)
class PythonChoice:
    """How to find the head's Python with Ray: the one the user named
    (`provider.head_python`), else by what runs there and what the start commands name."""

    explicit: str | None = None
    ray_paths: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """Names the choice, so an environment installed for another is not reused as is."""
        text = json.dumps([self.explicit, list(self.ray_paths)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def advice(self) -> str:
        if self.explicit:
            return (
                "install Ray there (`pip install 'ray[default]'` in setup_commands) or set "
                "provider.head_python to the Python that has it"
            )
        return (
            "set provider.head_python to the Python of the head's Ray (such as "
            "/opt/venv/bin/python), or install Ray for python3 in setup_commands"
        )


def _install_script(
    wheel_on_head: str,
    digest: str,
    python: str,
    choice_digest: str,
    modules: Sequence[str],
    requirements: Sequence[str],
    *,
    venv: str = VENV,
    needed: Sequence[str] = _NEEDED,
    with_ray: bool = True,
) -> str:
    """Shell run on the head: make the environment over `python` (the head's Python with
    Ray) and unpack the wheel in it.
    `modules`: more the autoscaler imports there (a provider's SDK), installed with pip
    from `requirements` when missing.

    The environment is built beside the old one (`$V.new.PID`) and moved into place only
    once complete, and the wheel sits in a directory of this install's own: an earlier
    `up` killed mid-install leaves its script running on the head, which must neither
    remove this install's wheel nor half-empty the environment under it.

    `venv`, `needed` and `with_ray` serve a run's controller (install_on_controller), which
    needs the launcher and the provider's SDK but no Ray."""
    checks = shlex.quote("; ".join(f"import {name}" for name in (*needed, *modules)))
    more = " ".join(shlex.quote(r) for r in requirements)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    ray_origin = "import importlib.util as u; print(u.find_spec('ray').origin)"
    # The head's own packages (Ray, as setup installed them) stay visible in the venv.
    site_dirs = (
        "import sys; print('\\n'.join(p for p in sys.path "
        "if p.endswith(('site-packages', 'dist-packages'))))"
    )
    return "\n".join(
        [
            f'V="{venv}"; T="$V.new.$$"; W={shlex.quote(wheel_on_head)}',
            'trap \'rm -rf "$T" "$(dirname "$W")"\' EXIT',
            f"PY={shlex.quote(python)}",
            '"$PY" -m venv --without-pip "$T" || exit 4',
            f'SITE=$("$T/bin/python" -c {shlex.quote(purelib)})',
            f'"$PY" -c {shlex.quote(site_dirs)} > "$SITE/_launcher_base.pth"',
            '"$T/bin/python" -m zipfile -e "$W" "$SITE" || exit 5',
            # Whatever the head lacks comes from pip (needs the network); each check imports
            # Ray, so it runs a second time only after pip.
            f'if ! "$T/bin/python" -c {checks} 2>/dev/null; then',
            f'  "$T/bin/python" -m pip install --quiet "$W" {more} >/dev/null 2>&1',
            f'  out=$("$T/bin/python" -c {checks} 2>&1) || {{ echo "$out" | tail -n 1; exit 6; }}',
            "fi",
            f'echo {digest} > "$T/.launcher-digest"; echo "$PY" > "$T/.launcher-python"',
            f'echo {choice_digest} > "$T/.launcher-choice"',
            f'"$PY" -c {shlex.quote(ray_origin)} > "$T/.launcher-ray" || exit 6'
            if with_ray
            else "true",
            # A concurrent install of the same wheel may have moved its own in first: fine.
            'rm -rf "$V" && mv -T "$T" "$V" || [ -x "$V/bin/python" ] || exit 7',
        ]
    )


def install_on_head(
    runner: CommandRunner,
    env: dict[str, str],
    choice: PythonChoice,
    sdk_module: str | None = None,
    sdk_extra: str | None = None,
) -> tuple[Wheel, str]:
    """Install the running launcher on the head, over the head's Python with Ray (found as
    `choice` says), with the provider's SDK (`sdk_module`, from the launcher's `sdk_extra`
    requirements) when the head lacks it. Returns the wheel and "reused" or "installed";
    raises LauncherError naming what the head lacks."""
    wheel = build_wheel()
    probe = runner.run(_probe_script(wheel.digest, choice), env)
    python, tried = parse_python(probe.output_tail)
    if python is None:
        if not tried:
            detail = (probe.output_tail.strip().splitlines() or [f"exit {probe.exit_code}"])[-1]
            raise LauncherError(f"could not look for Python on the head: {detail}")
        what = (
            f"provider.head_python ({choice.explicit}) cannot import Ray there"
            if choice.explicit
            else f"no Python there has Ray (tried {', '.join(tried)})"
        )
        raise LauncherError(
            f"could not install the launcher on the head: {what}; {choice.advice()}"
        )
    if "@@reuse yes" in probe.output_tail:
        return wheel, "reused"
    remote = f"~/.launcher/upload-{uuid.uuid4().hex[:12]}/{wheel.path.name}"
    runner.put(str(wheel.path), remote)
    modules = (sdk_module,) if sdk_module else ()
    requirements = _requirements(sdk_extra) if sdk_extra and sdk_module else []
    script = _install_script(
        runner.remote_path(remote), wheel.digest, python, choice.digest, modules, requirements
    )
    result = runner.run(script, env)
    if not result.ok:
        last = (result.output_tail.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
        raise LauncherError(
            f"could not install the launcher on the head with {python}: {last}; {choice.advice()}"
        )
    return wheel, "installed"


# What the launcher imports on a run's controller (launcher/runs/controller.py): no Ray.
CONTROLLER_NEEDED = ("launcher.cli.main", "yaml", "jsonschema", "paramiko", "click", "rich")


def install_on_controller(
    runner: CommandRunner,
    venv_in_home: str,
    python: str | None,
    sdk_module: str | None = None,
    sdk_extra: str | None = None,
    *,
    name: str = "the controller",
) -> tuple[str, str]:
    """Install the running launcher on a run's controller (`name`) in `~/venv_in_home`, over
    `python` (the one the config names; else `python3` there), with the provider's SDK
    from pip when that Python lacks it. The controller needs no Ray. Returns the venv's
    interpreter and "reused" or "installed"; LauncherError naming what is wrong (a
    connection lost on the way: naming the controller, not its Python)."""
    wheel = build_wheel()
    venv = f"$HOME/{venv_in_home}"
    chosen = python or "python3"
    word = f'"$HOME"/{shlex.quote(chosen[2:])}' if chosen.startswith("~/") else shlex.quote(chosen)
    version_check = shlex.quote("import sys; sys.exit(sys.version_info < (3, 11))")
    probe = runner.run(
        f'PY=$(command -v {word}) || {{ echo "@@nopython"; exit 3; }}; '
        f'"$PY" -c {version_check} || {{ echo "@@old"; exit 3; }}; echo "@@python $PY"; '
        f'[ "$(cat "{venv}/.launcher-digest" 2>/dev/null)" = {wheel.digest} ] && '
        f'[ "$(cat "{venv}/.launcher-python" 2>/dev/null)" = "$PY" ] && '
        f'[ -x "{venv}/bin/python" ] && echo "@@reuse yes"; true'
    )
    _reached(probe, name)
    found, _ = parse_python(probe.output_tail)
    if found is None and "@@nopython" not in probe.output_tail and "@@old" not in probe.output_tail:
        raise LauncherError(f"could not look for Python on the controller {name}: {_last(probe)}")
    if found is None:
        why = "is older than 3.11" if "@@old" in probe.output_tail else "is not there"
        raise LauncherError(
            f"could not install the launcher on the controller: {chosen} {why}; set "
            "metadata.launcher.recover.controller.python to a Python 3.11+ there"
        )
    interpreter = runner.remote_path(f"~/{venv_in_home}/bin/python")
    if "@@reuse yes" in probe.output_tail:
        return interpreter, "reused"
    remote = f"~/{venv_in_home}.upload-{uuid.uuid4().hex[:12]}/{wheel.path.name}"
    runner.put(str(wheel.path), remote)
    modules = (sdk_module,) if sdk_module else ()
    requirements = [*_requirements(), *(_requirements(sdk_extra) if sdk_extra else [])]
    script = _install_script(
        runner.remote_path(remote),
        wheel.digest,
        found,
        "controller",
        modules,
        requirements,
        venv=venv,
        needed=CONTROLLER_NEEDED,
        with_ray=False,
    )
    result = runner.run(script)
    _reached(result, name)
    if not result.ok:
        raise LauncherError(
            f"could not install the launcher on the controller with {found}: {_last(result)}; set "
            "metadata.launcher.recover.controller.python to a Python 3.11+ there that has "
            "the launcher's dependencies"
        )
    return interpreter, "installed"


def _reached(result: CommandResult, name: str) -> None:
    """LauncherError naming the controller when `result` is a connection that failed (exit
    255, as SSH's, with the runner's word on the connection), not the command's own end."""
    if result.exit_code == SSH_CONNECTION_FAILED:
        raise LauncherError(f"could not reach the controller {name}: {_last(result)}")


def _last(result: CommandResult) -> str:
    return (result.output_tail.strip().splitlines() or [f"exit {result.exit_code}"])[-1]


SSH_CONNECTION_FAILED = 255  # SSHRunner.run's exit code for a connection that kept dropping
HEAD_KEY = "~/.launcher/head/ssh-key"


def place_ssh_access(
    runner: CommandRunner, env: dict[str, str], cluster_name: str, key: str | None
) -> str | None:
    """Give the head what it needs to reach the workers over SSH as the launcher does: the
    private key (when the config names one) and the host keys pinned so far, merged into
    the head's own known_hosts. Returns the key's path on the head."""
    known = known_hosts_path(cluster_name)
    head_known = f"~/.launcher/clusters/{cluster_name}/known_hosts"
    # What was placed last time is remembered on the head: an unchanged key and set of
    # host keys are not copied again (a no-op `up` runs this every time).
    digest = hashlib.sha256()
    for path in (known, Path(key).expanduser() if key else None):
        digest.update(path.read_bytes() if path is not None and path.exists() else b"-")
    stamp = f"~/.launcher/head/access-{digest.hexdigest()[:16]}"
    if runner.run(f"test -f {stamp}", env).ok:
        return runner.remote_path(HEAD_KEY) if key else None
    if known.exists():
        runner.put(str(known), f"{head_known}.new")
        merged = runner.run(
            f"cd ~/.launcher/clusters/{shlex.quote(cluster_name)} && touch known_hosts && "
            "sort -u known_hosts known_hosts.new > known_hosts.tmp && chmod 600 known_hosts.tmp "
            "&& mv known_hosts.tmp known_hosts && rm -f known_hosts.new",
            env,
        )
        if not merged.ok:
            raise LauncherError(f"could not place the pinned host keys on the head: {merged}")
    placed = None
    if key:
        runner.put(str(Path(key).expanduser()), HEAD_KEY)
        runner.run(f"chmod 600 {HEAD_KEY}", env)
        placed = runner.remote_path(HEAD_KEY)
    runner.run(f"rm -f ~/.launcher/head/access-*; touch {stamp}", env)
    return placed
