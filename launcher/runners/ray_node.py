"""The Ray a node runs: which Python has it, and stopping it for certain.

A node's Ray may live anywhere: in the Python of the login shell, or in a virtualenv that
only the start commands name (`/opt/venv/bin/ray start --head ...`, the usual way to pin
Ray), which no PATH has. What runs on the node is the truth, so the node is asked:

- `find_python_script`: the Python to run the launcher's autoscaler with, in this order:
  the one the user set (`provider.head_python`); the Python of the Ray processes running
  there; the Python of each `ray` the start commands name by path; that of `ray` on the
  login PATH; `python3`; `python`. The first that can import Ray wins. The check only
  looks Ray up (`importlib.util.find_spec`), it does not import it: a no-op `up` runs it.
- `stop_script`: `ray stop` with the Ray that runs (named by the start commands, else the
  Python of the running processes, else `ray` on the PATH), then a check that no Ray
  process is left, `ray stop --force` if one is, and a list of those it could not stop.

The scripts print `@@name value` lines, parsed here; the rest of their output is noise a
login shell may add.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.runners.base import CommandResult, CommandRunner

# A `ray` executable named by path in a start command: plain words only, so it can be
# written unquoted in the node's shell (for `~` and `$HOME` to expand) without any risk.
_RAY_PATH = re.compile(r"^(~|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)?/([A-Za-z0-9_.-]+/)*ray$")
# How long the stop script waits for Ray's processes to exit after each `ray stop` (which
# itself waits for them to exit), and how long the whole script may take.
STOP_SETTLE_S = 2
STOP_TIMEOUT_S = 180.0

# Shell functions both scripts use. `ray_processes` prints `@@ray PID NAME` for every Ray
# process it sees (Ray's binaries, its Python processes, its workers) but its own shell.
_PROCESSES = r"""
ray_processes() {
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    IFS= read -r comm < "$d/comm" 2>/dev/null || continue
    IFS= read -r stat < "$d/stat" 2>/dev/null || continue
    case "${stat##*) }" in Z*|X*) continue ;; esac  # exited, not yet reaped
    case "$comm" in
      gcs_server|raylet|plasma_store*|ray::*) echo "@@ray $pid $comm"; continue ;;
      python*) ;;
      *) continue ;;
    esac
    cmd=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
    case "$cmd" in
      *packages/ray/*|*" -m ray."*) echo "@@ray $pid $comm ${cmd%% *}" ;;
    esac
  done
}
ray_pythons() {
  ray_processes | while read -r _ pid comm argv0; do
    case "$argv0" in /*) echo "$argv0" ;; esac
  done
}
"""


def ray_paths(commands: Sequence[str]) -> tuple[str, ...]:
    """The `ray` executables `commands` name by path (`/opt/venv/bin/ray`,
    `~/env/bin/ray`, `$HOME/env/bin/ray`), in the order written, each once."""
    found: list[str] = []
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        for word in words:
            if _RAY_PATH.match(word) and word not in found:
                found.append(word)
    return tuple(found)


def option_values(words: Sequence[str], name: str) -> list[str]:
    """The values a command's `words` give option `name` (`--name=V` or `--name V`), in
    the order written."""
    values = []
    for index, word in enumerate(words):
        if word.startswith(f"{name}="):
            values.append(word.split("=", 1)[1])
        elif word == name and index + 1 < len(words):
            values.append(words[index + 1])
    return values


def temp_dir_option(commands: Sequence[str]) -> str | None:
    """The `--temp-dir` the last of `commands` to give one gives Ray, as written (variables
    unexpanded), else None."""
    found = None
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        values = option_values(words, "--temp-dir")
        if values:
            found = values[-1]
    return found


def node_temp_dir_option(
    head_commands: Sequence[str], worker_commands: Sequence[str], head: bool
) -> str | None:
    """The `--temp-dir` a node's Ray takes, as its start commands write it: its own start
    commands' one, else, for a worker, the head's (Ray's workers take the head's temp dir);
    None: Ray's default."""
    own = temp_dir_option(head_commands if head else worker_commands)
    if own is None and not head:
        return temp_dir_option(head_commands)
    return own


def gcs_port(head_commands: Sequence[str]) -> int:
    """The port the head's `ray start --head` gives Ray's GCS (`--port N`), else Ray's
    default, 6379."""
    port = 6379
    for command in head_commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        if "start" not in words or "--head" not in words:
            continue
        for value in option_values(words, "--port"):
            if value.isdigit():
                port = int(value)
    return port


def _home_word(path: str) -> str:
    """`path` as one shell word, with a leading `~/` as the user's home."""
    if path.startswith("~/"):
        return f'"$HOME"/{shlex.quote(path[2:])}'
    return shlex.quote(path)


def _words(paths: Sequence[str]) -> str:
    # Safe unquoted (see _RAY_PATH); a tilde must lead its word to expand.
    return " ".join(p for p in paths if _RAY_PATH.match(p))


def find_python_script(explicit: str | None, paths: Sequence[str]) -> str:
    """Shell printing `@@python PATH` (exit 0), or `@@tried P1 P2 ...` (exit 3) when no
    candidate has Ray. With `explicit`, only that one is tried."""
    check = shlex.quote('import importlib.util as u, sys; sys.exit(u.find_spec("ray") is None)')
    lines = [
        _PROCESSES,
        'tried=""',
        "try_py() {",
        '  case "$1" in ""|*" "*) return 0 ;; esac',
        '  case " $tried " in *" $1 "*) return 0 ;; esac',
        '  tried="$tried $1"',
        f'  "$1" -c {check} >/dev/null 2>&1 && {{ echo "@@python $1"; exit 0; }}',
        "  return 0",
        "}",
        # The Python a `ray` executable runs with: its #! line, else one beside it.
        "from_ray() {",
        '  [ -f "$1" ] || return 0',
        '  IFS= read -r first < "$1" 2>/dev/null || first=""',
        '  case "$first" in',
        "    '#!'*) set -- \"$1\" ${first#??}",
        '      case "$2" in',
        '        */env) try_py "$(command -v "$3" 2>/dev/null)" ;;',
        '        *) try_py "$2" ;;',
        "      esac",
        "      ;;",
        "  esac",
        '  dir=$(dirname "$1")',
        '  try_py "$dir/python3"; try_py "$dir/python"',
        "}",
    ]
    if explicit:
        lines.append(f"try_py {_home_word(explicit)}")
    else:
        lines += [
            'for p in $(ray_pythons); do try_py "$p"; done',
            f'for r in {_words(paths)}; do from_ray "$r"; done',
            'from_ray "$(command -v ray 2>/dev/null)"',
            'try_py "$(command -v python3 2>/dev/null)"',
            'try_py "$(command -v python 2>/dev/null)"',
        ]
    lines.append('echo "@@tried${tried:- (none found)}"; exit 3')
    return "\n".join(lines)


def stop_script(paths: Sequence[str], force: bool = False) -> str:
    """Shell that stops the node's Ray and prints `@@ray PID NAME` for each Ray process
    still running after every way it knows (exit 4), else exits 0.

    The ways, in order: a `ray` of `paths` (the start commands'), the running processes'
    Python (`-m ray.scripts.scripts`), `ray` on the PATH. Each is asked to `ray stop` in
    turn while Ray processes are left (`ray stop` waits for them itself), then to
    `ray stop --force`. With `force`, only `ray stop --force` (SIGKILL: for a Ray whose
    head is gone, with nothing left to drain)."""
    forces = "--force" if force else "'' --force"
    return "\n".join(
        [
            _PROCESSES,
            # settle N: wait up to N fifths of a second for the Ray processes to end.
            'settle() { i=0; while [ $i -lt "$1" ] && [ -n "$(ray_processes)" ]; do '
            "sleep 0.2; i=$((i + 1)); done; }",
            "stoppers() {",
            f'  for r in {_words(paths)}; do [ -x "$r" ] && echo "$r"; done',
            '  for py in $(ray_pythons); do echo "$py|-m|ray.scripts.scripts"; done',
            "  command -v ray 2>/dev/null; true",
            "}",
            f"for force in {forces}; do",
            "  for s in $(stoppers | awk '!seen[$0]++'); do",
            '    [ -n "$(ray_processes)" ] || exit 0',
            '    $(echo "$s" | tr "|" " ") stop $force >/dev/null 2>&1',
            f"    settle {STOP_SETTLE_S * 5}",
            "  done",
            "done",
            'left=$(ray_processes); [ -n "$left" ] || exit 0',
            'echo "$left"; exit 4',
        ]
    )


@dataclass(frozen=True)
class RayProcess:
    pid: int
    name: str

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid})"


def parse_processes(output: str) -> tuple[RayProcess, ...]:
    found = []
    for line in output.splitlines():
        if line.startswith("@@ray "):
            parts = line.split()
            if len(parts) >= 3 and parts[1].isdigit():
                found.append(RayProcess(int(parts[1]), parts[2]))
    return tuple(found)


def parse_python(output: str) -> tuple[str | None, tuple[str, ...]]:
    """The Python found, or None and the candidates tried."""
    for line in output.splitlines():
        if line.startswith("@@python "):
            return line[len("@@python ") :].strip(), ()
    for line in output.splitlines():
        if line.startswith("@@tried"):
            rest = line[len("@@tried") :].strip()
            return None, tuple(rest.split()) if rest != "(none found)" else ()
    return None, ()


def node_ray_paths(
    head_commands: Sequence[str], worker_commands: Sequence[str], *, head: bool
) -> tuple[str, ...]:
    """The `ray` executables a node's start commands name, its own kind's first (the other
    kind's too: a config may name its virtualenv in one list only)."""
    first, second = (head_commands, worker_commands) if head else (worker_commands, head_commands)
    return ray_paths([*first, *second])


def stop_problem(result: CommandResult) -> str | None:
    """What `stop_script` (run as `result`) could not do, in a few words; None when no Ray
    process is left."""
    if result.ok:
        return None
    left = parse_processes(result.output_tail)
    if result.exit_code == 4 and left:
        return "Ray processes still running: " + ", ".join(map(str, left))
    last = (result.output_tail.strip().splitlines() or [f"exit {result.exit_code}"])[-1]
    return f"could not stop Ray ({last})"


def stop_ray(
    runner: CommandRunner, paths: Sequence[str], timeout: float, force: bool = False
) -> str | None:
    """Stop the Ray of the node `runner` reaches (in its container, if it has one) and check
    that none is left (`force`: killed at once, see `stop_script`). None when so, else what
    is left."""
    return stop_problem(runner.run(stop_script(paths, force), timeout=timeout))
