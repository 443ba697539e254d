"""What a run's controller is given from this machine besides the run: the provider's
credentials (as its spec declares them: launcher/providers/spec.py `ControllerCredentials`)
and the cluster file as the controller reads it.

Secrets reach the controller as files only: one 0600 file per credential file and an `env`
file of `export NAME='value'` lines, in a 0700 directory there, sourced by the shell that
starts the supervisor. They are never put on a command line (which the controller's process
list shows) nor written to a log.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launcher.errors import LauncherError, UsageError
from launcher.providers.spec import ProviderSpec

ENV_FILE = "env"
KEY_FILE = "ssh-key"
PUBLIC_KEY_FILE = "ssh-key.pub"


@dataclass(frozen=True)
class Credentials:
    """A provider's credentials on this machine: variables by name, and files by the
    variable that names their copy on the controller."""

    variables: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Path] = field(default_factory=dict)


def no_controller(spec: ProviderSpec) -> tuple[str, str] | None:
    """Why a cluster of `spec` cannot be supervised from a controller, and what to do
    instead; None when it can (its spec declares the credentials a controller needs)."""
    if spec.controller_credentials is not None:
        return None
    return (
        f"a {spec.title} cluster cannot be supervised from a controller: its nodes are "
        "processes of this machine, which a controller elsewhere cannot run",
        "remove the controller (`submit --recover --detach` supervises it from this machine)",
    )


def collect(spec: ProviderSpec, environ: Mapping[str, str], home: Path) -> Credentials:
    """The credentials `spec` declares, as they are here. UsageError for a provider that
    declares none (its nodes are processes of this machine)."""
    declared = spec.controller_credentials
    if declared is None:
        raise UsageError("; ".join(no_controller(spec) or ()))
    file_variables = {f.variable for f in declared.files}
    variables = {
        name: value
        for name, value in sorted(environ.items())
        if value
        and name not in file_variables
        and (name in declared.variables or name.startswith(declared.prefixes))
    }
    files: dict[str, Path] = {}
    for wanted in declared.files:
        named = environ.get(wanted.variable)
        if named:
            # KUBECONFIG may list several files: the first that exists is the one used.
            candidates = [Path(p).expanduser() for p in named.split(os.pathsep) if p]
        else:
            candidates = [home / d for d in wanted.defaults]
        found = next((p for p in candidates if p.is_file()), None)
        if found is not None:
            files[wanted.variable] = found
    return Credentials(variables, files)


def env_text(credentials: Credentials, secrets_dir: str) -> str:
    """The `env` file the supervisor's shell sources on the controller: the variables,
    and each file's variable naming its copy in `secrets_dir` (a path there)."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in credentials.variables.items()]
    lines += [
        f"export {variable}={shlex.quote(f'{secrets_dir}/{variable}')}"
        for variable in credentials.files
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def staged(credentials: Credentials, secrets_dir: str) -> Iterator[Path]:
    """A 0700 directory here holding what goes into the controller's secrets directory
    (`env`, and each credential file under its variable's name), each file 0600; deleted
    afterwards."""
    with tempfile.TemporaryDirectory(prefix="launcher-secrets-") as folder:
        root = Path(folder)
        root.chmod(0o700)
        _write_private(root / ENV_FILE, env_text(credentials, secrets_dir).encode())
        for variable, source in credentials.files.items():
            try:
                data = source.read_bytes()
            except OSError as exc:
                raise LauncherError(f"could not read {source} ({variable}): {exc}") from exc
            _write_private(root / variable, data)
        yield root


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def controller_yaml(
    text: str,
    *,
    private_key: str | None = None,
    public_key: str | None = None,
    mounts: Mapping[str, str] | None = None,
) -> str:
    """The cluster file as the controller reads it: without the controller itself (the
    supervisor there is that controller; its key file is this machine's), with
    `auth.ssh_private_key` / `ssh_public_key` naming the keys' copies there, and each file
    mount's source (`mounts`: remote path -> the copy's path there) the copy."""
    raw: Any = yaml.safe_load(text)
    if not isinstance(raw, dict):
        raise LauncherError("the cluster file is not a mapping")
    recover = ((raw.get("metadata") or {}).get("launcher") or {}).get("recover")
    if isinstance(recover, dict):
        recover.pop("controller", None)
    auth = raw.get("auth")
    for name, value in (("ssh_private_key", private_key), ("ssh_public_key", public_key)):
        if value is not None and isinstance(auth, dict):
            auth[name] = value
    file_mounts = raw.get("file_mounts")
    if mounts and isinstance(file_mounts, dict):
        raw["file_mounts"] = {k: mounts.get(k, v) for k, v in file_mounts.items()}
    return yaml.safe_dump(raw, sort_keys=False)
