"""launcher.files: a file is replaced whole, or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher.files import replacing, write_whole


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".partial"))


def test_write_whole_replaces_the_file_and_leaves_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    write_whole(target, "new")
    assert target.read_text() == "new"
    assert _leftovers(tmp_path) == []


def test_a_failed_write_keeps_the_old_file_and_removes_its_partial(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), replacing(target) as partial:
        partial.write_text("half")
        raise RuntimeError("killed midway")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_the_mode_is_the_new_files_from_its_creation(tmp_path: Path) -> None:
    target = tmp_path / "known_hosts"
    with replacing(target, mode=0o600) as partial:
        # Private before any byte is written, not chmod-ed afterwards.
        assert stat.S_IMODE(partial.stat().st_mode) == 0o600
        partial.write_text("key")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_two_writers_at_once_get_files_of_their_own(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    with replacing(target) as first, replacing(target) as second:
        assert first != second
        assert first.parent == second.parent == tmp_path  # same file system: rename is atomic
        first.write_text("first")
        second.write_text("second")
    assert target.read_text() == "first"  # the outer block ends last
    assert _leftovers(tmp_path) == []


def test_a_reader_holding_the_old_file_keeps_reading_it(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_text("old content")
    with target.open() as reader:
        write_whole(target, "new content")
        assert reader.read() == "old content"
    assert target.read_text() == "new content"
    assert os.listdir(tmp_path) == ["record.json"]
