"""The tar copies of the Kubernetes runner (launcher/runners/kube_copy.py) make the tree
`rsync -a` makes, for every shape of source and target: here the pod's side of the copy
(its `sh` scripts and `tar`) runs on this machine, and the result is compared with rsync's
on the same tree."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from launcher.runners import kube_copy

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync to compare")


def make_source(root: Path) -> Path:
    tree = root / "src"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o751)
    (tree / "secret").write_text("s")
    (tree / "secret").chmod(0o600)
    (tree / "sub" / "b.txt").write_text("b")
    (tree / "sub" / "deeper" / "c.log").write_text("c")
    (tree / "skip.log").write_text("skipped")
    (tree / "link").symlink_to("a.txt")
    (tree / "abs-link").symlink_to("/nonexistent/target")
    (tree / "sub").chmod(0o750)
    os.link(tree / "a.txt", tree / "hard.txt")
    for path in [*tree.rglob("*"), tree]:
        os.utime(path, (1_600_000_000, 1_600_000_000), follow_symlinks=False)
    (root / "one.txt").write_text("one")
    (root / "one.txt").chmod(0o640)
    os.utime(root / "one.txt", (1_500_000_000, 1_500_000_000))
    return tree


def shape(root: Path) -> dict[str, str]:
    """Every entry under `root` with its kind, content, mode and mtime (and `root`'s own;
    times the copy did not set read "now")."""
    found = {}
    for path in sorted([root, *root.rglob("*")]):
        name = str(path.relative_to(root))
        info = path.lstat()
        mtime = int(info.st_mtime) if info.st_mtime < 1_700_000_000 else "now"
        if path.is_symlink():
            found[name] = f"-> {path.readlink()}"
        elif path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            found[name] = f"{digest} {info.st_mode:o} {mtime} n{info.st_nlink}"
        else:
            found[name] = f"/ {info.st_mode:o} {mtime}"
    return found


def rsync(source: str, target: str, excludes: tuple[str, ...] = ()) -> None:
    Path(target.rstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    args = ["rsync", "-a", *(f"--exclude={p}" for p in excludes), source, target]
    subprocess.run(args, check=True, capture_output=True)


def put_like_the_pod(source: str, target: str, excludes: tuple[str, ...] = ()) -> None:
    """A put with the pod's side run here: the tar piped into PUT_SCRIPT."""
    plan = kube_copy.plan_put(source)
    buffer = io.BytesIO()
    kube_copy.write_tar(plan, excludes, buffer)
    result = subprocess.run(
        kube_copy.put_argv(plan, target), input=buffer.getvalue(), capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr


def get_like_the_pod(source: str, target: str) -> None:
    result = subprocess.run(kube_copy.get_argv(source), capture_output=True, check=True)
    kube_copy.extract_tar(io.BytesIO(result.stdout), source, target)


PUT_CASES = [  # (source relative to the root, target relative to the destination, excludes)
    ("src", "missing", ()),
    ("src/", "missing", ()),
    ("src", "present", ()),
    ("src/", "present", ()),
    ("src/", "present/", ()),
    ("src", "deep/er/missing", ()),
    ("src/", "present/", ("*.log",)),
    ("src/", "present", ("/sub/deeper", "/secret")),
    ("src", "present", ("/src/sub", "/secret")),  # anchored at the transfer's root
    ("src", "present", ("sub/deeper",)),
    ("src", "present", ("src",)),
    ("src/", "present", ("sub",)),
    ("one.txt", "present", ()),
    ("one.txt", "missing.txt", ()),
    ("one.txt", "newdir/", ()),
    ("one.txt", "deep/er/one-renamed", ()),
    ("one.txt", "afile", ()),
    ("src/link", "present", ()),
    ("src/abs-link", "renamed-link", ()),
]


def _destination(root: Path) -> Path:
    out = root
    (out / "present").mkdir(parents=True)
    (out / "present" / "old").write_text("kept")
    (out / "afile").write_text("replaced")
    return out


@pytest.mark.parametrize(("source", "target", "excludes"), PUT_CASES)
def test_a_put_makes_the_tree_rsync_makes(
    tmp_path: Path, source: str, target: str, excludes: tuple[str, ...]
) -> None:
    make_source(tmp_path)
    results = {}
    for how, copy in (("rsync", rsync), ("tar", put_like_the_pod)):
        out = _destination(tmp_path / how)
        copy(f"{tmp_path}/{source}", f"{out}/{target}", excludes)
        results[how] = shape(out)
    assert results["tar"] == results["rsync"]


GET_CASES = [(source, target) for source, target, excludes in PUT_CASES if not excludes]


@pytest.mark.parametrize(("source", "target"), GET_CASES)
def test_a_get_makes_the_tree_rsync_makes(tmp_path: Path, source: str, target: str) -> None:
    make_source(tmp_path)
    results = {}
    for how, copy in (("rsync", rsync), ("tar", get_like_the_pod)):
        out = _destination(tmp_path / how)
        copy(f"{tmp_path}/{source}", f"{out}/{target}")
        results[how] = shape(out)
    assert results["tar"] == results["rsync"]


def test_a_put_of_a_missing_source_says_so(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="no such file"):
        kube_copy.plan_put(str(tmp_path / "nothing"))


def test_a_get_of_a_missing_source_fails_in_the_pod(tmp_path: Path) -> None:
    result = subprocess.run(
        kube_copy.get_argv(str(tmp_path / "nothing")), capture_output=True, check=False
    )
    assert result.returncode != 0
    assert b"no such file" in result.stderr


def _archive(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    buffer.seek(0)
    return buffer


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o755 if kind in (tarfile.DIRTYPE, tarfile.SYMTYPE) else 0o644
    return info


@pytest.mark.parametrize(
    "members",
    [
        [(_entry("d", tarfile.DIRTYPE), b""), (_entry("d/../../escaped"), b"x")],
        [(_entry("/abs-escaped"), b"x")],
        [
            (_entry("d", tarfile.DIRTYPE), b""),
            (_entry("d/out", tarfile.SYMTYPE, "../../outside"), b""),
            (_entry("d/out/escaped"), b"x"),
        ],
        [(_entry("d", tarfile.DIRTYPE), b""), (_entry("d/h", tarfile.LNKTYPE, "../../x"), b"")],
    ],
    ids=["dotdot", "absolute", "through-a-symlink", "hard-link-out"],
)
def test_a_get_refuses_an_archive_that_leads_outside(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    (tmp_path / "outside").mkdir()
    with pytest.raises(kube_copy.UnsafeArchive):
        kube_copy.extract_tar(_archive(*members), "/pod/d", str(tmp_path / "dest" / "here"))
    assert not list((tmp_path / "outside").iterdir())
    assert not (tmp_path / "escaped").exists()
    assert not Path("/abs-escaped").exists()


def test_a_get_replaces_a_symlink_in_the_way_instead_of_writing_through_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "victim").write_text("untouched")
    dest = tmp_path / "dest"
    (dest / "d").mkdir(parents=True)
    (dest / "d" / "f").symlink_to(tmp_path / "victim")
    archive = _archive((_entry("d", tarfile.DIRTYPE), b""), (_entry("d/f"), b"new"))
    kube_copy.extract_tar(archive, "/pod/d", str(dest))
    assert (tmp_path / "victim").read_text() == "untouched"
    assert (dest / "d" / "f").read_text() == "new"
    assert not (dest / "d" / "f").is_symlink()


def test_a_put_streams_its_tar_in_pieces(tmp_path: Path) -> None:
    """The tar is written as it is built: a 20 MB file arrives in pieces of at most
    BUFFER_BYTES, never as one."""
    (tmp_path / "big").write_bytes(os.urandom(20 << 20))
    sizes: list[int] = []

    class Counting:
        def write(self, data: bytes) -> int:
            sizes.append(len(data))
            return len(data)

    kube_copy.write_tar(kube_copy.plan_put(str(tmp_path / "big")), (), Counting())
    assert sum(sizes) > 20 << 20
    assert max(sizes) <= kube_copy.BUFFER_BYTES
