"""Environment variables passed from this machine to a cluster (`--env NAME[=VALUE]` and
`metadata.launcher.env`) without their values in any command line, log, record or file of
the launcher's.

Values travel only on a command's standard input, as a shell script of `export` lines that
the command reads first (`LOAD_FROM_STDIN`). What a node's Ray needs later (its `ray start`,
and the workers the head's autoscaler starts after `up` has returned) is kept on the node
in one file, `SECRETS_FILE` (mode 0600, in the 0700 directory `SECRETS_DIR`), written from
standard input (`WRITE_FILE`) and read by `SOURCE_FILE` before Ray starts. A tmux session
(whose server may have been started by another shell, and so not take this one's
environment) gets its values from a one-use file beside it, removed as the session reads it
(`store_handed`, `load_handed`).
"""

from __future__ import annotations

import itertools
import re
import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from launcher.errors import UsageError

SECRETS_DIR = "~/.launcher/secrets"
SECRETS_FILE = f"{SECRETS_DIR}/env"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# A supervisor spawned by `submit --recover --detach` finds the names of the variables it
# was given (their values in its environment, never in its command line) in this variable.
NAMES_VARIABLE = "LAUNCHER_SECRET_ENV_NAMES"

# Exports the script on standard input into the shell (stdin is left at its end).
LOAD_FROM_STDIN = 'eval "$(cat)" || exit 97; '
# Exports the node's kept variables when it has any.
SOURCE_FILE = f"if [ -f {SECRETS_FILE} ]; then set -a; . {SECRETS_FILE} || exit 97; set +a; fi; "
# Replaces the node's kept variables with the script on standard input (none: removed).
WRITE_FILE = (
    f"umask 077 && mkdir -p {SECRETS_DIR} && chmod 700 {SECRETS_DIR} && "
    f"cat > {SECRETS_FILE}.new && chmod 600 {SECRETS_FILE}.new && "
    f"if [ -s {SECRETS_FILE}.new ]; then mv -f {SECRETS_FILE}.new {SECRETS_FILE}; "
    f"else rm -f {SECRETS_FILE}.new {SECRETS_FILE}; fi"
)


def handed_file() -> str:
    """A new name for a one-use file of values handed to a detached session (tmux)."""
    return f"{SECRETS_DIR}/session-{secrets.token_hex(8)}"


def store_handed(path: str) -> str:
    """Writes the script on standard input to `path` (0600, in the 0700 `SECRETS_DIR`)."""
    return f"umask 077 && mkdir -p {SECRETS_DIR} && chmod 700 {SECRETS_DIR} && cat > {path}"


def load_handed(path: str) -> str:
    """Exports the values `store_handed` wrote to `path`, and removes it: run in the session
    the values are for, whose server does not take the calling shell's environment."""
    return f"set -a; . {path} || exit 97; set +a; rm -f {path}; "


def check_name(name: str, where: str) -> str:
    if not _NAME.match(name):
        raise UsageError(
            f"{where}: {name!r} is not a variable name; use letters, digits and '_', not "
            "starting with a digit (such as WANDB_API_KEY)"
        )
    return name


def parse_option(spec: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """`NAME=VALUE`, or `NAME` with its value from `environ`. UsageError when bad or unset."""
    name, equals, value = spec.partition("=")
    check_name(name, f"--env {name or spec}")
    if equals:
        return name, value
    if name not in environ:
        raise UsageError(
            f"--env {name}: {name} is not set on this machine; export it first or give "
            f"--env {name}=VALUE"
        )
    return name, environ[name]


def resolve(
    options: Sequence[str], config_names: Iterable[str], environ: Mapping[str, str]
) -> dict[str, str]:
    """The variables to pass: the config's names (values from `environ`), then `--env`."""
    values: dict[str, str] = {}
    for name in config_names:
        check_name(name, "metadata.launcher.env")
        if name not in environ:
            raise UsageError(
                f"metadata.launcher.env names {name}, which is not set on this machine; "
                f"export it first or remove it from the config"
            )
        values[name] = environ[name]
    for spec in options:
        name, value = parse_option(spec, environ)
        values[name] = value
    return values


def script(values: Mapping[str, str]) -> bytes:
    """`values` as `export NAME='value'` lines, for a shell to read (`parse` reads it back)."""
    lines = [f"export {check_name(k, 'env')}={shlex.quote(v)}\n" for k, v in values.items()]
    return "".join(lines).encode()


def parse(text: str) -> dict[str, str]:
    """The variables of a `script` (anything else in `text` ignored)."""
    try:
        words = shlex.split(text)
    except ValueError:
        return {}
    values: dict[str, str] = {}
    for keyword, assignment in itertools.pairwise(words):
        name, equals, value = assignment.partition("=")
        if keyword == "export" and equals and _NAME.match(name):
            values[name] = value
    return values


def for_child(values: Mapping[str, str]) -> dict[str, str]:
    """The environment of a launcher process started from this one, given `values`."""
    return {**values, NAMES_VARIABLE: ",".join(values)}


def inherited(environ: Mapping[str, str], config_names: Iterable[str]) -> dict[str, str]:
    """The variables a spawned supervisor was given (`for_child`), and the config's names
    set in `environ`."""
    names = [n for n in environ.get(NAMES_VARIABLE, "").split(",") if n]
    return {n: environ[n] for n in [*config_names, *names] if n in environ}


def kept_on_this_node() -> dict[str, str] | None:
    """The variables kept on the node this runs on (the head's autoscaler), None if none."""
    path = Path(SECRETS_FILE).expanduser()
    try:
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
