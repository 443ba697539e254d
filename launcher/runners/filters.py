"""`rsync_filter`: per-directory ignore files (such as `.gitignore`) turned into excludes.

Ray passes these to rsync as `--filter=dir-merge,- FILE`. Here they are read on this machine
and turned into the exact paths they exclude (anchored at the copy's root, `/sub/x.log`), so
rsync and the SFTP fallback skip the same files. Each line of a filter file is a pattern as
in `.gitignore`: a name pattern matches at any depth below the file's directory, a pattern
holding a `/` is relative to that directory, a trailing `/` matches directories only. Lines
starting with `#` and negations (`!`) are ignored.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class _Rule:
    base: str  # the filter file's directory, relative to the copy's root ("" at the root)
    pattern: str
    anchored: bool
    dirs_only: bool

    def matches(self, relative: str, is_dir: bool) -> bool:
        if self.dirs_only and not is_dir:
            return False
        if self.base:
            if not relative.startswith(self.base + "/"):
                return False
            relative = relative[len(self.base) + 1 :]
        if self.anchored:
            return fnmatch.fnmatchcase(relative, self.pattern)
        return fnmatch.fnmatchcase(relative.rsplit("/", 1)[-1], self.pattern)


def _rules(directory: Path, base: str, filter_files: tuple[str, ...]) -> list[_Rule]:
    rules = []
    for name in filter_files:
        try:
            lines = (directory / name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith(("#", "!")):
                continue
            dirs_only = line.endswith("/")
            pattern = line.strip("/")
            if pattern:
                rules.append(_Rule(base, pattern, "/" in line.rstrip("/"), dirs_only))
    return rules


def filter_excludes(source: Path, filter_files: tuple[str, ...]) -> tuple[str, ...]:
    """The paths under directory `source` that `filter_files` exclude, as anchored rsync
    excludes (`/a/b`). Excluded directories are listed once, not their contents."""
    if not filter_files or not source.is_dir():
        return ()
    excluded: list[str] = []
    active: dict[str, list[_Rule]] = {}
    for root, dirs, files in os.walk(source):
        relative_root = Path(root).relative_to(source).as_posix()
        base = "" if relative_root == "." else relative_root
        parent = base.rsplit("/", 1)[0] if "/" in base else ""
        inherited = active.get(parent, []) if base else []
        rules = [*inherited, *_rules(Path(root), base, filter_files)]
        active[base] = rules
        for name in sorted(files):
            relative = f"{base}/{name}" if base else name
            if any(rule.matches(relative, False) for rule in rules):
                excluded.append("/" + relative)
        kept = []
        for name in sorted(dirs):
            relative = f"{base}/{name}" if base else name
            if any(rule.matches(relative, True) for rule in rules):
                excluded.append("/" + relative)
            else:
                kept.append(name)
        dirs[:] = kept
    return tuple(excluded)


def rsync_excluded(relative: str, excludes: tuple[str, ...]) -> bool:
    """Whether rsync `--exclude` patterns leave out the entry at `relative` (its path from
    the copy's root, `/`-separated). rsync's rule: a pattern starting with `/` is anchored
    at the copy's root, another pattern holding a `/` matches the end of the path, a plain
    one matches the name."""
    name = relative.rsplit("/", 1)[-1]
    for pattern in excludes:
        stripped = pattern.strip("/")
        if pattern.startswith("/"):
            if fnmatch.fnmatch(relative, stripped):
                return True
        elif "/" in stripped:
            if fnmatch.fnmatch(relative, stripped) or fnmatch.fnmatch(relative, "*/" + stripped):
                return True
        elif fnmatch.fnmatch(name, stripped):
            return True
    return False
