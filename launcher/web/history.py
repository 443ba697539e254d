"""A cluster's timeline (what its head's autoscaler sampled and decided, one JSON object a
line in `TIMELINE_FILE` on the head), copied here as it grows into
`$LAUNCHER_HOME/clusters/NAME/timeline.jsonl`, so a cluster taken down keeps its history.

The copy is fetched from the byte offset already held, over the head's runner; only whole
lines are kept (a line the writer is still writing is fetched next time). Reading the copy
is incremental too (`LocalTimeline`): only bytes appended since the last read are parsed.
"""

from __future__ import annotations

import re
import secrets
import shlex
import tempfile
from pathlib import Path
from typing import Any

from launcher.autoscaler.spec import HEAD_DIR, TIMELINE_FILE
from launcher.autoscaler.timeline import read_timeline, rotated, to_dict
from launcher.cluster.head import HeadSession
from launcher.errors import LauncherError
from launcher.paths import cluster_dir

FETCH_MAX_BYTES = 4 << 20  # per poll; the rest comes with the next ones
Event = dict[str, Any]


def local_path(cluster_name: str) -> Path:
    return cluster_dir(cluster_name) / "timeline.jsonl"


def parse_events(text: str) -> list[Event]:
    """The events of whole lines of a timeline, as the JSON dicts the head wrote (read by
    the head's own reader, launcher/autoscaler/timeline.py: a torn line or an unknown kind
    skipped)."""
    return [to_dict(e) for e in read_timeline(text.splitlines())]


def whole_lines(data: bytes) -> bytes:
    """`data` up to and with its last newline."""
    end = data.rfind(b"\n")
    return data[: end + 1] if end >= 0 else b""


def fetch(session: HeadSession, cluster_name: str) -> int:
    """Append what the head's timeline gained since the copy here was last fetched: the
    head cuts the new bytes into a file of its own, which is copied here (three round
    trips; one when there is nothing new; no output through the runner's log). Returns the
    bytes added. A head whose timeline is shorter than the copy's offset (the file rotated,
    or a new head) is read from its start and appended: the copy keeps every head's
    history."""
    path = local_path(cluster_name)
    offset_file = path.with_suffix(".offset")
    try:
        offset = int(offset_file.read_text().strip() or 0)
    except (OSError, ValueError):
        offset = 0
    runner = session.daemon_runner
    remote = shlex.quote(runner.remote_path(TIMELINE_FILE))
    slice_file = runner.remote_path(f"{HEAD_DIR}/timeline-{secrets.token_hex(6)}.part")
    part = shlex.quote(slice_file)
    old = shlex.quote(str(rotated(Path(runner.remote_path(TIMELINE_FILE)))))
    # Rotated since the last fetch (the file is shorter than the offset): the rest of the
    # rotated file first (`rotated N`: its bytes), then the new file from its start.
    cut = (
        f"test -f {remote} || exit 3; size=$(stat -c %s {remote}); start={offset}; skip=0; "
        f'if [ "$size" -lt {offset} ]; then start=0; '
        f'[ -f {old} ] && [ "$(stat -c %s {old})" -ge {offset} ] && '
        f"skip=$(( $(stat -c %s {old}) - {offset} )); fi; "
        f'echo "start $start"; echo "rotated $skip"; n=$((size - start)); '
        f"[ $n -gt {FETCH_MAX_BYTES} ] && n={FETCH_MAX_BYTES}; "
        f"{{ [ $skip -gt 0 ] && tail -c $skip {old}; tail -c +$((start + 1)) {remote} | "
        f"head -c $n; }} > {part}; "
        # Nothing new (most polls): no slice to copy or remove, no more round trips.
        f'[ $((skip + n)) -gt 0 ] || {{ rm -f {part}; echo "nothing new"; }}'
    )
    result = runner.run(cut, session.env, timeout=60)
    found = re.search(r"^start (\d+)$", result.output_tail, re.MULTILINE)
    skipped = re.search(r"^rotated (\d+)$", result.output_tail, re.MULTILINE)
    if not result.ok or found is None or skipped is None:
        return 0
    if re.search(r"^nothing new$", result.output_tail, re.MULTILINE):
        return 0
    skip = int(skipped.group(1))
    with tempfile.TemporaryDirectory() as staging:
        local = Path(staging) / "part"
        try:
            runner.get(slice_file, str(local))
            raw = local.read_bytes()
        except (OSError, LauncherError):
            return 0
        finally:
            runner.run(f"rm -f {part}", session.env, timeout=30)
    if skip:
        keep(path, 0, whole_lines(raw[:skip]))
    return skip + keep(path, int(found.group(1)), whole_lines(raw[skip:]))


def keep(path: Path, start: int, data: bytes) -> int:
    """Append `data`, fetched from byte `start` of the head's timeline, to the copy at
    `path`, and remember where the next fetch begins."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with path.open("ab") as out:
        out.write(data)
    path.with_suffix(".offset").write_text(str(start + len(data)))
    return len(data)


class LocalTimeline:
    """The events of a cluster's local copy, read again only from where the last read
    ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.events: list[Event] = []

    def refresh(self) -> bool:
        """Read what was appended; True when there were new events."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = whole_lines(f.read())
        except OSError:
            return False
        if not data:
            return False
        self.offset += len(data)
        new = parse_events(data.decode(errors="replace"))
        self.events.extend(new)
        return bool(new)
