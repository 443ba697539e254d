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
import fnmatch
import io
import json
import shlex
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from launcher.cluster.dump_plan import (
    DEFAULT_MAX_BYTES,
    LOCAL,
    PS_SHORT,
    PS_VERBOSE,
    DumpResult,
    FileInfo,
    Listing,
    Part,
    Slice,
    Target,
    Wanted,
    allocate,
    autoscaler_target,
    cut_header,
    dump_name,
    format_size,
    info_target,
    manifest_json,
    parse_survey,
    ray_target,
    shared_with,
    summary_lines,
    survey_script,
    trim_to_line,
)
from launcher.cluster.head import connect, daemon_runner_of
from launcher.config.model import ClusterConfig
from launcher.errors import NoClusterError
from launcher.files import replacing
from launcher.paths import cluster_dir
from launcher.providers.base import Node, NodeKind, NodeProvider, head_of
from launcher.providers.factory import make_provider
from launcher.runners.base import CommandRunner
from launcher.updater.runner import node_runner

MAX_THREADS = 8
SURVEY_TIMEOUT_S = 120.0
PACK_TIMEOUT_S = 600.0


# -- gathering (actions) ---------------------------------------------------------------

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DumpOptions:
    """What to gather, as `ray cluster-dump`'s flags say it (the same defaults)."""

    output: Path | None = None  # default: dump_name(...).tar.gz in the current directory
    max_bytes: int = DEFAULT_MAX_BYTES
    logs: bool = True  # Ray's session logs of each node
    debug_state: bool = True  # Ray's debug_state*.txt (with its logs, or alone without)
    pip: bool = True  # each node's installed Python packages
    processes: bool = True  # each node's running processes
    processes_verbose: bool = True  # with user, CPU, memory and command line
    local: bool = False  # this machine's packages and processes too


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
                # The autoscaler's files are where it runs.
                return daemon_runner_of(provider, made) if daemon else made

            return make

        head = session.head
        jobs = [_Job(autoscaler_target(head), runner(head, daemon=True), session.env)]
        for n in nodes:
            env = provider.access.node_env(n, head)
            if options.logs or options.debug_state:
                target = ray_target(config, n, debug_state_only=not options.logs)
                jobs.append(_Job(target, runner(n), env))
            info = info_target(n, options.pip, options.processes, options.processes_verbose)
            if info is not None:
                jobs.append(_Job(info, runner(n), env))
        base = DumpResult(output, config.cluster_name, when, options.max_bytes, tuple(nodes), ())
        local = _local_info(staging, options) if options.local else []
        return _gather(
            base,
            jobs,
            staging,
            _locked(progress or (lambda _line: None)),
            local,
            skip_debug_state=not options.debug_state,
        )


def _locked(progress: Progress) -> Progress:
    lock = threading.Lock()

    def report(line: str) -> None:
        with lock:
            progress(line)

    return report


def _local_info(staging: Path, options: DumpOptions) -> list[FileInfo]:
    """This machine's packages (of the launcher's own Python) and processes, as files."""
    folder = staging / "this-machine"
    folder.mkdir()
    made: list[FileInfo] = []
    commands = {
        "pip.txt": [sys.executable, "-m", "pip", "list", "--format=freeze"],
        "processes.txt": [
            "ps",
            "-ww",
            "-eo",
            PS_VERBOSE if options.processes_verbose else PS_SHORT,
        ],
    }
    for name, command in commands.items():
        try:
            done = subprocess.run(command, capture_output=True, timeout=60, check=False)
            text = done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired) as exc:
            text = f"{' '.join(command)}: {exc}\n".encode()
        path = folder / name
        path.write_bytes(text)
        made.append(FileInfo(str(path), len(text), time.time(), f"this-machine/{name}"))
    return made


def _gather(
    base: DumpResult,
    jobs: list[_Job],
    staging: Path,
    progress: Progress,
    local_info: Sequence[FileInfo] = (),
    skip_debug_state: bool = False,
) -> DumpResult:
    with ThreadPoolExecutor(min(MAX_THREADS, len(jobs))) as pool:
        list(pool.map(lambda job: _survey(job, progress), jobs))
    for job in jobs:
        if job.listing is not None:
            job.listing = _kept(job.listing, job.target.only, skip_debug_state)
    shared = shared_with([(job.target, job.listing) for job in jobs if job.listing is not None])
    local = local_setup_logs(base.cluster_name)
    wanted = [Wanted("setup", f, priority=0) for f in [*local, *local_info]]
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


def _kept(listing: Listing, only: str, skip_debug_state: bool) -> Listing:
    """`listing` less what the dump leaves out: files not matching `only`, and Ray's
    debug_state*.txt when they are not wanted."""

    def wanted(info: FileInfo) -> bool:
        name = PurePosixPath(info.path).name
        if only and not fnmatch.fnmatch(name, only):
            return False
        return not (skip_debug_state and fnmatch.fnmatch(name, "debug_state*.txt"))

    return replace(listing, files=tuple(f for f in listing.files if wanted(f)))


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
            script = survey_script(job.target.paths)
            if job.target.prepare:
                script = f"( {job.target.prepare}\n) >/dev/null 2>&1\n{script}"
            result = job.runner.run(
                script,
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
            if job.target.cleanup:
                clean = f"{clean}; {job.target.cleanup}"
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
    with replacing(result.path) as partial, tarfile.open(partial, "w:gz") as archive:
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
                _add_bytes(archive, name, cut_header(piece.wanted.file.size, len(end)) + end, mtime)
    return result.path.stat().st_size


def _info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    return info


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    archive.addfile(_info(name, len(data), mtime), io.BytesIO(data))
