"""Files replaced whole: a reader (another process, or this one without a lock) sees the old
file or the new one, never half of one, and a writer killed midway leaves the old file be.

The new content goes to a file of this call's own next to the target (same directory, so
same file system), which is renamed over the target once complete. Not fsynced: these are
the launcher's own notes, and a machine that loses power loses the launcher's run with it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, mode: int = 0o666) -> Iterator[Path]:
    """Yield an empty file next to `path`, created with `mode` (less the umask); when the
    block ends without an exception it is renamed over `path`, otherwise removed. Two
    writers at once never share the file: each call has its own name."""
    partial = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    try:
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def write_whole(path: Path, text: str, mode: int = 0o666) -> None:
    """Replace `path` with `text`, whole (see `replacing`)."""
    with replacing(path, mode) as partial:
        partial.write_text(text)
