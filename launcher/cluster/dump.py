"""`launcher cluster-dump`: one tarball of what a cluster has logged, for a bug report.

It holds the launcher's setup log of each node (kept on this machine), the autoscaler's
decision log and state (on the head) and Ray's session logs of every node, gathered in
parallel through each node's own command runner (in its container, where Ray runs).

Three steps, the middle one pure:
1. survey: each node lists its files (size, age) and says which machine it is (boot id
   and mount namespace), so a directory several nodes share on one machine (every node of
   a localhost cluster writes into one Ray temp dir) is gathered once;
2. plan: the size limit is shared out: files smaller than an equal share are kept whole,
   the rest keep their last bytes (their share), or are left out when the shares would be
   too small to be worth reading (the launcher's own files and the newest go first);
3. fetch: each node packs what the plan keeps into one archive (a plan file put on the
   node, one command, one copy back), and the dump is written with a MANIFEST.txt (the
   summary printed at the end) and a manifest.json (every file, what was cut).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.autoscaler.spec import LOG_FILE, STATE_FILE
from launcher.cluster.head import connect
from launcher.config.model import ClusterConfig
from launcher.errors import NoClusterError, UsageError
from launcher.paths import cluster_dir
from launcher.providers.base import Node, NodeKind, NodeProvider, head_of
from launcher.providers.factory import make_provider
from launcher.runners.base import CommandRunner
from launcher.runners.container import host_runner
from launcher.updater.runner import node_runner

DEFAULT_MAX_BYTES = 200 * 2**20
# Below this a file's share is not worth reading: files are left out instead.
MIN_SLICE_BYTES = 64 * 2**10
MAX_THREADS = 8
SURVEY_TIMEOUT_S = 120.0
PACK_TIMEOUT_S = 600.0
SESSION_LOGS = "session_latest/logs"  # under Ray's temp dir
# Ray's default temp dir (ray._common.utils): $RAY_TMPDIR, else $TMPDIR on Linux, else /tmp.
DEFAULT_RAY_TEMP = '"${RAY_TMPDIR:-${TMPDIR:-/tmp}}"/ray'
LOCAL = "this machine"

# -- what to gather (pure) -------------------------------------------------------------

_EXPANDABLE = re.compile(r"^[A-Za-z0-9_./:@%+=,${}-]+$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_FILE = re.compile(r"^@@file (\d+) (\d+) (\d+(?:\.\d+)?) (.+)$")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """`200MB`, `1.5G`, `512KiB`, `1000` as bytes (K, M, G, T: powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"{text!r} is not a size; write e.g. 200MB, 1.5GB or 500KB")
    number, unit, _ = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


def format_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    exponent = 1
    while exponent < 3 and size >= 1024 ** (exponent + 1):
        exponent += 1
    return f"{size / 1024**exponent:.1f} {'KMG'[exponent - 1]}iB"


def shell_path(value: str) -> str:
    """`value`, a path as a start command or the launcher writes it, as one shell word for
    the node: a leading `~` is the node's home, `$NAME` and `${NAME}` expand there (never
    split into words), anything else is literal."""
    home = value == "~" or value.startswith("~/")
    rest = value[1:] if home else value
    if "$" in rest and _EXPANDABLE.match(rest):
        word = f'"{rest}"'
    else:
        word = shlex.quote(rest) if rest else ""
    return f'"$HOME"{word}' if home else word


def _temp_dir_option(commands: Sequence[str]) -> str | None:
    found = None
    for command in commands:
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        for index, word in enumerate(words):
            if word.startswith("--temp-dir="):
                found = word.split("=", 1)[1]
            elif word == "--temp-dir" and index + 1 < len(words):
                found = words[index + 1]
    return found


def ray_logs_path(config: ClusterConfig, node: Node) -> str:
    """Shell word for the directory of Ray's logs on `node`: `session_latest/logs` under
    the temp dir its start commands give Ray (`--temp-dir`); a worker without one uses the
    head's (Ray's workers take the head's temp dir), else Ray's default."""
    head = node.kind is NodeKind.HEAD
    own = config.head_start_ray_commands if head else config.worker_start_ray_commands
    temp = _temp_dir_option(own)
    if temp is None and not head:
        temp = _temp_dir_option(config.head_start_ray_commands)
    word = shell_path(temp.rstrip("/") or "/") if temp else DEFAULT_RAY_TEMP
    return f"{word}/{SESSION_LOGS}"


@dataclass(frozen=True)
class Target:
    """Paths (shell words: directories or files) read through one node's runner, stored in
    the dump under `key`."""

    key: str
    node_id: str
    what: str
    paths: tuple[str, ...]
    shareable: bool = False  # a directory other nodes on the same machine may share
    priority: int = 1  # 0: the launcher's own files, kept first when space is short


def autoscaler_target(head: Node) -> Target:
    paths = (shell_path(LOG_FILE), shell_path(STATE_FILE))
    return Target("autoscaler", head.id, "autoscaler", paths, priority=0)


def ray_target(config: ClusterConfig, node: Node) -> Target:
    paths = (ray_logs_path(config, node),)
    return Target(f"ray/{node.id}", node.id, "Ray logs", paths, shareable=True)


@dataclass(frozen=True)
class FileInfo:
    path: str  # where it is (on its node, or on this machine)
    size: int
    mtime: float
    name: str  # its name in the dump, under its target's key


@dataclass(frozen=True)
class Listing:
    """What a node said of a target's paths."""

    machine: str | None  # boot id and mount namespace: nodes that see the same files
    roots: tuple[str, ...]  # the paths, resolved, that exist
    missing: tuple[str, ...]  # the paths (as asked) that do not
    files: tuple[FileInfo, ...]


def survey_script(paths: Sequence[str]) -> str:
    """Shell printing `@@machine BOOT_ID MNT_NS`, then for each path `@@root I REALPATH`
    and `@@file I SIZE MTIME PATH` for each file under it, or `@@missing I`."""
    lines = [
        'echo "@@machine $(cat /proc/sys/kernel/random/boot_id 2>/dev/null) '
        '$(readlink /proc/self/ns/mnt 2>/dev/null)"',
        "list() {",
        '  real=$(readlink -f "$2" 2>/dev/null) && [ -e "$real" ] || '
        '{ echo "@@missing $1"; return 0; }',
        '  echo "@@root $1 $real"',
        '  find "$real" -type f -exec stat -c "@@file $1 %s %Y %n" {} + 2>/dev/null',
        "  return 0",
        "}",
    ]
    lines += [f"list {index} {path}" for index, path in enumerate(paths)]
    return "\n".join(lines)


def parse_survey(lines: Sequence[str], paths: Sequence[str]) -> Listing:
    """The listing `survey_script(paths)` printed (other lines are a login shell's noise)."""
    machine: str | None = None
    roots: dict[int, str] = {}
    missing: list[str] = []
    files: list[FileInfo] = []
    for line in lines:
        words = line.split(" ", 2)
        if words[0] == "@@machine":
            machine = line[len("@@machine ") :] if len(line.split()) == 3 else None
        elif words[0] == "@@root" and len(words) == 3 and words[1].isdigit():
            roots[int(words[1])] = words[2].rstrip("/") or "/"
        elif words[0] == "@@missing" and words[1].isdigit() and int(words[1]) < len(paths):
            missing.append(paths[int(words[1])])
        elif (match := _FILE.match(line)) and int(match[1]) in roots:
            root, path = roots[int(match[1])], match[4]
            name = PurePosixPath(path).name if path == root else path.removeprefix(root + "/")
            if name != path:
                files.append(FileInfo(path, int(match[2]), float(match[3]), name))
    return Listing(machine, tuple(roots[i] for i in sorted(roots)), tuple(missing), tuple(files))


def shared_with(listings: Sequence[tuple[Target, Listing]]) -> dict[str, str]:
    """Targets whose directory an earlier target already covers (the same directory on the
    same machine): their key -> that target's key. Gathered once, under the first."""
    seen: dict[tuple[str, tuple[str, ...]], str] = {}
    shared = {}
    for target, listing in listings:
        if not target.shareable or listing.machine is None or not listing.roots:
            continue
        where = (listing.machine, listing.roots)
        if where in seen:
            shared[target.key] = seen[where]
        else:
            seen[where] = target.key
    return shared


@dataclass(frozen=True)
class Wanted:
    """A file the dump would hold: from which target (or LOCAL), and how it ranks."""

    source: str
    file: FileInfo
    priority: int = 1


@dataclass(frozen=True)
class Slice:
    """How much of a file the dump keeps: all of it, its last `keep` bytes, or nothing."""

    wanted: Wanted
    keep: int

    @property
    def whole(self) -> bool:
        return self.keep >= self.wanted.file.size

    @property
    def kept(self) -> bool:
        """In the dump (an empty file too: that it is empty can tell something)."""
        return self.keep > 0 or self.wanted.file.size == 0

    @property
    def archive_name(self) -> str:
        return f"{self.wanted.source}/{self.wanted.file.name}"


def allocate(
    files: Sequence[Wanted], max_bytes: int, min_slice: int = MIN_SLICE_BYTES
) -> list[Slice]:
    """Share `max_bytes` out among `files` (in their order): a file no bigger than an equal
    share of what is left is kept whole; the larger ones share the rest equally, each
    keeping its end. When those shares would be smaller than `min_slice`, as many files as
    can get `min_slice` do (at least one; the launcher's own files first, then the newest)
    and the rest are left out. The kept bytes never add up to more than `max_bytes`."""
    keep: dict[int, int] = {}
    left = max(0, max_bytes)

    def whole_while_they_fit(pending: list[int]) -> list[int]:
        nonlocal left
        pending = sorted(pending, key=lambda i: files[i].file.size)
        while pending and files[pending[0]].file.size <= left // len(pending):
            keep[pending[0]] = files[pending[0]].file.size
            left -= keep[pending.pop(0)]
        return pending

    rest = whole_while_they_fit(list(range(len(files))))
    while rest and left // len(rest) < min_slice:
        count = max(1, left // max(1, min_slice)) if left else 0
        ranked = sorted(rest, key=lambda i: (files[i].priority, -files[i].file.mtime, i))
        chosen = whole_while_they_fit(ranked[:count])
        if chosen or not count:
            rest = chosen  # they share what is left; the others are left out
            break
        rest = whole_while_they_fit(ranked[count:])  # the chosen were small: go on
    for index in rest:
        keep[index] = left // len(rest)
    return [Slice(wanted, keep.get(index, 0)) for index, wanted in enumerate(files)]


def dump_name(cluster_name: str, when: float) -> str:
    """`launcher-dump-CLUSTER-YYYYmmdd-HHMMSS` (local time): the default file's name, less
    `.tar.gz`, and the directory the tarball's files are in."""
    return f"launcher-dump-{cluster_name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(when))}"


def cut_header(original: int, kept: int) -> bytes:
    """The line a file cut to its end begins with in the dump."""
    return (
        f"[launcher cluster-dump: the first {original - kept} bytes of this file were cut "
        f"to fit the size limit; these are its last {kept} of {original} bytes]\n"
    ).encode()


def trim_to_line(data: bytes, window: int = 4096) -> bytes:
    """A file's end without the partial line it starts with (when a line ends soon)."""
    newline = data.find(b"\n", 0, window)
    return data[newline + 1 :] if newline >= 0 else data


# -- what was gathered -----------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One row of the summary: what one target gave."""

    node_id: str
    what: str
    key: str
    files: int = 0
    bytes: int = 0
    problem: str | None = None  # why it (or some of it) could not be gathered
    shared_with: str | None = None  # gathered under this other target's key
    also: tuple[str, ...] = ()  # nodes whose directory this one is too


@dataclass(frozen=True)
class DumpResult:
    path: Path
    cluster_name: str
    when: float
    max_bytes: int
    nodes: tuple[Node, ...]
    parts: tuple[Part, ...]
    slices: tuple[Slice, ...] = ()
    unread: tuple[str, ...] = ()  # archive names of kept files that could not be read
    archive_bytes: int = 0

    @property
    def gathered_from_cluster(self) -> bool:
        """Whether anything came from the cluster's nodes (not only this machine)."""
        return any(p.files for p in self.parts if p.node_id != LOCAL)

    @property
    def kept_bytes(self) -> int:
        return sum(p.bytes for p in self.parts)


def summary_lines(result: DumpResult, cut_limit: int | None = None) -> list[str]:
    """The summary (MANIFEST.txt, and printed at the end): nodes, what each gave, what could
    not be gathered and why, what was cut. `cut_limit`: list at most this many cut files."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(result.when))
    lines = [
        f"launcher cluster-dump of cluster {result.cluster_name}, {when}",
        f"{format_size(result.kept_bytes)} of logs kept, limit {format_size(result.max_bytes)} "
        "(before compression)",
        "",
        "Nodes:",
    ]
    rows = [
        (n.id, n.kind.value, n.node_type, n.ip or "-", n.state.value, n.status.value)
        for n in result.nodes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(6)] if rows else []
    lines += [
        "  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines += ["", "Gathered:"]
    failed = []
    for part in result.parts:
        who = f"  {part.node_id:<14} {part.what:<11}"
        if part.shared_with is not None:
            lines.append(f"{who} in {part.shared_with}/ (the same directory, on the same machine)")
            continue
        if part.problem is not None and not part.files:
            failed.append(f"  {part.node_id} {part.what}: {part.problem}")
            continue
        also = f" (also {', '.join(part.also)}'s)" if part.also else ""
        lines.append(
            f"{who} {part.files:>4} files {format_size(part.bytes):>10}  {part.key}/{also}"
        )
        if part.problem is not None:
            failed.append(f"  {part.node_id} {part.what}: {part.problem}")
    failed += [f"  {name}: could not be read (gone since it was listed?)" for name in result.unread]
    if failed:
        lines += ["", "Not gathered:", *failed]
    cut = [s for s in result.slices if not s.whole]
    if cut:
        lines += ["", f"Cut to fit the limit ({len(cut)} files):"]
        shown = cut if cut_limit is None else cut[:cut_limit]
        for piece in shown:
            size = format_size(piece.wanted.file.size)
            if piece.keep:
                lines.append(
                    f"  {piece.archive_name}: kept its last {format_size(piece.keep)} of {size}"
                )
            else:
                lines.append(f"  {piece.archive_name}: left out ({size})")
        if len(shown) < len(cut):
            lines.append(f"  ... and {len(cut) - len(shown)} more (see MANIFEST.txt)")
    return lines


def manifest_json(result: DumpResult) -> dict[str, Any]:
    """manifest.json: the nodes, what each part gave, and every file with what was kept."""
    node_fields = ("id", "kind", "node_type", "ip", "state", "status")
    return {
        "cluster_name": result.cluster_name,
        "time": result.when,
        "max_bytes": result.max_bytes,
        "kept_bytes": result.kept_bytes,
        "nodes": [{k: getattr(n, k) for k in node_fields} for n in result.nodes],
        "parts": [asdict(p) for p in result.parts],
        "files": [
            {"name": s.archive_name, "from": s.wanted.file.path, "size": s.wanted.file.size}
            | {"kept": s.keep, "unread": s.archive_name in result.unread}
            for s in result.slices
        ],
    }


# -- gathering (actions) ---------------------------------------------------------------

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DumpOptions:
    output: Path | None = None  # default: dump_name(...).tar.gz in the current directory
    max_bytes: int = DEFAULT_MAX_BYTES


@dataclass
class _Job:
    """One target on one node, as it goes through the survey and the fetch."""

    target: Target
    make_runner: Callable[[], CommandRunner]
    env: dict[str, str]
    runner: CommandRunner | None = None
    listing: Listing | None = None
    problem: str | None = None
    blobs: dict[str, Path] = field(default_factory=dict)  # archive name -> fetched bytes
    unread: list[str] = field(default_factory=list)


def dump(
    config: ClusterConfig,
    options: DumpOptions,
    progress: Progress | None = None,
    *,
    provider: NodeProvider | None = None,
    now: float | None = None,
) -> DumpResult:
    """Gather the cluster's logs into one tarball (see the module's docstring). Raises
    NoClusterError when the cluster has no head; a node that cannot be reached is named in
    the result, as is everything else that could not be gathered."""
    provider = provider or make_provider(config)
    nodes = sorted(provider.nodes(), key=lambda n: (n.kind is not NodeKind.HEAD, n.created_at))
    try:
        # Any status: a cluster whose head failed to set up is when a dump is most wanted.
        session = connect(config, provider, head_of(nodes), any_status=True)
    except NoClusterError as exc:
        logs = cluster_dir(config.cluster_name) / "logs"
        if logs.is_dir() and any(logs.iterdir()):
            raise NoClusterError(f"{exc} (its last nodes' setup logs are in {logs})") from None
        raise
    when = time.time() if now is None else now
    output = options.output or Path.cwd() / f"{dump_name(config.cluster_name, when)}.tar.gz"
    with tempfile.TemporaryDirectory(prefix="launcher-dump-") as staging_dir:
        staging = Path(staging_dir)

        def runner(node: Node, daemon: bool = False) -> Callable[[], CommandRunner]:
            def make() -> CommandRunner:
                # The dump's commands and their output go to a log of their own, not to
                # the node's setup log that the dump gathers.
                made = node_runner(provider, config, node, staging / "commands" / node.id)
                # The autoscaler's files are where it runs (as head.connect() says).
                return host_runner(made) if daemon and not daemon_in_node else made

            return make

        daemon_in_node = provider.installs_launcher_on_head
        head = session.head
        jobs = [_Job(autoscaler_target(head), runner(head, daemon=True), session.env)]
        jobs += [_Job(ray_target(config, n), runner(n), provider.node_env(n, head)) for n in nodes]
        base = DumpResult(output, config.cluster_name, when, options.max_bytes, tuple(nodes), ())
        return _gather(base, jobs, staging, _locked(progress or (lambda _line: None)))


def _locked(progress: Progress) -> Progress:
    lock = threading.Lock()

    def report(line: str) -> None:
        with lock:
            progress(line)

    return report


def _gather(base: DumpResult, jobs: list[_Job], staging: Path, progress: Progress) -> DumpResult:
    with ThreadPoolExecutor(min(MAX_THREADS, len(jobs))) as pool:
        list(pool.map(lambda job: _survey(job, progress), jobs))
    shared = shared_with([(job.target, job.listing) for job in jobs if job.listing is not None])
    local = local_setup_logs(base.cluster_name)
    wanted = [Wanted("setup", f, priority=0) for f in local]
    for job in jobs:
        if job.listing is not None and job.target.key not in shared:
            files = sorted(job.listing.files, key=lambda f: f.name)
            wanted += [Wanted(job.target.key, f, job.target.priority) for f in files]
    slices = allocate(wanted, base.max_bytes)
    by_source: dict[str, list[Slice]] = {}
    for piece in slices:
        if piece.kept:
            by_source.setdefault(piece.wanted.source, []).append(piece)
    fetching = [job for job in jobs if job.target.key in by_source]
    with ThreadPoolExecutor(max(1, min(MAX_THREADS, len(fetching)))) as pool:
        list(pool.map(lambda j: _fetch(j, by_source[j.target.key], staging, progress), fetching))
    blobs, unread = _read_local(by_source.get("setup", []), staging)
    for job in jobs:
        blobs.update(job.blobs)
        unread += job.unread
    parts = _parts(base.cluster_name, jobs, shared, slices, blobs, len(local))
    result = replace(base, parts=tuple(parts), slices=tuple(slices), unread=tuple(unread))
    kept = [(s, blobs[s.archive_name]) for s in slices if s.archive_name in blobs]
    return replace(result, archive_bytes=write_archive(result, kept))


def _parts(
    cluster_name: str,
    jobs: Sequence[_Job],
    shared: Mapping[str, str],
    slices: Sequence[Slice],
    blobs: Mapping[str, Path],
    local_count: int,
) -> list[Part]:
    kept: dict[str, list[int]] = {}
    for piece in slices:
        if piece.archive_name in blobs:
            kept.setdefault(piece.wanted.source, []).append(piece.keep)
    setup = kept.get("setup", [])
    problem = None if local_count else f"none on this machine ({cluster_dir(cluster_name)}/logs)"
    parts = [Part(LOCAL, "setup logs", "setup", len(setup), sum(setup), problem)]
    node_of = {job.target.key: job.target.node_id for job in jobs}
    for job in jobs:
        key, got, problem = job.target.key, kept.get(job.target.key, []), job.problem
        also = tuple(node_of[k] for k, first in shared.items() if first == key)
        if problem is None and job.listing is not None and not job.listing.files:
            problem = "no files there: " + ", ".join(job.listing.missing or job.target.paths)
        parts.append(Part(job.target.node_id, job.target.what, key, len(got), sum(got), problem))
        parts[-1] = replace(parts[-1], shared_with=shared.get(key), also=also)
    return parts


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1]}" if text else type(exc).__name__


def _last_line(output: str, code: int) -> str:
    lines = [line for line in output.strip().splitlines() if not line.startswith("@@")]
    return lines[-1] if lines else f"exit {code}"


def _survey(job: _Job, progress: Progress) -> None:
    who = f"{job.target.node_id} ({job.target.what})"
    try:
        job.runner = job.make_runner()
        why = job.runner.check_ready()
        if why is not None:
            job.problem = f"cannot reach it: {why}"
        else:
            lines: list[str] = []
            result = job.runner.run(
                survey_script(job.target.paths),
                job.env,
                timeout=SURVEY_TIMEOUT_S,
                echo=lines.append,
            )
            listing = parse_survey(lines, job.target.paths)
            if result.ok and listing.machine is not None:
                job.listing = listing
            else:
                job.problem = (
                    f"listing its files failed (exit {result.exit_code}): "
                    f"{_last_line(result.output_tail, result.exit_code)}"
                )
    except Exception as exc:  # any failure of one node is reported, the rest go on
        job.problem = f"cannot reach it: {_why(exc)}"
    if job.problem is not None:
        progress(f"{who}: {job.problem}")
    elif job.listing is not None:
        total = sum(f.size for f in job.listing.files)
        progress(f"{who}: {len(job.listing.files)} files, {format_size(total)}")


def pack_script(base: str) -> str:
    """Shell packing the files `~/BASE.plan` names (lines `head|tail BYTES PATH`, tab-
    separated) into `~/BASE.tar.gz` as members named by line number; prints `@@failed N`
    for a file it could not read."""
    home = f'"$HOME"/{shlex.quote(base)}'
    return "\n".join(
        [
            f"stage={home}.d; plan={home}.plan; out={home}.tar.gz",
            'rm -rf "$stage" && mkdir -p "$stage" || exit 2',
            "i=0",
            "tab=$(printf '\\t')",
            'while IFS="$tab" read -r mode bytes path; do',
            '  if [ "$mode" = tail ]; then tail -c "$bytes" "$path"; '
            'else head -c "$bytes" "$path"; fi > "$stage/$i" 2>/dev/null || echo "@@failed $i"',
            "  i=$((i + 1))",
            'done < "$plan"',
            'tar -C "$stage" -czf "$out" . || { rm -rf "$stage"; exit 3; }',
            'rm -rf "$stage" "$plan"',
            "echo @@packed",
        ]
    )


def _fetch(job: _Job, slices: Sequence[Slice], staging: Path, progress: Progress) -> None:
    runner = job.runner
    assert runner is not None
    base = f".launcher-dump-{uuid.uuid4().hex[:12]}"
    here = staging / base
    here.mkdir()
    plan = staging / f"{base}.plan"
    plan.write_text(
        "".join(
            f"{'head' if s.whole else 'tail'}\t{s.keep}\t{s.wanted.file.path}\n" for s in slices
        )
    )
    lines: list[str] = []
    try:
        runner.put(str(plan), f"~/{base}.plan")
        result = runner.run(pack_script(base), job.env, timeout=PACK_TIMEOUT_S, echo=lines.append)
        if not result.ok or "@@packed" not in lines:
            raise OSError(
                f"packing failed (exit {result.exit_code}): "
                f"{_last_line(result.output_tail, result.exit_code)}"
            )
        packed = staging / f"{base}.tar.gz"
        runner.get(f"~/{base}.tar.gz", str(packed))
        _unpack(packed, here, job, slices, lines)
    except Exception as exc:  # what could not be fetched is reported, the rest go on
        job.problem = f"fetching its files failed: {_why(exc)}"
        progress(f"{job.target.node_id} ({job.target.what}): {job.problem}")
    finally:
        with contextlib.suppress(Exception):
            clean = f'cd "$HOME" && rm -rf {base}.d {base}.plan {base}.tar.gz'
            runner.run(clean, job.env, timeout=SURVEY_TIMEOUT_S)


def _unpack(
    packed: Path, into: Path, job: _Job, slices: Sequence[Slice], lines: Sequence[str]
) -> None:
    failed = {
        int(line.split()[1])
        for line in lines
        if line.startswith("@@failed ") and line.split()[1].isdigit()
    }
    with tarfile.open(packed, "r:gz") as archive:
        for member in archive:
            name = PurePosixPath(member.name).name
            if not member.isfile() or not name.isdigit() or int(name) >= len(slices):
                continue
            if int(name) in failed:
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            blob = into / name
            with source, blob.open("wb") as target:
                while chunk := source.read(2**20):
                    target.write(chunk)
            job.blobs[slices[int(name)].archive_name] = blob
    job.unread += [s.archive_name for s in slices if s.archive_name not in job.blobs]


def local_setup_logs(cluster_name: str) -> list[FileInfo]:
    """The setup logs of the cluster's nodes kept on this machine (those of nodes since
    gone too)."""
    logs = cluster_dir(cluster_name) / "logs"
    found = []
    for path in sorted(logs.glob("*")) if logs.is_dir() else ():
        with contextlib.suppress(OSError):
            stat = path.stat()
            if path.is_file():
                found.append(FileInfo(str(path), stat.st_size, stat.st_mtime, path.name))
    return found


def _read_local(slices: Sequence[Slice], staging: Path) -> tuple[dict[str, Path], list[str]]:
    blobs: dict[str, Path] = {}
    unread = []
    (staging / "local").mkdir(exist_ok=True)
    for index, piece in enumerate(slices):
        blob = staging / "local" / str(index)
        try:
            with open(piece.wanted.file.path, "rb") as source:
                if not piece.whole:
                    source.seek(max(0, piece.wanted.file.size - piece.keep))
                blob.write_bytes(source.read(piece.keep))
        except OSError:
            unread.append(piece.archive_name)
            continue
        blobs[piece.archive_name] = blob
    return blobs, unread


def write_archive(result: DumpResult, blobs: Sequence[tuple[Slice, Path]]) -> int:
    """Write the tarball (a partial file renamed once complete); returns its size."""
    top = PurePosixPath(
        result.path.name.removesuffix(".gz").removesuffix(".tar").removesuffix(".tgz")
    )
    result.path.parent.mkdir(parents=True, exist_ok=True)
    partial = result.path.with_name(f".{result.path.name}.partial-{os.getpid()}")
    try:
        with tarfile.open(partial, "w:gz") as archive:
            summary = "\n".join(summary_lines(result)) + "\n"
            _add_bytes(archive, str(top / "MANIFEST.txt"), summary.encode(), result.when)
            manifest = json.dumps(manifest_json(result), indent=1) + "\n"
            _add_bytes(archive, str(top / "manifest.json"), manifest.encode(), result.when)
            for piece, blob in blobs:
                name, mtime = str(top / piece.archive_name), piece.wanted.file.mtime
                if piece.whole:
                    with blob.open("rb") as source:
                        archive.addfile(_info(name, blob.stat().st_size, mtime), source)
                else:
                    end = trim_to_line(blob.read_bytes())
                    _add_bytes(
                        archive, name, cut_header(piece.wanted.file.size, len(end)) + end, mtime
                    )
        partial.replace(result.path)
    finally:
        partial.unlink(missing_ok=True)
    return result.path.stat().st_size


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    return info


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    archive.addfile(_info(name, len(data), mtime), io.BytesIO(data))
