"""`launcher cluster-dump`, the pure part: where each node's logs are, which nodes share a
directory, how the size limit is shared out, how a cut file is marked, and the summary
and manifest of a dump. The gathering itself is in `launcher.cluster.dump`.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.autoscaler.spec import LOG_FILE, STATE_FILE, TIMELINE_FILE
from launcher.config.model import ClusterConfig
from launcher.errors import UsageError
from launcher.providers.base import Node, NodeKind
from launcher.runners.ray_node import node_temp_dir_option

DEFAULT_MAX_BYTES = 200 * 2**20
# Below this a file's share is not worth reading: files are left out instead.
MIN_SLICE_BYTES = 64 * 2**10
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


def ray_logs_path(config: ClusterConfig, node: Node) -> str:
    """Shell word for the directory of Ray's logs on `node`: `session_latest/logs` under
    the temp dir its start commands give Ray (`--temp-dir`); a worker without one uses the
    head's (Ray's workers take the head's temp dir), else Ray's default."""
    temp = node_temp_dir_option(
        config.head_start_ray_commands,
        config.worker_start_ray_commands,
        head=node.kind is NodeKind.HEAD,
    )
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
    prepare: str = ""  # shell run on the node before its files are listed (makes them)
    cleanup: str = ""  # shell run on the node once they are fetched
    only: str = ""  # a glob: of the files found, only those whose name matches it


def autoscaler_target(head: Node) -> Target:
    paths = (shell_path(LOG_FILE), shell_path(STATE_FILE), shell_path(TIMELINE_FILE))
    return Target("autoscaler", head.id, "autoscaler", paths, priority=0)


def ray_target(config: ClusterConfig, node: Node, debug_state_only: bool = False) -> Target:
    """Ray's session logs of `node` (`debug_state_only`: only its debug_state*.txt files)."""
    paths = (ray_logs_path(config, node),)
    if debug_state_only:
        return Target(
            f"ray/{node.id}",
            node.id,
            "Ray debug state",
            paths,
            shareable=True,
            only="debug_state*.txt",
        )
    return Target(f"ray/{node.id}", node.id, "Ray logs", paths, shareable=True)


INFO_DIR = ".launcher-dump-info"  # under the node's home, while a dump runs
# `ps` columns: the short list names each process and its parent; verbose adds its user,
# CPU and memory use and whole command line (as `ray cluster-dump --processes-verbose`).
PS_SHORT = "pid,ppid,etime,comm"
PS_VERBOSE = "pid,ppid,user,%cpu,%mem,rss,etime,args"


def info_script(pip: bool, processes: bool, verbose: bool) -> str:
    """Shell writing the node's installed Python packages (`pip.txt`: its python3's) and
    running processes (`processes.txt`) into ~/INFO_DIR."""
    lines = [f'd="$HOME"/{INFO_DIR}', 'rm -rf "$d" && mkdir -p "$d" || exit 2']
    if pip:
        lines.append(
            '{ python3 -m pip list --format=freeze 2>&1 || pip freeze 2>&1; } > "$d/pip.txt"'
        )
    if processes:
        columns = PS_VERBOSE if verbose else PS_SHORT
        lines.append(f'ps -ww -eo {columns} > "$d/processes.txt" 2>&1')
    return "\n".join(lines)


def info_target(node: Node, pip: bool, processes: bool, verbose: bool) -> Target | None:
    """The node's packages and processes, made on it for the dump; None when neither."""
    if not (pip or processes):
        return None
    what = " and ".join(w for w, on in (("packages", pip), ("processes", processes)) if on)
    return Target(
        f"info/{node.id}",
        node.id,
        what,
        (f'"$HOME"/{INFO_DIR}',),
        prepare=info_script(pip, processes, verbose),
        cleanup=f'rm -rf "$HOME"/{INFO_DIR}',
    )


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
