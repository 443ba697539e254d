"""`copy_tree_like_rsync` (launcher/runners/local.py) without rsync gives the same tree as
`rsync -a` does, for every shape of source and target file_mounts and rsync-up use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.runners import local
from launcher.runners.local import copy_tree_like_rsync

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync to compare")


def _source(root: Path) -> Path:
    tree = root / "src"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.txt").write_text("b")
    (tree / "skip.log").write_text("skipped")
    (tree / "link").symlink_to("a.txt")
    (root / "one.txt").write_text("one")
    return tree


def _shape(root: Path) -> dict[str, str]:
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = f"-> {path.readlink()}"
        elif path.is_file():
            found[name] = path.read_text()
        else:
            found[name] = "/"
    return found


CASES = [  # (source relative to the root, target relative to the destination, excludes)
    ("src", "missing", ()),
    ("src/", "missing", ()),
    ("src", "present", ()),
    ("src/", "present", ()),
    ("src", "deep/er/missing", ()),
    ("src/", "present/", ("*.log",)),
    ("one.txt", "present", ()),
    ("one.txt", "missing.txt", ()),
    ("one.txt", "newdir/", ()),
]


@pytest.mark.parametrize(("source", "target", "excludes"), CASES)
def test_without_rsync_the_tree_is_what_rsync_makes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    target: str,
    excludes: tuple[str, ...],
) -> None:
    _source(tmp_path)
    results = {}
    for how in ("rsync", "python"):
        out = tmp_path / how
        (out / "present").mkdir(parents=True)
        with monkeypatch.context() as patched:
            if how == "python":
                patched.setattr(local.shutil, "which", lambda _name: None)
            copy_tree_like_rsync(f"{tmp_path}/{source}", f"{out}/{target}", excludes)
        results[how] = _shape(out)
    assert results["python"] == results["rsync"]
