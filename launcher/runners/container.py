"""Setup and Ray inside a container on each node (the `docker:` section of the cluster YAML).

The container runs on the node's host, started once with `docker run -d --net=host` (or
`podman`) and a command that only keeps it alive; every command then runs in it with
`docker exec`, with the node's environment passed as `-e NAME=value` arguments (quoted, never
spliced into the command). `ContainerRunner` wraps the host's own `CommandRunner` and is one
itself, so the updater, `exec`, `submit`, `attach`, `rsync-*` and the head's autoscaler use
the container without knowing it is there. Initialization commands stay on the host.

Files go in by way of the host: copied to a staging directory there
(`~/.launcher/container-files/NAME/...`, so rsync sends only changes), then streamed into the
container through `tar` under `docker exec -i`, which writes them as the container's user;
`~` means the container user's home.

The pure parts (which image and options a node gets, the `docker run` and `docker exec`
command lines, whether a running container can be kept) are functions of the config and of
what the host reports, so they are tested without an engine.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.runners.base import CommandResult, CommandRunner, OutputSink, expand_home
from launcher.runners.ray_node import stop_script

LABEL = "launcher.container"  # on every container the launcher starts: a digest of its spec
STAGE_DIR = "~/.launcher/container-files"
# The container's own command (its PID 1): it only waits, as `tail -f /dev/null` would, but
# also reaps the processes left to it (a daemon started by `exec` that exits would otherwise
# stay a zombie, which `kill -0` still finds) and exits on SIGTERM (a PID 1 ignores signals
# it has no handler for, so `stop` and podman's `rm -f` would wait 10 s, then SIGKILL it).
KEEP_ALIVE = ("sh", "-c", "trap 'exit 0' TERM INT; while :; do tail -f /dev/null & wait $!; done")
# Like Ray: the object store takes 30% of available memory (at most 200 GB) and lives in
# /dev/shm, so /dev/shm is sized 10% above that unless the user sized it.
_OBJECT_STORE_SHARE = 0.3
_OBJECT_STORE_CAP_BYTES = 200 * 10**9
_SHM_MARGIN = 1.1
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU_OPTIONS = ("--gpus", "--runtime", "nvidia.com/gpu")


class ContainerError(LauncherError):
    """A node's container could not be started (no engine, a pull or `run` failed)."""


@dataclass(frozen=True)
class ContainerSpec:
    """The container one node runs in, as the config asks for it.

    `run_options` are the user's `run_options` strings, passed to the shell as written (as
    Ray does: `--ulimit nofile=65536:65536` is two words). `mounts` are directories of the
    host (`~/...`, read-only with a `:ro` suffix) the container sees at the same place under
    its own home.
    """

    engine: str  # "docker" or "podman"
    name: str
    image: str
    pull_before_run: bool
    run_options: tuple[str, ...] = ()
    detect_gpus: bool = True
    detect_shm: bool = True
    mounts: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """Identifies what the container was started from: a running container whose label
        holds another digest is replaced."""
        fields = [self.engine, self.image, list(self.run_options), list(self.mounts)]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def container_for(
    config: ClusterConfig, node_type: str, *, head: bool, mounts: tuple[str, ...] = ()
) -> ContainerSpec | None:
    """The container a node of `node_type` runs in, or None when it runs on its host.

    As in Ray: the head uses `head_image` (else `image`) and `head_run_options`; a worker
    uses its type's `docker.worker_image`, else `worker_image`, else `image`, and its type's
    `worker_run_options` (else the cluster-wide ones), after `run_options` in both cases.
    """
    docker = config.docker
    if not docker.container_name:
        return None
    kind = None if head else config.node_types[node_type].docker
    if head:
        image = docker.head_image or docker.image
        options = docker.run_options + docker.head_run_options
        pull = docker.pull_before_run
    else:
        image = (kind.worker_image if kind else None) or docker.worker_image or docker.image
        extra = kind.worker_run_options if kind and kind.worker_run_options else None
        options = docker.run_options + (extra or docker.worker_run_options)
        pull = docker.pull_before_run
        if kind is not None and kind.pull_before_run is not None:
            pull = kind.pull_before_run
    if not image:
        return None
    written = " ".join(options)
    return ContainerSpec(
        engine="podman" if docker.use_podman else "docker",
        name=docker.container_name,
        image=image,
        pull_before_run=pull,
        run_options=options,
        detect_gpus=not docker.disable_automatic_runtime_detection
        and not any(flag in written for flag in _GPU_OPTIONS),
        detect_shm=not docker.disable_shm_size_detection and "--shm-size" not in written,
        mounts=mounts,
    )


# -- what the host reports --------------------------------------------------------------------
@dataclass(frozen=True)
class HostFacts:
    """What `docker run` depends on besides the config, as read on the host."""

    host_home: str
    image_home: str = "/root"  # HOME in the image's environment (Ray's default: /root)
    gpus: bool = False  # nvidia-smi sees GPUs and the NVIDIA container toolkit is there
    mem_available_kb: int | None = None


def facts_script(spec: ContainerSpec) -> str:
    """Shell for the host: one `@@name value` line per fact the spec needs."""
    lines = ['echo "@@home $HOME"']
    if spec.detect_gpus:
        toolkit = "{ command -v nvidia-container-runtime-hook || command -v nvidia-ctk; }"
        lines.append(f'echo "@@gpus $( (nvidia-smi -L && {toolkit}) >/dev/null 2>&1 && echo yes)"')
    if spec.detect_shm:
        lines.append("echo \"@@mem $(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)\"")
    if spec.mounts:
        env = f"{spec.engine} image inspect --format {shlex.quote('{{json .Config.Env}}')}"
        lines.append(f'echo "@@env $({env} {shlex.quote(spec.image)} 2>/dev/null)"')
    return "; ".join(lines)


def parse_facts(output: str) -> HostFacts:
    found = _markers(output)
    image_home = "/root"
    try:
        for item in json.loads(found.get("env") or "[]") or []:
            if isinstance(item, str) and item.startswith("HOME="):
                image_home = item[len("HOME=") :].rstrip("/") or "/"
    except ValueError:
        pass
    memory = found.get("mem", "")
    return HostFacts(
        host_home=found.get("home", "").rstrip("/") or "/",
        image_home=image_home,
        gpus=found.get("gpus") == "yes",
        mem_available_kb=int(memory) if memory.isdigit() else None,
    )


def _markers(output: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        if line.startswith("@@"):
            name, _, value = line[2:].partition(" ")
            found[name] = value.strip()
    return found


# -- the command lines ------------------------------------------------------------------------
def detected_options(spec: ContainerSpec, facts: HostFacts) -> tuple[str, ...]:
    """Options the host's hardware calls for: GPUs when it has them, and /dev/shm sized for
    Ray's object store."""
    options: tuple[str, ...] = ()
    if spec.detect_gpus and facts.gpus:
        options += (
            ("--gpus", "all") if spec.engine == "docker" else ("--device", "nvidia.com/gpu=all")
        )
    if spec.detect_shm and facts.mem_available_kb:
        store = facts.mem_available_kb * 1024 * _OBJECT_STORE_SHARE
        options += (f"--shm-size={int(min(store * _SHM_MARGIN, _OBJECT_STORE_CAP_BYTES))}b",)
    return options


def run_command(spec: ContainerSpec, facts: HostFacts) -> str:
    """`docker run -d --name NAME --net=host ... IMAGE tail -f /dev/null` as a shell line."""
    words = [spec.engine, "run", "-d", "--name", spec.name, "--net=host"]
    words += ["--label", f"{LABEL}={spec.digest}"]
    words += ["-e", "LC_ALL=C.UTF-8", "-e", "LANG=C.UTF-8"]  # Ray's CLI needs a UTF-8 locale
    for mount in spec.mounts:
        path, read_only, _ = mount.partition(":ro")
        inside = expand_home(path, lambda: facts.image_home)
        outside = expand_home(path, lambda: facts.host_home)
        words += ["-v", f"{outside}:{inside}{':ro' if read_only else ''}"]
    words += detected_options(spec, facts)
    tail = [spec.image, *KEEP_ALIVE]
    return " ".join([shlex.join(words), *spec.run_options, shlex.join(tail)])


# `sh -c _KILLED_AFTER SECONDS ARGV...`: ARGV, killed with all it started after SECONDS where
# the image has `timeout` (GNU's kills its whole process group), else ARGV unbounded.
_KILLED_AFTER = (
    'if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL "$0" "$@"; fi; exec "$@"'
)
# A bounded command's own limit in the container, beyond the one the runner keeps: stopping
# `docker exec` does not stop what it started in the container; this does, a little later.
IN_CONTAINER_GRACE_S = 2.0


def exec_argv(
    spec: ContainerSpec,
    command: str,
    env: Mapping[str, str],
    *,
    terminal: bool = False,
    stdin: bool = False,
    limit_s: float | None = None,
) -> list[str]:
    """`docker exec` running `command` in a login shell in the container (as commands run
    on hosts over SSH), with `env` as `-e NAME=value` arguments; killed in the container
    after `limit_s` seconds when given."""
    flags = ["-it"] if terminal else (["-i"] if stdin else [])
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not valid")
        flags += ["-e", f"{name}={value}"]
    shell = ["bash", "--login", "-c", "-i", command]
    if limit_s is not None:
        shell = ["sh", "-c", _KILLED_AFTER, str(math.ceil(limit_s)), *shell]
    return [spec.engine, "exec", *flags, spec.name, *shell]


def pull_command(spec: ContainerSpec) -> str:
    image = shlex.quote(spec.image)
    if spec.pull_before_run:
        return f"{spec.engine} pull {image}"
    return f"{spec.engine} image inspect {image} >/dev/null 2>&1 || {spec.engine} pull {image}"


def stop_command(spec: ContainerSpec | None, ray_paths: Sequence[str] = ()) -> str:
    """What frees a machine that outlives its node (on-prem): Ray stopped (with the `ray`
    of `ray_paths`, the start commands', when they name one; see `ray_node.stop_script`),
    or with a container, Ray stopped in it and the container removed (Ray and all else in
    it end); then a check on the machine that no Ray process is left (exit 4 naming them)."""
    on_host = stop_script(ray_paths)
    if spec is None:
        return on_host
    inside = shlex.join(exec_argv(spec, stop_script(ray_paths), {}))
    remove = f"{spec.engine} rm -f {shlex.quote(spec.name)}"
    return f"{inside} >/dev/null 2>&1; {remove} >/dev/null 2>&1\n{on_host}"


# -- keeping or replacing a running container -------------------------------------------------
_STATE_FORMAT = "{{.State.Running}}\t{{.Config.Image}}\t{{json .Config.Labels}}"


def state_script(spec: ContainerSpec) -> str:
    engine, name = spec.engine, shlex.quote(spec.name)
    return (
        f"command -v {engine} >/dev/null 2>&1 || {{ echo '@@engine missing'; exit 0; }}; "
        f"out=$({engine} container inspect --format {shlex.quote(_STATE_FORMAT)} {name} "
        '2>/dev/null) && echo "@@state $out" || echo "@@state absent"'
    )


@dataclass(frozen=True)
class ContainerState:
    running: bool
    image: str
    label: str | None  # this launcher's digest label, None on containers it did not start


def parse_state(output: str) -> ContainerState | None:
    """The state line of `state_script`, or None when there is no such container."""
    line = _markers(output).get("state", "absent")
    if line == "absent":
        return None
    running, _, rest = line.partition("\t")
    image, _, labels_json = rest.partition("\t")
    try:
        labels = json.loads(labels_json) or {}
    except ValueError:
        labels = {}
    label = labels.get(LABEL) if isinstance(labels, dict) else None
    return ContainerState(running == "true", image, label if isinstance(label, str) else None)


def same_image(reported: str, wanted: str) -> bool:
    """Whether the image an engine reports for a container is the one `wanted` names.
    Engines report a reference they completed: podman the registry it pulled from
    (`registry.example:5000/ray:1`, `localhost/ray:1`), docker `docker.io/library/`, either
    a `:latest` tag. What `wanted` leaves out is taken out of `reported` too."""
    return _reference(reported, keep_registry=_registry(wanted) is not None) == _reference(
        wanted, keep_registry=True
    )


def _as_written(reported: str, wanted: str) -> str:
    """`reported` without the registry an engine added, when `wanted` names none."""
    registry = _registry(reported)
    if registry is None or _registry(wanted) is not None:
        return reported
    name = reported[len(registry) + 1 :]
    return (
        name[len("library/") :] if registry == "docker.io" and name.startswith("library/") else name
    )


def _registry(reference: str) -> str | None:
    first, slash, _ = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def _reference(reference: str, *, keep_registry: bool) -> str:
    registry = _registry(reference)
    name = reference
    if registry is not None:
        name = reference[len(registry) + 1 :]
        if registry == "docker.io" and name.startswith("library/"):
            name = name[len("library/") :]
        if keep_registry and registry != "docker.io":
            name = f"{registry}/{name}"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        name += ":latest"
    return name


class StartAction(StrEnum):
    REUSE = "reuse"
    START = "start"
    REPLACE = "replace"


@dataclass(frozen=True)
class StartPlan:
    action: StartAction
    reason: str


def decide_start(state: ContainerState | None, spec: ContainerSpec) -> StartPlan:
    """Keep a running container started from this same spec; replace any other container
    of that name (stopped, another image, other options, not started by the launcher)."""
    if state is None:
        return StartPlan(StartAction.START, "no container yet")
    if state.running and state.label == spec.digest:
        return StartPlan(StartAction.REUSE, "running, started from this config")
    if not state.running:
        reason = "it was stopped"
    elif state.label is None:
        reason = "it was not started by the launcher"
    elif not same_image(state.image, spec.image):
        reason = f"the image changed from {_as_written(state.image, spec.image)} to {spec.image}"
    else:
        reason = "its run options changed"
    return StartPlan(StartAction.REPLACE, reason)


# -- the runner ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ContainerStart:
    fresh: bool  # a new container: nothing of an earlier setup is in it
    message: str


class ContainerRunner:
    """A `CommandRunner` for a node whose commands run in a container on its host."""

    def __init__(self, host: CommandRunner, spec: ContainerSpec) -> None:
        self.host = host
        self.spec = spec
        self._home: str | None = None

    def check_ready(self) -> str | None:
        # The host accepting commands is what the updater waits for; it starts the
        # container itself (`ensure`).
        return self.host.check_ready()

    def ensure(self) -> ContainerStart:
        """Start the container, keep it if it runs from the same spec, or replace it.
        Raises ContainerError."""
        spec = self.spec
        probe = self.host.run(state_script(spec))
        if _markers(probe.output_tail).get("engine") == "missing":
            raise ContainerError(
                f"{spec.engine} is not installed on the host; install it there (Ray's docs "
                "show initialization_commands that do), or remove the docker section"
            )
        state = parse_state(probe.output_tail)
        plan = decide_start(state, spec)
        if plan.action is StartAction.REUSE:
            return ContainerStart(False, f"container {spec.name} reused ({spec.image})")
        self._must(pull_command(spec), f"could not get image {spec.image}")
        facts = parse_facts(self._must(facts_script(spec), "could not inspect the host"))
        if state is not None:
            self._must(f"{spec.engine} rm -f {shlex.quote(spec.name)}", "could not remove it")
        self._must(run_command(spec, facts), f"could not start container {spec.name}")
        self._home = None
        if plan.action is StartAction.START:
            return ContainerStart(True, f"container {spec.name} started ({spec.image})")
        return ContainerStart(True, f"container {spec.name} replaced: {plan.reason}")

    def _must(self, command: str, what: str) -> str:
        result = self.host.run(command)
        if not result.ok:
            last = (result.output_tail.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
            raise ContainerError(f"{what}: `{command}` failed: {last}")
        return result.output_tail

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
        limit = None if timeout is None or interactive else timeout + IN_CONTAINER_GRACE_S
        argv = exec_argv(
            self.spec,
            command,
            env or {},
            terminal=interactive,
            stdin=stdin is not None,
            limit_s=limit,
        )
        line = shlex.join(argv)
        return self.host.run(line, timeout=timeout, echo=echo, interactive=interactive, stdin=stdin)

    def remote_path(self, path: str) -> str:
        expanded = expand_home(path, self._container_home)
        return expanded if expanded.startswith("/") else f"{self._container_home()}/{expanded}"

    def _container_home(self) -> str:
        if self._home is None:
            argv = [self.spec.engine, "exec", self.spec.name, "printenv", "HOME"]
            result = self.host.run(shlex.join(argv))
            lines = [line for line in result.output_tail.splitlines() if line.startswith("/")]
            if not result.ok or not lines:
                raise OSError(
                    f"container {self.spec.name} does not answer ({result.output_tail.strip()})"
                )
            self._home = lines[-1].rstrip("/") or "/"
        return self._home

    def _stage(self, name: str) -> str:
        """A directory on the host for files on their way in or out (absolute)."""
        return self.host.remote_path(f"{STAGE_DIR}/{self.spec.name}{name}")

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        target = self.remote_path(remote)
        staged = self._stage(target)
        self.host.put(local, staged, excludes=excludes)
        if not target.endswith("/") and not local.endswith("/") and os.path.isfile(local):
            # One file to a file path: the staged file itself, under the same name.
            source_dir, entry = str(PurePosixPath(staged).parent), PurePosixPath(staged).name
            into = str(PurePosixPath(target).parent)
        else:
            # A directory (or a file into one): the staging directory's contents, which
            # rsync's rules made what the target should hold.
            source_dir, entry, into = staged.rstrip("/") or "/", ".", target.rstrip("/") or "/"
        extract = 'mkdir -p "$1" && tar --no-same-owner -xf - -C "$1"'
        receive = [self.spec.engine, "exec", "-i", self.spec.name, "sh", "-c", extract, "sh", into]
        script = (
            f"set -o pipefail; tar -C {shlex.quote(source_dir)} -cf - {shlex.quote(entry)} | "
            f"{shlex.join(receive)}"
        )
        result = self.host.run(script)
        if not result.ok:
            raise OSError(
                f"copying {local} into container {self.spec.name} at {target} failed: "
                f"{result.output_tail.strip()}"
            )

    def get(self, remote: str, local: str) -> None:
        source = self.remote_path(remote)
        staged = self._stage(f"/.out-{uuid.uuid4().hex[:8]}")
        if source.endswith("/"):
            directory, entry, fetched = source.rstrip("/") or "/", ".", staged + "/"
        else:
            path = PurePosixPath(source)
            directory, entry = str(path.parent), path.name
            fetched = f"{staged}/{path.name}"
        send = [self.spec.engine, "exec", self.spec.name, "tar", "-C", directory, "-cf", "-", entry]
        script = (
            f"set -o pipefail; mkdir -p {shlex.quote(staged)} && {shlex.join(send)} | "
            f"tar -xf - -C {shlex.quote(staged)}"
        )
        try:
            result = self.host.run(script)
            if not result.ok:
                raise OSError(
                    f"copying {source} out of container {self.spec.name} failed: "
                    f"{result.output_tail.strip()}"
                )
            self.host.get(fetched, local)
        finally:
            self.host.run(f"rm -rf {shlex.quote(staged)}")


def host_runner(runner: CommandRunner) -> CommandRunner:
    """The runner of the node's host itself (for what reaches the host, not the container:
    port forwarding over its SSH connection)."""
    return runner.host if isinstance(runner, ContainerRunner) else runner
