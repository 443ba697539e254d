#!/usr/bin/env python3
"""A STAND-IN for a container engine's command line (`docker`, `podman`), for tests only.

For machines without a container engine: there the container tests install this script as
`docker` and `podman` on the PATH of their isolated SSH hosts (fakes/hosts/ssh.py); where
podman is installed, tests/test_podman.py runs the same flows against it instead.
Everything else in those tests is real: sshd, Ray, the launcher. This script implements
only the commands the launcher uses, with docker's exit codes and messages where they
matter, and refuses anything else loudly:

  pull IMAGE                      records the image (any name "pulls")
  image inspect [--format F] IMG  fails for an image never pulled
  [container] inspect [--format F] NAME
  run -d --name NAME [options] IMAGE CMD...   records the container; refuses a taken name
  exec [-i] [-t] [-e K=V]... [-w DIR] NAME CMD...
  stop NAME, rm [-f] NAME

"Inside the container" means: a command run by `exec` runs on the host, as the same user,
but with the environment of the image and of `run -e`/`exec -e` only (not the caller's),
HOME and the working directory set to the container's home (`<state>/home`, the image's
HOME as `image inspect` reports it), so files put "into the container" are not in the
host's home. The image's environment is what `pull` saw (the host's PATH, which has the
test's Python and Ray: the "image" ships them) and its shell rc files put that PATH back
after a login shell's /etc/profile. `-v SRC:DST` mounts under the container's home become
symlinks to SRC. Processes started by `exec` carry FAKE_DOCKER_CONTAINER=NAME in their
environment, and `stop`/`rm` kill every process that does, as an engine ends a container's
processes. A container stops with its machine: one started in an earlier boot of the host
(another PID 1: each boot of a fakes/hosts/ssh.py host has a PID namespace of its own) is
reported exited, as docker reports a container without a restart policy after a reboot. A
container on the host's network (`--net=host`) reaches what the host reaches, on EC2 the
instance metadata service and its credentials; the AWS test hosts stand that in with AWS_*
variables naming files on the host (tests/test_aws_containers.py), so `run` passes the
caller's AWS_* variables into such a container's environment. The container's home is emptied
when it is removed, as a new container starts from the image. One container at a time per
host (they would share the home).

State lives in $FAKE_DOCKER_ROOT, else `fake-docker` in the user's home directory from the
password database (not $HOME, which is the container's inside one). Every invocation is
appended to `calls.log` there as one JSON line: {"engine": ..., "argv": [...]}.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import re
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARKER = "FAKE_DOCKER_CONTAINER"
# `run` options that take a value (the next argument unless written --opt=value).
VALUE_OPTIONS = {
    "--name", "--label", "-l", "-v", "--volume", "-e", "--env", "--shm-size", "--gpus",
    "--ulimit", "--runtime", "--device", "--network", "--net", "--user", "-u", "-w",
    "--workdir", "--entrypoint", "--cap-add", "--ipc", "--pid", "--memory", "-m", "--cpus",
    "--mount", "--add-host", "--hostname", "-h", "-p", "--publish", "--privileged-mode",
}  # fmt: skip
FLAG_OPTIONS = {"-d", "--detach", "--rm", "-i", "-t", "-it", "-ti", "--init", "--privileged"}


class Refused(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def state_root() -> Path:
    given = os.environ.get("FAKE_DOCKER_ROOT")
    return Path(given) if given else Path(pwd.getpwuid(os.getuid()).pw_dir) / "fake-docker"


class Engine:
    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.home = root / "home"
        self.containers = root / "containers"
        self.images_file = root / "images.json"
        self.containers.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with (self.root / "lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # -- state --------------------------------------------------------------------------
    def images(self) -> dict[str, Any]:
        data: dict[str, Any] = (
            json.loads(self.images_file.read_text()) if self.images_file.exists() else {}
        )
        return data

    def image(self, name: str) -> dict[str, Any]:
        found = self.images().get(name)
        if found is None:
            raise Refused(f"Error: No such image: {name}")
        return dict(found)

    def container(self, name: str) -> dict[str, Any]:
        path = self.containers / f"{name}.json"
        if not path.exists():
            raise Refused(f"Error: No such container: {name}")
        data: dict[str, Any] = json.loads(path.read_text())
        if data["running"] and data.get("boot") != _boot():  # the machine restarted since
            data.update(running=False, status="exited")
        return data

    def save(self, record: dict[str, Any]) -> None:
        (self.containers / f"{record['name']}.json").write_text(json.dumps(record))

    def inspect_object(self, record: dict[str, Any]) -> dict[str, Any]:
        return {
            "Id": record["id"],
            "Name": "/" + record["name"],
            "State": {"Running": record["running"], "Status": record["status"]},
            "Config": {
                "Image": record["image"],
                "Labels": record["labels"],
                "Env": record["env"],
                "Cmd": record["command"],
            },
            "HostConfig": {"options": record["options"]},
            "Mounts": [{"Source": s, "Destination": d} for s, d in record["mounts"]],
        }

    # -- commands -----------------------------------------------------------------------
    def pull(self, args: list[str]) -> int:
        image = _one(args, "pull IMAGE")
        with self.locked():
            self._pull(image)
        print(f"{image}: pulled (fake)")
        return 0

    def _pull(self, image: str) -> None:
        images = self.images()
        images[image] = {"env": [f"PATH={os.environ.get('PATH', '')}", f"HOME={self.home}"]}
        self.images_file.write_text(json.dumps(images))

    def image_inspect(self, args: list[str]) -> int:
        template, rest = _format_option(args)
        image = _one(rest, "image inspect IMAGE")
        found = self.image(image)
        obj = {"RepoTags": [image], "Config": {"Env": found["env"]}}
        print(render(template, obj) if template else json.dumps([obj]))
        return 0

    def inspect(self, args: list[str]) -> int:
        template, rest = _format_option(args)
        obj = self.inspect_object(self.container(_one(rest, "inspect NAME")))
        print(render(template, obj) if template else json.dumps([obj]))
        return 0

    def run(self, args: list[str]) -> int:
        options, image, command = _split_run(args)
        name = next((v for k, v in options if k == "--name"), None)
        detached = ("-d", "") in options or ("--detach", "") in options
        if name is None or not detached:
            raise Refused("fake docker: only `run -d --name NAME ...` is modelled", 2)
        with self.locked():
            if (self.containers / f"{name}.json").exists():
                raise Refused(
                    f'docker: Error response from daemon: Conflict. The container name "/{name}"'
                    " is already in use.",
                    125,
                )
            others = [p.stem for p in self.containers.glob("*.json")]
            if others:
                raise Refused(f"fake docker: one container per host ({others[0]} exists)", 125)
            if image not in self.images():
                print(f"Unable to find image '{image}' locally", file=sys.stderr)
                self._pull(image)
            image_env = self.image(image)["env"]
            shutil.rmtree(self.home, ignore_errors=True)
            self.home.mkdir(parents=True)
            path = next((e[5:] for e in image_env if e.startswith("PATH=")), "/usr/bin:/bin")
            for rc in (".profile", ".bashrc"):  # the image's own shell setup
                (self.home / rc).write_text(f"export PATH={_sh_quote(path)}\n")
            mounts = [self._mount(value) for key, value in options if key in ("-v", "--volume")]
            record = {
                "id": uuid.uuid4().hex,
                "name": name,
                "image": image,
                "options": [[k, v] for k, v in options],
                "labels": dict(_pair(v) for k, v in options if k in ("--label", "-l")),
                "env": image_env
                + _host_network_env(options)
                + [v for k, v in options if k in ("-e", "--env")],
                "mounts": mounts,
                "command": command,
                "running": True,
                "status": "running",
                "boot": _boot(),
            }
            self.save(record)
        print(record["id"])
        return 0

    def _mount(self, value: str) -> list[str]:
        source, _, destination = value.partition(":")
        destination = destination.split(":", 1)[0]
        inside = Path(destination)
        if not inside.is_relative_to(self.home):
            raise Refused(f"fake docker: mounts only under the container's home ({self.home})", 2)
        Path(source).mkdir(parents=True, exist_ok=True)
        inside.parent.mkdir(parents=True, exist_ok=True)
        inside.symlink_to(source)
        return [source, destination]

    def exec(self, args: list[str]) -> int:
        env_args: list[str] = []
        workdir: str | None = None
        terminal = False
        while args and args[0].startswith("-"):
            flag = args.pop(0)
            if flag in ("-i", "--interactive"):
                continue
            if flag in ("-t", "--tty", "-it", "-ti"):
                terminal = True
            elif flag in ("-e", "--env"):
                env_args.append(args.pop(0))
            elif flag in ("-w", "--workdir"):
                workdir = args.pop(0)
            else:
                raise Refused(f"fake docker: exec option {flag} is not modelled", 2)
        if len(args) < 2:
            raise Refused("fake docker: exec [options] NAME COMMAND...", 2)
        name, command = args[0], args[1:]
        record = self.container(name)
        if not record["running"]:
            raise Refused(f"Error response from daemon: container {record['id']} is not running", 1)
        if terminal and not sys.stdin.isatty():
            raise Refused("the input device is not a TTY", 1)
        env = dict(_pair(item) for item in record["env"])
        for item in env_args:
            key, value = _pair(item) if "=" in item else (item, os.environ.get(item, ""))
            env[key] = value
        env[MARKER] = name
        if terminal:
            env.setdefault("TERM", os.environ.get("TERM", "xterm"))
        os.chdir(workdir or env.get("HOME", str(self.home)))
        try:
            os.execvpe(command[0], command, env)
        except OSError as exc:
            raise Refused(f"OCI runtime exec failed: {command[0]}: {exc.strerror}", 126) from exc

    def stop(self, args: list[str]) -> int:
        name = _one([a for a in args if not a.startswith("-")], "stop NAME")
        with self.locked():
            record = self.container(name)
            _kill(name, signal.SIGTERM, grace=2.0)
            record.update(running=False, status="exited")
            self.save(record)
        print(name)
        return 0

    def rm(self, args: list[str]) -> int:
        force = any(a in ("-f", "--force") for a in args)
        name = _one([a for a in args if not a.startswith("-")], "rm [-f] NAME")
        with self.locked():
            record = self.container(name)
            if record["running"] and not force:
                raise Refused(
                    f"Error response from daemon: You cannot remove a running container "
                    f"{record['id']}. Stop the container before attempting removal or force "
                    "remove",
                    1,
                )
            _kill(name, signal.SIGKILL, grace=0.0)
            (self.containers / f"{name}.json").unlink()
            shutil.rmtree(self.home, ignore_errors=True)
        print(name)
        return 0


def _host_network_env(options: list[tuple[str, str]]) -> list[str]:
    """The caller's AWS_* variables if the container shares the host's network."""
    if not any(k in ("--net", "--network") and v == "host" for k, v in options):
        return []
    return [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("AWS_")]


def _boot() -> str:
    """This boot of the machine: its PID namespace and when its PID 1 started (the kernel
    reuses a gone namespace's number)."""
    started = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19]
    return f"{os.readlink('/proc/self/ns/pid')} {started}"


def _one(args: list[str], usage: str) -> str:
    if len(args) != 1:
        raise Refused(f"fake docker: usage: {usage}", 2)
    return args[0]


def _pair(item: str) -> tuple[str, str]:
    key, _, value = item.partition("=")
    return key, value


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _format_option(args: list[str]) -> tuple[str | None, list[str]]:
    template, rest = None, []
    items = iter(args)
    for item in items:
        if item in ("--format", "-f"):
            template = next(items)
        elif item.startswith("--format="):
            template = item.split("=", 1)[1]
        else:
            rest.append(item)
    return template, rest


def _split_run(args: list[str]) -> tuple[list[tuple[str, str]], str, list[str]]:
    options: list[tuple[str, str]] = []
    items = list(args)
    while items and items[0].startswith("-"):
        item = items.pop(0)
        key, has_value, value = item.partition("=")
        if item in FLAG_OPTIONS:
            options.append((item, ""))
        elif has_value and key.startswith("--"):
            options.append((key, value))
        elif item in VALUE_OPTIONS:
            if not items:
                raise Refused(f"fake docker: {item} needs a value", 2)
            options.append((item, items.pop(0)))
        else:
            raise Refused(f"fake docker: run option {item} is not modelled", 2)
    if not items:
        raise Refused("fake docker: run [options] IMAGE [COMMAND...]", 2)
    return options, items[0], items[1:]


_FIELD = re.compile(r"\{\{\s*(json\s+)?((?:\.[A-Za-z]+)+)\s*\}\}")


def render(template: str, obj: dict[str, Any]) -> str:
    """The subset of Go templates the launcher uses: {{.A.B}} and {{json .A.B}}."""

    def field(match: re.Match[str]) -> str:
        value: Any = obj
        for part in match.group(2).split(".")[1:]:
            value = value.get(part) if isinstance(value, dict) else None
        if match.group(1):
            return json.dumps(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        return "<no value>" if value is None else str(value)

    rest = _FIELD.sub(field, template)
    if "{{" in rest:
        raise Refused(f"fake docker: template {template!r} is not modelled", 2)
    return rest


def _container_pids(name: str) -> list[int]:
    wanted = f"{MARKER}={name}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def _kill(name: str, sig: signal.Signals, grace: float) -> None:
    """End the container's processes: `sig`, then SIGKILL after `grace` seconds."""
    for pid in _container_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + grace
    while _container_pids(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in _container_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _container_pids(name) and time.monotonic() < deadline:
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    engine = Engine(Path(argv[0]).name, state_root())
    with (engine.root / "calls.log").open("a") as log:
        log.write(json.dumps({"engine": engine.name, "argv": argv[1:]}) + "\n")
    args = argv[1:]
    commands = {
        "pull": engine.pull,
        "run": engine.run,
        "exec": engine.exec,
        "stop": engine.stop,
        "rm": engine.rm,
        "inspect": engine.inspect,
    }
    try:
        if args[:2] == ["image", "inspect"]:
            return engine.image_inspect(args[2:])
        if args[:2] == ["container", "inspect"]:
            return engine.inspect(args[2:])
        if args and args[0] in commands:
            return commands[args[0]](args[1:])
        raise Refused(f"fake docker: `{' '.join(args[:2])}` is not modelled", 2)
    except Refused as refused:
        print(refused, file=sys.stderr)
        return refused.code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
