"""`launcher cluster-dump`: the size budget, truncation, deduplication and summary as pure
functions; the gathering on localhost nodes without Ray (one node unreachable through a
fake runner); and one real localhost cluster with real Ray."""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from launcher.cluster import dump as dump_module
from launcher.cluster.dump import DumpOptions, dump
from launcher.cluster.dump_plan import (
    DumpResult,
    FileInfo,
    Listing,
    Part,
    Slice,
    Target,
    Wanted,
    allocate,
    cut_header,
    dump_name,
    format_size,
    parse_size,
    parse_survey,
    ray_logs_path,
    shared_with,
    shell_path,
    summary_lines,
    trim_to_line,
)
from launcher.config.loader import parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import NoClusterError, UsageError
from launcher.paths import cluster_dir, node_log
from launcher.providers.base import Node, NodeKind, NodeProvider, NodeState
from launcher.providers.localhost.provider import LocalhostProvider
from launcher.runners.base import CommandResult, CommandRunner, OutputSink
from launcher.updater.runner import node_runner as real_node_runner
from tests.cluster_helpers import cluster_config, run, status
from tests.conftest import run_cli
from tests.test_localhost_cluster import cluster, launcher_home  # noqa: F401 - fixtures

KiB = 1024


# -- pure parts ------------------------------------------------------------------------


def test_sizes_parse_with_units_of_1024() -> None:
    assert parse_size("200MB") == 200 * 2**20
    assert parse_size("1.5g") == int(1.5 * 2**30)
    assert parse_size("512KiB") == 512 * KiB
    assert parse_size("1000") == 1000
    with pytest.raises(UsageError, match="not a size"):
        parse_size("lots")
    assert [format_size(n) for n in (0, 1023, 1536, 5 * 2**20, 2**40)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 MiB",
        "1024.0 GiB",
    ]


def _wanted(name: str, size: int, mtime: float = 0.0, priority: int = 1) -> Wanted:
    return Wanted("ray/n", FileInfo(f"/logs/{name}", size, mtime, name), priority)


def test_everything_fits_so_everything_is_kept_whole() -> None:
    files = [_wanted("a", 10), _wanted("b", 0), _wanted("c", 500)]
    slices = allocate(files, 1000, min_slice=1)
    assert [s.keep for s in slices] == [10, 0, 500]
    assert all(s.whole and s.kept for s in slices)  # the empty file is kept too


def test_small_files_whole_large_files_share_the_rest_and_keep_their_end() -> None:
    files = [_wanted("small", 100), _wanted("big", 10_000), _wanted("bigger", 50_000)]
    slices = allocate(files, 3_100, min_slice=1)
    assert [s.keep for s in slices] == [100, 1_500, 1_500]
    assert sum(s.keep for s in slices) <= 3_100
    assert [s.whole for s in slices] == [True, False, False]


def test_the_budget_is_never_exceeded() -> None:
    sizes = [7, 70, 700, 7_000, 70_000, 1, 0, 333, 4_096]
    files = [_wanted(str(i), s, mtime=i % 4) for i, s in enumerate(sizes)]
    for budget in (0, 1, 100, 1_000, 10_000, 50_000, 10**6):
        for min_slice in (1, 100, 5_000, 10**6):
            slices = allocate(files, budget, min_slice=min_slice)
            assert sum(s.keep for s in slices) <= budget
            assert all(0 <= s.keep <= s.wanted.file.size for s in slices)
            if budget >= sum(sizes):
                assert all(s.whole for s in slices)


def test_too_many_large_files_leaves_the_oldest_out_rather_than_crumbs() -> None:
    files = [
        _wanted("old", 10 * KiB, mtime=1),
        _wanted("new", 10 * KiB, mtime=3),
        _wanted("middle", 10 * KiB, mtime=2),
        _wanted("setup.log", 10 * KiB, mtime=0, priority=0),  # the launcher's own: first
    ]
    slices = allocate(files, 9 * KiB, min_slice=4 * KiB)
    kept = {s.wanted.file.name: s.keep for s in slices}
    assert kept == {"setup.log": 4608, "new": 4608, "old": 0, "middle": 0}
    assert not next(s for s in slices if s.wanted.file.name == "old").kept
    # A limit below one slice still keeps the end of the first-ranked file.
    tiny = allocate(files, 3 * KiB, min_slice=4 * KiB)
    assert [s.keep for s in tiny] == [0, 0, 0, 3 * KiB]
    # A chosen file smaller than its share is kept whole, and the rest goes to the others.
    mixed = [_wanted("a", 9 * KiB, mtime=3), _wanted("b", 50 * KiB, mtime=2)]
    mixed += [_wanted(f"old{i}", 50 * KiB, mtime=1) for i in range(2)]
    kept_mixed = [s.keep for s in allocate(mixed, 20 * KiB, min_slice=8 * KiB)]
    assert kept_mixed == [9 * KiB, 11 * KiB, 0, 0]


def test_a_cut_file_says_so_and_starts_at_a_whole_line() -> None:
    assert trim_to_line(b"tial line\nline 2\nline 3\n") == b"line 2\nline 3\n"
    assert trim_to_line(b"x" * 10_000) == b"x" * 10_000  # no line end near: kept as is
    header = cut_header(1000, 100).decode()
    assert "first 900 bytes" in header and "last 100 of 1000" in header
    assert header.endswith("\n")


def test_dump_name_has_cluster_and_local_time() -> None:
    name = dump_name("demo", 0.0)
    assert name.startswith("launcher-dump-demo-19")
    assert len(name) == len("launcher-dump-demo-") + len("YYYYmmdd-HHMMSS")


def test_shell_paths_expand_variables_and_home_only() -> None:
    assert shell_path("$LAUNCHER_TEMP_DIR") == '"$LAUNCHER_TEMP_DIR"'
    assert shell_path("~/ray-tmp") == '"$HOME"/ray-tmp'
    assert shell_path("/tmp/my dir") == "'/tmp/my dir'"
    assert shell_path("/tmp/$(rm -rf x)") == "'/tmp/$(rm -rf x)'"


def _config(extra: str = "") -> ClusterConfig:
    return parse_config(cluster_config("dumpunit", extra=extra), "inline")


def _node(node_id: str, kind: NodeKind, node_type: str) -> Node:
    return Node(node_id, kind, node_type, "127.0.0.9", NodeState.RUNNING)


def test_ray_logs_are_under_the_temp_dir_the_start_commands_give() -> None:
    config = _config()  # the localhost defaults: the cluster's temp dir, a worker's own
    head, worker = _node("h", NodeKind.HEAD, "head"), _node("w", NodeKind.WORKER, "worker")
    assert ray_logs_path(config, head) == '"$LAUNCHER_TEMP_DIR"/session_latest/logs'
    assert ray_logs_path(config, worker) == '"$LAUNCHER_NODE_TEMP_DIR"/session_latest/logs'
    own = _config(
        "head_start_ray_commands: [ray start --head]\n"
        "worker_start_ray_commands: ['ray start --address=x:1 --temp-dir /data/ray']\n"
    )
    assert ray_logs_path(own, worker) == "/data/ray/session_latest/logs"
    # A worker without --temp-dir uses the head's, as Ray's workers do.
    shared = _config(
        "head_start_ray_commands: ['ray start --head --temp-dir /data/ray']\n"
        "worker_start_ray_commands: ['ray start --address=x:1']\n"
    )
    assert ray_logs_path(shared, worker) == "/data/ray/session_latest/logs"
    assert ray_logs_path(own, head) == '"${RAY_TMPDIR:-${TMPDIR:-/tmp}}"/ray/session_latest/logs'


def test_survey_output_is_parsed_amid_login_shell_noise() -> None:
    lines = [
        "Welcome to the node!",
        "@@machine 1234-abcd mnt:[4026531841]",
        "@@root 0 /tmp/ray/session_2026/logs",
        "@@file 0 120 1700000000 /tmp/ray/session_2026/logs/raylet.out",
        "@@file 0 0 1700000001 /tmp/ray/session_2026/logs/events/event_GCS.log",
        "@@file 0 12 bad /tmp/ray/session_2026/logs/broken",
        "@@missing 1",
    ]
    listing = parse_survey(lines, ['"$X"/logs', "/nowhere"])
    assert listing.machine == "1234-abcd mnt:[4026531841]"
    assert listing.roots == ("/tmp/ray/session_2026/logs",)
    assert listing.missing == ("/nowhere",)
    assert [(f.name, f.size) for f in listing.files] == [
        ("raylet.out", 120),
        ("events/event_GCS.log", 0),
    ]
    no_boot_id = parse_survey(["@@machine  mnt:[1]"], ["/x"])
    assert no_boot_id.machine is None  # not known to be the same machine as any other


def test_a_directory_nodes_share_on_one_machine_is_gathered_once() -> None:
    def ray(node: str) -> Target:
        return Target(f"ray/{node}", node, "Ray logs", ("d",), shareable=True)

    same = Listing("boot-1 mnt:[1]", ("/tmp/t/session_1/logs",), (), ())
    other_machine = Listing("boot-2 mnt:[1]", ("/tmp/t/session_1/logs",), (), ())
    container = Listing("boot-1 mnt:[7]", ("/tmp/t/session_1/logs",), (), ())
    unknown = Listing(None, ("/tmp/t/session_1/logs",), (), ())
    listings = [
        (ray("h"), same),
        (ray("w1"), same),
        (ray("w2"), other_machine),
        (ray("w3"), container),
        (ray("w4"), unknown),
        (ray("w5"), same),
    ]
    assert shared_with(listings) == {"ray/w1": "ray/h", "ray/w5": "ray/h"}


def test_summary_names_what_was_gathered_shared_unreachable_and_cut() -> None:
    nodes = (_node("h-1", NodeKind.HEAD, "head"), _node("w-2", NodeKind.WORKER, "worker"))
    big = Wanted("ray/h-1", FileInfo("/l/raylet.out", 5 * 2**20, 0, "raylet.out"))
    gone = Wanted("ray/h-1", FileInfo("/l/old.log", 2**20, 0, "old.log"))
    result = DumpResult(
        Path("d.tar.gz"),
        "demo",
        0.0,
        2 * 2**20,
        nodes,
        (
            Part("this machine", "setup logs", "setup", 2, 300),
            Part("h-1", "autoscaler", "autoscaler", 2, 500),
            Part("h-1", "Ray logs", "ray/h-1", 30, 2**20, also=("w-3",)),
            Part("w-3", "Ray logs", "ray/w-3", shared_with="ray/h-1"),
            Part("w-2", "Ray logs", "ray/w-2", problem="cannot reach it: connection refused"),
        ),
        (Slice(big, 2**20), Slice(gone, 0)),
    )
    text = "\n".join(summary_lines(result))
    assert "w-2 Ray logs: cannot reach it: connection refused" in text
    assert "ray/h-1/ (also w-3's)" in text
    assert "w-3            Ray logs    in ray/h-1/" in text
    assert "ray/h-1/raylet.out: kept its last 1.0 MiB of 5.0 MiB" in text
    assert "ray/h-1/old.log: left out (1.0 MiB)" in text
    short = "\n".join(summary_lines(result, cut_limit=1))
    assert "... and 1 more (see MANIFEST.txt)" in short
    assert result.gathered_from_cluster


# -- gathering on localhost nodes, without Ray -----------------------------------------


class Unreachable:
    """A node's runner that cannot reach it (as an SSH runner to a dead machine)."""

    def check_ready(self) -> str | None:
        return "ssh 10.0.0.9: connection refused"

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
        raise OSError("ssh 10.0.0.9: connection refused")

    def put(self, local: str, remote: str, *, excludes: tuple[str, ...] = ()) -> None:
        raise OSError("unreachable")

    def get(self, remote: str, local: str) -> None:
        raise OSError("unreachable")

    def remote_path(self, path: str) -> str:
        return path


class DropsAfterListing(Unreachable):
    """Answers the check, then the connection drops on every command."""

    def check_ready(self) -> str | None:
        return None


@pytest.fixture
def nodes_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ClusterConfig, LocalhostProvider, list[Node]]]:
    """A localhost cluster's node records (a head, three workers whose start commands give
    no temp dir, so that they share the head's) with made-up logs where each would have
    them, and no Ray."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "launcher-home"))
    shared = "worker_start_ray_commands: ['ray start --address=$RAY_HEAD_IP:$LAUNCHER_RAY_PORT']\n"
    config = parse_config(cluster_config(f"dump{tmp_path.name[-12:]}", extra=shared), "inline")
    provider = LocalhostProvider(config)
    head = provider.create_nodes(config.node_types["head"], NodeKind.HEAD, 1, {})[0]
    workers = provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, 3, {})
    for node in (head, *workers):
        log = node_log(config.cluster_name, node.id)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"setting up {node.id}\n")
    head_dir = cluster_dir(config.cluster_name) / "localhost" / "nodes" / head.id / "home"
    (head_dir / ".launcher" / "head").mkdir(parents=True)
    (head_dir / ".launcher" / "head" / "monitor.log").write_text("autoscaler for cluster x\n")
    (head_dir / ".launcher" / "head" / "autoscaler-state.json").write_text("{}")
    (head_dir / ".launcher" / "head" / "timeline.jsonl").write_text('{"kind":"sample"}\n')
    session = Path(provider.temp_dir()) / "session_2026-01-01_00-00-00_1"
    (session / "logs" / "events").mkdir(parents=True)
    (Path(provider.temp_dir()) / "session_latest").symlink_to(session)
    raylet = "".join(f"line {i} of the raylet\n" for i in range(20_000))
    (session / "logs" / "raylet.out").write_text(raylet)
    (session / "logs" / "gcs_server.out").write_text("gcs started\n")
    (session / "logs" / "raylet.err").write_text("")
    (session / "logs" / "events" / "event_GCS.log").write_text("{}\n")
    yield config, provider, [head, *workers]
    shutil.rmtree(provider.temp_dir(), ignore_errors=True)


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        top = path.name.removesuffix(".tar.gz")
        found = {}
        for member in archive.getmembers():
            assert member.name.startswith(top + "/")
            data = archive.extractfile(member)
            assert data is not None
            found[member.name[len(top) + 1 :]] = data.read()
        return found


def _unreachable(monkeypatch: pytest.MonkeyPatch, runners: dict[str, CommandRunner]) -> None:
    """Nodes in `runners` are reached through those; the others as the provider does."""

    def node_runner(
        provider: NodeProvider, config: ClusterConfig, node: Node, log: Path
    ) -> CommandRunner:
        return runners.get(node.id) or real_node_runner(provider, config, node, log)

    monkeypatch.setattr(dump_module, "node_runner", node_runner)


def test_dump_gathers_every_node_once_and_names_the_unreachable_one(
    nodes_here: tuple[ClusterConfig, LocalhostProvider, list[Node]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, provider, (head, shared, dead, dropping) = nodes_here
    _unreachable(monkeypatch, {dead.id: Unreachable(), dropping.id: DropsAfterListing()})
    lines: list[str] = []
    out = tmp_path / "out" / "d.tar.gz"
    result = dump(
        config,
        DumpOptions(output=out, max_bytes=200 * KiB),
        lines.append,
        provider=provider,
    )
    assert result.path == out and out.is_file() and result.gathered_from_cluster
    files = _members(out)
    # The setup logs kept here, the autoscaler's files, Ray's logs once (one machine).
    for node in (head, shared, dead, dropping):
        assert files[f"setup/{node.id}.log"] == f"setting up {node.id}\n".encode()
    assert files["autoscaler/monitor.log"].startswith(b"autoscaler for cluster")
    assert files["autoscaler/autoscaler-state.json"] == b"{}"
    assert files["autoscaler/timeline.jsonl"] == b'{"kind":"sample"}\n'
    assert files[f"ray/{head.id}/gcs_server.out"] == b"gcs started\n"
    assert files[f"ray/{head.id}/raylet.err"] == b""
    assert f"ray/{head.id}/events/event_GCS.log" in files
    assert not [name for name in files if name.startswith(f"ray/{shared.id}/")]
    # The raylet's log is larger than the limit: its end, from a whole line, said so.
    raylet = files[f"ray/{head.id}/raylet.out"].decode()
    assert raylet.startswith("[launcher cluster-dump: the first ")
    assert raylet.endswith("line 19999 of the raylet\n")
    assert raylet.splitlines()[1].startswith("line ")
    assert sum(len(v) for k, v in files.items() if not k.startswith("manifest")) < 210 * KiB
    # The summary says what was not gathered and why, in the tarball and the result.
    manifest = files["MANIFEST.txt"].decode()
    assert f"{dead.id} Ray logs: cannot reach it: ssh 10.0.0.9: connection refused" in manifest
    assert f"{dropping.id} Ray logs: cannot reach it: OSError: ssh 10.0.0.9" in manifest
    assert f"ray/{head.id}/ (also {shared.id}'s)" in manifest
    assert f"ray/{head.id}/raylet.out: kept its last" in manifest
    parts = {p["node_id"] + " " + p["what"]: p for p in json.loads(files["manifest.json"])["parts"]}
    assert parts[f"{shared.id} Ray logs"]["shared_with"] == f"ray/{head.id}"
    assert parts[f"{dead.id} Ray logs"]["files"] == 0
    assert any(dead.id in line and "cannot reach it" in line for line in lines)  # progress


def test_nothing_from_the_cluster_still_writes_the_dump_and_exits_1(
    nodes_here: tuple[ClusterConfig, LocalhostProvider, list[Node]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, _provider, nodes = nodes_here

    _unreachable(monkeypatch, {n.id: Unreachable() for n in nodes})
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config(config.cluster_name))
    out = tmp_path / "only-local.tar.gz"
    result = run_cli("cluster-dump", str(path), "-o", str(out))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert result.exception is None
    assert "nothing could be gathered from the cluster's nodes" in result.stderr
    assert f"{nodes[0].id} autoscaler: cannot reach it" in result.stdout
    files = _members(out)
    assert {f"setup/{n.id}.log" for n in nodes} <= set(files)
    assert not [name for name in files if name.startswith(("ray/", "autoscaler/"))]


def test_a_cluster_that_is_not_running_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "cluster.yaml"
    path.write_text(cluster_config("dumpnone"))
    result = run_cli("cluster-dump", str(path))
    assert result.exit_code == 1 and result.exception is None
    assert result.stderr.strip() == (
        f"error: cluster dumpnone is not running; start it with `launcher up {path}`"
    )
    assert not list(tmp_path.glob("*.tar.gz"))
    with pytest.raises(NoClusterError):
        dump(parse_config(cluster_config("dumpnone"), "inline"), DumpOptions())


# -- a real localhost cluster with real Ray --------------------------------------------


def test_dump_of_a_real_cluster_holds_every_nodes_logs(
    cluster: tuple[str, Path],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    name, path = cluster
    up = run("up", "-y", str(path))
    assert up.returncode == 0, up.stderr
    nodes = status(path)["nodes"]
    assert len(nodes) == 2
    head = next(n for n in nodes if n["kind"] == "head")
    out_dir = tmp_path / "dumps"
    out_dir.mkdir()
    done = run("cluster-dump", str(path), cwd=out_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    (tarball,) = out_dir.glob(f"launcher-dump-{name}-*.tar.gz")
    assert f"Wrote {tarball}" in done.stdout
    files = _members(tarball)
    for node in nodes:  # each ran the config's setup command
        assert b"setup-count" in files[f"setup/{node['id']}.log"]
    assert b"autoscaler for cluster" in files["autoscaler/monitor.log"]
    assert "autoscaler/autoscaler-state.json" in files
    # Each node's Ray logs under its own name: the head's (with the GCS's) from the
    # cluster's Ray temp dir, each worker's from its own; each with its raylet's log.
    assert files[f"ray/{head['id']}/gcs_server.out"]
    for node in nodes:
        raylets = [v.decode() for k, v in files.items() if k.startswith(f"ray/{node['id']}/raylet")]
        assert any(f"node_manager address: {node['ip']}:" in log for log in raylets), node
    parts = json.loads(files["manifest.json"])["parts"]
    assert not [p for p in parts if p.get("shared_with")]
    assert "Not gathered" not in files["MANIFEST.txt"].decode()
    # As `ray cluster-dump` by default: each node's packages and processes.
    for node in nodes:
        assert b"ray==" in files[f"info/{node['id']}/pip.txt"].lower()
        assert b"raylet" in files[f"info/{node['id']}/processes.txt"]
    # Ray's flags: no packages or processes, no logs but Ray's debug state, this machine's.
    lean = run(
        "cluster-dump",
        str(path),
        "--no-pip",
        "--no-processes",
        "--no-logs",
        "-L",
        "-T",
        str(out_dir / "lean.tar.gz"),
        cwd=out_dir,
    )
    assert lean.returncode == 0, lean.stdout + lean.stderr
    names = set(_members(out_dir / "lean.tar.gz"))
    assert not [n for n in names if n.startswith("info/")]
    ray_files = [n for n in names if n.startswith("ray/")]
    assert ray_files and all(n.rsplit("/", 1)[-1].startswith("debug_state") for n in ray_files)
    assert {"setup/this-machine/pip.txt", "setup/this-machine/processes.txt"} <= names

    down = run("down", "-y", str(path))
    assert down.returncode == 0, down.stderr
    after = run("cluster-dump", str(path), cwd=out_dir)
    assert after.returncode == 1
    assert after.stderr.strip().splitlines() == [
        f"error: cluster {name} is not running; start it with `launcher up {path}`"
    ]
