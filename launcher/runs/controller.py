"""A recovering run supervised from a controller: an always-on machine the user names
(`metadata.launcher.recover.controller`, `submit --controller`), reached over SSH, as
SkyPilot's managed jobs run on a controller VM. The run then outlives the laptop that
started it: closed, asleep or gone, the controller replaces a lost head all the same.

The controller keeps a launcher home of its own, `~/.launcher-controller` (LAUNCHER_HOME of
every launcher command run there), laid out as this machine's (launcher/paths.py):

- `venv/`: the launcher itself (launcher/cluster/install.py), no Ray;
- `runs/CLUSTER/RUN/`: the run's record, script and driver log (store.py), `cluster.yaml`
  (the cluster file as the controller reads it) and `supervisor.log`;
- `clusters/CLUSTER/` (its logs aside), `keys/` (the keys the launcher made for the
  cluster) and `records/CLUSTER.json`: what `up` and `down` need;
- `secrets/CLUSTER/RUN/` (0700): the provider's credentials, 0600 files (controller_secrets.py),
  removed once the run has ended there.

The supervisor there is `launcher jobs supervise` started detached (setsid, stdin from
/dev/null, output to supervisor.log), with LAUNCHER_CONTROLLER naming the controller, so its
lease says "controller USER@HOST:PORT" and a laptop's `jobs list` sees it held (model.py).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import dataclasses
import getpass
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from launcher import secret_env
from launcher.config.loader import split_controller
from launcher.config.model import ClusterConfig, ControllerSettings
from launcher.errors import LauncherError
from launcher.ledger.store import record_path
from launcher.paths import cluster_dir, launcher_home
from launcher.providers.keyfiles import key_path
from launcher.providers.registry import provider_spec
from launcher.runners.known_hosts import KnownHosts
from launcher.runners.ssh import SSHRunner, SSHTarget
from launcher.runs import controller_secrets, store
from launcher.runs.model import CONTROLLER_ENV, Run, RunState

HOME = ".launcher-controller"  # under the controller user's home
VENV = f"{HOME}/venv"
SUPERVISOR_LOG = "supervisor.log"
_END = "@@launcher-controller-end"
# Exits 0 when the run record named by argv[1] says the run has ended.
_RUN_ENDED = (
    "import sys; from launcher.runs.model import Run; "
    "sys.exit(not Run.from_json(open(sys.argv[1]).read()).state.ended)"
)


class Controller:
    """One SSH connection to a run's controller, its host key pinned in
    `$LAUNCHER_HOME/controllers/known_hosts` (trusted on first contact, as the launcher
    does for a cluster's nodes)."""

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        folder = launcher_home() / "controllers"
        self.runner = SSHRunner(
            SSHTarget(
                settings.host, settings.ssh_user, settings.ssh_port, settings.ssh_private_key
            ),
            KnownHosts(folder / "known_hosts"),
            folder / f"{settings.host}.log",
        )
        self._home: str | None = None

    @property
    def name(self) -> str:
        return str(self.settings)

    @property
    def home(self) -> str:
        """The controller's launcher home, as a path there (asking it first reaches the
        controller: LauncherError naming it when it does not answer)."""
        if self._home is None:
            try:
                self._home = self.runner.remote_path(f"~/{HOME}")
            except (OSError, EOFError) as exc:
                raise LauncherError(f"could not reach the controller {self.name}: {exc}") from exc
        return self._home

    def run_dir(self, cluster_name: str, run_id: str) -> str:
        return f"{self.home}/{_in_home(store.run_dir(cluster_name, run_id))}"

    def capture(self, command: str, timeout: float = 60.0) -> str:
        """`command`'s output there; LauncherError when it fails or the controller is not
        reached."""
        try:
            code, output = self.runner.capture(command, timeout)
        except OSError as exc:
            raise LauncherError(f"could not reach the controller {self.name}: {exc}") from exc
        if code != 0:
            tail = (output.strip().splitlines() or [f"exit {code}"])[-1]
            raise LauncherError(f"on the controller {self.name}: {tail}")
        return output

    def close(self) -> None:
        self.runner.close()


def settings_from(
    text: str, base: ControllerSettings | None, default_key: str | None = None
) -> ControllerSettings:
    """A run's `controller` field ("USER@HOST:PORT") as settings, logging in with the key
    of `base` (the config's controller), else `default_key` (the cluster's)."""
    user, host, port = split_controller(text)
    key = base.ssh_private_key if base is not None else default_key
    python = base.python if base is not None and base.host == host else None
    return ControllerSettings(host, user or getpass.getuser(), port or 22, key, python)


def _in_home(path: Path) -> str:
    return path.relative_to(launcher_home()).as_posix()


def _q(path: str) -> str:
    return shlex.quote(path)


# -- putting a run on the controller ------------------------------------------------------
def reach(settings: ControllerSettings) -> Controller:
    """A connection to the controller, which has answered; LauncherError naming it when it
    does not (before anything of a run is made here or there)."""
    controller = Controller(settings)
    try:
        _ = controller.home
    except BaseException:
        controller.close()
        raise
    return controller


def supervise_remote(
    controller: Controller,
    config: ClusterConfig,
    run: Run,
    cluster_name_override: str | None,
    say: Callable[[str], None],
    secrets: Mapping[str, str] | None = None,
) -> tuple[int, Run]:
    """Put the run's supervisor on the controller and wait until it has started the first
    attempt; returns its process id there and the run as it then is. When that fails, the
    run is forgotten (its directory here and there, its supervisor there stopped) before
    the LauncherError goes on: no run is left that nobody supervises. `secrets` (`--env`,
    metadata.launcher.env) reach the supervisor as the credentials do (see `_spawn`)."""
    pid: int | None = None
    try:
        pid = start(controller, config, run, cluster_name_override, say, secrets)
        return pid, wait_first_attempt(controller, run, pid)
    except BaseException:
        _discard(controller, run, pid)
        raise


def _discard(controller: Controller, run: Run, pid: int | None) -> None:
    from launcher.runs.launch import discard_run

    discard_run(run)
    stop = f"kill -TERM -- -{pid} 2>/dev/null; " if pid else ""  # its session's group
    folder = controller.run_dir(run.cluster_name, run.id)
    with contextlib.suppress(LauncherError):  # a controller gone meanwhile keeps its copy
        controller.capture(f"{stop}rm -rf {_q(folder)} {_q(_secrets_dir(controller, run))}")


def _secrets_dir(controller: Controller, run: Run) -> str:
    """The run's own (another run of the cluster there may end sooner and remove its)."""
    return f"{controller.home}/secrets/{cluster_dir(run.cluster_name).name}/{run.id}"


def start(
    controller: Controller,
    config: ClusterConfig,
    run: Run,
    cluster_name_override: str | None,
    say: Callable[[str], None],
    secrets: Mapping[str, str] | None = None,
) -> int:
    """Install the launcher on the controller, put the run and everything its supervisor
    needs there, and start that supervisor detached. Returns its process id there."""
    try:
        return _start(controller, config, run, cluster_name_override, say, secrets or {})
    except (OSError, EOFError) as exc:  # a copy that failed, a connection that dropped
        raise LauncherError(
            f"could not put the run on the controller {controller.name}: {exc}"
        ) from exc


def _start(
    controller: Controller,
    config: ClusterConfig,
    run: Run,
    cluster_name_override: str | None,
    say: Callable[[str], None],
    values: Mapping[str, str],
) -> int:
    from launcher.cluster.install import install_on_controller

    spec = provider_spec(config.provider.type)
    if spec is None:
        raise LauncherError(f"unknown provider type {config.provider.type}")
    found = controller_secrets.collect(spec, os.environ, Path.home())
    # The run's own variables go with the credentials, into the same 0600 file the
    # supervisor's shell sources, and with their names (secret_env.inherited reads them).
    variables = {**found.variables, **secret_env.for_child(values)} if values else found.variables
    credentials = dataclasses.replace(found, variables=variables)
    python, how = install_on_controller(
        controller.runner,
        VENV,
        controller.settings.python,
        spec.sdk_module,
        spec.install_extra,
        name=controller.name,
    )
    say(f"Launcher {how} on the controller {controller.name}.")
    secrets = _secrets_dir(controller, run)
    folder = controller.run_dir(run.cluster_name, run.id)
    cluster = f"{controller.home}/{_in_home(cluster_dir(config.cluster_name))}"
    made = controller.runner.run(
        f"umask 077 && mkdir -p {_q(folder)}/script {_q(secrets)} {_q(cluster)} "
        f"{_q(controller.home)}/keys {_q(controller.home)}/records && chmod 700 {_q(secrets)}"
    )
    if not made.ok:
        raise LauncherError(f"could not make the run's directories on {controller.name}: {made}")
    keys: dict[str, str] = {}
    for name, value, file in (
        ("private_key", config.auth.ssh_private_key, controller_secrets.KEY_FILE),
        ("public_key", config.auth.ssh_public_key, controller_secrets.PUBLIC_KEY_FILE),
    ):
        if value:
            keys[name] = f"{secrets}/{file}"
            controller.runner.put(str(Path(value).expanduser()), keys[name])
    with controller_secrets.staged(credentials, secrets) as staged:
        for item in sorted(staged.iterdir()):
            controller.runner.put(str(item), f"{secrets}/{item.name}")
    _put_cluster_files(controller, config, spec.derived_names(config).values())
    config_there = f"{folder}/cluster.yaml"
    source = Path(config.source or run.config_path)
    shipped = dataclasses.replace(run, config_path=config_there, controller=controller.name)
    with tempfile.TemporaryDirectory(prefix="launcher-run-") as staging:
        local = Path(staging)
        mounts = _put_file_mounts(controller, config, folder)
        (local / "cluster.yaml").write_text(
            controller_secrets.controller_yaml(source.read_text(), mounts=mounts, **keys)
        )
        (local / store.RUN_FILE).write_text(shipped.to_json())
        controller.runner.put(str(local / "cluster.yaml"), config_there)
        controller.runner.put(str(local / store.RUN_FILE), f"{folder}/{store.RUN_FILE}")
    controller.runner.put(str(store.script_path(run)), f"{folder}/script/{run.script}")
    done = controller.runner.run(f"chmod -R go-rwx {_q(controller.home)}")
    if not done.ok:
        raise LauncherError(f"could not close the controller's files to others: {done}")
    return _spawn(controller, python, secrets, folder, config_there, run, cluster_name_override)


def _put_file_mounts(controller: Controller, config: ClusterConfig, folder: str) -> dict[str, str]:
    """Each file mount's source (on this machine, relative to where the launcher runs)
    copied to `folder/files/N` there, for the heads the controller brings up; returns
    remote path -> the copy's path there."""
    copies: dict[str, str] = {}
    for number, (remote, local) in enumerate(sorted(config.file_mounts.items())):
        source = Path.cwd() / Path(str(local)).expanduser()
        there = f"{folder}/files/{number}"
        if source.is_dir():
            controller.runner.put(f"{source}/", f"{there}/")
            copies[str(remote)] = there
        else:
            controller.runner.put(str(source), f"{there}/{source.name}")
            copies[str(remote)] = f"{there}/{source.name}"
    return copies


def _put_cluster_files(
    controller: Controller, config: ClusterConfig, derived: Iterable[str]
) -> None:
    """The cluster's own files from this machine's launcher home that `up` and `down`
    read: its directory (known hosts, provider state; not its logs), the keys the launcher
    made for it, its record."""
    folder = cluster_dir(config.cluster_name)
    if folder.is_dir():
        remote = f"{controller.home}/{_in_home(folder)}"
        for item in sorted(folder.iterdir()):
            if item.name in ("logs", "lock") or item.name.endswith(".lock"):
                continue
            if item.is_dir():  # its contents into the directory of the same name there
                controller.runner.put(f"{item}/", f"{remote}/{item.name}/")
            else:
                controller.runner.put(str(item), f"{remote}/{item.name}")
    for name in derived:  # a key the launcher made is named after one of the cluster's names
        key = key_path(name)
        if key.is_file():
            controller.runner.put(str(key), f"{controller.home}/{_in_home(key)}")
    record = record_path(config.cluster_name)
    if record.is_file():
        controller.runner.put(str(record), f"{controller.home}/{_in_home(record)}")


def _spawn(
    controller: Controller,
    python: str,
    secrets: str,
    folder: str,
    config_there: str,
    run: Run,
    cluster_name_override: str | None,
) -> int:
    """`launcher jobs supervise` there, in a session of its own that outlives this SSH
    session (the process id returned is its shell's, leader of that session's process
    group); the secrets reach it from the env file, never on its command line, and are
    removed once it has exited with the run ended there (not when it let go of the run,
    which another supervisor there may take up)."""
    argv = [python, "-m", "launcher", "jobs", "supervise", config_there, run.id]
    if cluster_name_override:
        argv += ["--cluster-name", cluster_name_override]
    ended = shlex.join([python, "-c", _RUN_ENDED, f"{folder}/{store.RUN_FILE}"])
    inner = (
        f'. {_q(secrets)}/env && "$@"; code=$?; {ended} && rm -rf {_q(secrets)} && '
        f"rmdir {_q(str(Path(secrets).parent))} 2>/dev/null; exit $code"
    )
    script = (
        f"cd {_q(folder)} && LAUNCHER_HOME={_q(controller.home)} "
        f"{CONTROLLER_ENV}={_q('controller ' + controller.name)} "
        f"setsid sh -c {_q(inner)} sh {shlex.join(argv)} "
        f"< /dev/null >> {_q(folder)}/{SUPERVISOR_LOG} 2>&1 & echo @@pid $!"
    )
    output = controller.capture(script)
    for line in output.splitlines():
        if line.startswith("@@pid "):
            return int(line.split()[1])
    raise LauncherError(f"the supervisor did not start on {controller.name}: {output.strip()}")


# -- reading the run there ----------------------------------------------------------------
def runs(controller: Controller, cluster_name: str) -> list[Run]:
    """The runs of `cluster_name` the controller keeps."""
    root = f"{controller.home}/{_in_home(store.runs_root(cluster_name))}"
    output = controller.capture(
        f'for f in {_q(root)}/*/{store.RUN_FILE}; do [ -f "$f" ] && '
        f'{{ tr -d "\\n" < "$f"; echo; }}; done; true'
    )
    found = []
    for line in output.splitlines():
        if line.startswith("{"):
            try:
                found.append(Run.from_json(line))
            except ValueError:
                continue
    return sorted(found, key=lambda r: r.created_at)


def status(controller: Controller, run: Run, log_offset: int, pid: int | None = None) -> Status:
    """The run as the controller keeps it, its log from `log_offset` on (bytes), and
    whether supervisor process `pid` there still runs."""
    folder = _q(controller.run_dir(run.cluster_name, run.id))
    alive = f"kill -0 {pid} 2>/dev/null && echo alive; true" if pid else "true"
    # The log's bytes as they are (base64: the SSH channel's output is read as text), so
    # the next offset is what was read, whatever the bytes.
    output = controller.capture(
        f"tail -c +{log_offset + 1} {folder}/{store.LOG_FILE} 2>/dev/null | base64; "
        f"echo {_END}; cat {folder}/{store.RUN_FILE} 2>/dev/null; echo; "
        f"echo {_END}; {alive}"
    )
    chunk, _, rest = output.partition(f"{_END}\n")
    record, _, tail = rest.partition(f"{_END}\n")
    try:
        current = Run.from_json(record)
    except ValueError:
        current = None
    try:
        data = base64.b64decode(chunk)
    except ValueError as exc:
        raise LauncherError(f"on the controller {controller.name}: unreadable log ({exc})") from exc
    return Status(current, data, "alive" in tail)


@dataclasses.dataclass(frozen=True)
class Status:
    run: Run | None
    log: bytes  # the driver log's new part: the next offset is `len(log)` on
    supervisor_alive: bool


def supervisor_log_tail(controller: Controller, run: Run, lines: int = 5) -> str:
    folder = controller.run_dir(run.cluster_name, run.id)
    try:
        text = controller.capture(f"tail -n {lines} {_q(folder)}/{SUPERVISOR_LOG}")
    except LauncherError as exc:
        return str(exc)
    return " | ".join(text.strip().splitlines()) or "(empty log)"


def wait_first_attempt(controller: Controller, run: Run, pid: int, timeout_s: float = 600.0) -> Run:
    """Until the controller's supervisor has started the run's first attempt (or ended
    it). LauncherError, with the end of its log, when it exits first or takes too long."""
    started = _poll(controller, run, lambda r: bool(r.attempts) or r.state.ended, timeout_s, pid)
    if started is None:
        raise LauncherError(
            f"the run's supervisor on {controller.name} did not start it in {timeout_s:g} s: "
            f"{supervisor_log_tail(controller, run)}"
        )
    return started


def _poll(
    controller: Controller,
    run: Run,
    done: Callable[[Run], bool],
    timeout_s: float,
    pid: int | None = None,
) -> Run | None:
    """Ask the controller for the run every half second until `done` says so of its record
    there (returned), or `timeout_s` passed (None). With `pid`: LauncherError, with the end
    of its log, when that supervisor exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = status(controller, run, 1 << 62, pid)
        if seen.run is not None and done(seen.run):
            return seen.run
        if pid is not None and not seen.supervisor_alive:
            raise LauncherError(
                f"the run's supervisor on {controller.name} exited: "
                f"{supervisor_log_tail(controller, run)}"
            )
        time.sleep(0.5)
    return None


def follow(
    controller: Controller,
    run: Run,
    write: Callable[[str], None],
    offset: int = 0,
    every_s: float = 1.0,
    say: Callable[[str], None] | None = None,
) -> Run:
    """Print the run's driver log as the controller writes it, from byte `offset`, until
    the run ends there; returns it ended. A controller that does not answer for a while
    (a dropped connection) is asked again, said once per silence through `say`."""
    current = run
    silent = False
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character cut in two
    while True:
        try:
            seen = status(controller, current, offset)
        except LauncherError as exc:
            if say is not None and not silent:
                say(f"{exc}; asking again (Ctrl-C stops following, not the run)")
            silent = True
            time.sleep(every_s)
            continue
        silent = False
        if seen.log:
            write(text.decode(seen.log))
            offset += len(seen.log)
        if seen.run is not None:
            current = seen.run
        if current.state.ended:
            return current
        time.sleep(every_s)


def follow_to_end(
    controller: Controller,
    run: Run,
    write: Callable[[str], None],
    say: Callable[[str], None],
    *,
    keep_here: bool = False,
) -> Run:
    """`follow` from the log's start until the run ends there; returns it ended, and with
    `keep_here` keeps that record on this machine too (naming this machine's config)."""
    ended = follow(controller, run, write, say=say)
    if keep_here:
        store.save(dataclasses.replace(ended, config_path=run.config_path))
    return ended


def log_text(controller: Controller, run: Run) -> str:
    return status(controller, run, 0).log.decode("utf-8", errors="replace")


def request_cancel(controller: Controller, run: Run) -> None:
    """Ask the controller's supervisor to cancel the run (store.cancel_requested reads
    this file there)."""
    folder = _q(controller.run_dir(run.cluster_name, run.id))
    controller.capture(f"mkdir -p {folder} && touch {folder}/{store.CANCEL_FILE}")


def wait_ended(controller: Controller, run: Run, timeout_s: float = 60.0) -> Run:
    """Until the controller's copy of the run has ended (or `timeout_s` passed: the run as
    it was)."""
    return _poll(controller, run, lambda r: r.state.ended, timeout_s) or run


def cancel_remote(settings: ControllerSettings, run: Run) -> bool:
    """Ask the run's controller to cancel it and wait until its supervisor there has;
    whether it has (its driver stopped)."""
    controller = Controller(settings)
    try:
        request_cancel(controller, run)  # store.cancel_requested there reads it
        return wait_ended(controller, run).state is RunState.CANCELLED
    finally:
        controller.close()
