"""Launches this machine sent to EC2 without seeing their answer: a small journal.

A RunInstances whose answer never came back (the launcher was interrupted or killed while
it was in flight, or the connection dropped) may still make instances, seconds later, which
no listing shows yet. So before sending one, the provider writes the request, client token
included, to `$LAUNCHER_HOME/clusters/NAME/aws-launches/`, and removes it once EC2 has
answered. The next command that lists the cluster first sends each request left there once
more: EC2 answers a repeated client token with the instances of the first request (making
them only if the first never arrived), so what the lost request made becomes known either
way. `up` then takes such a head as its own instead of launching a second one, and `down`
terminates it.

Pure file handling here; the provider sends the requests.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.paths import cluster_dir

MAX_AGE_S = 24 * 3600.0  # older requests are dropped unsent (EC2 forgets their tokens)


@dataclass(frozen=True)
class SentLaunch:
    path: Path
    request: Mapping[str, Any]  # RunInstances' keyword arguments, ClientToken included
    sent_at: float  # time.time()

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.sent_at))


def journal_dir(cluster_name: str) -> Path:
    return cluster_dir(cluster_name) / "aws-launches"


def record(cluster_name: str, request: Mapping[str, Any]) -> Path | None:
    """Write `request` down (whole, on disk) before it is sent; None when it cannot be
    (a request that is not plain JSON is sent unrecorded)."""
    try:
        text = json.dumps({"request": request, "sent_at": time.time()})
    except (TypeError, ValueError):
        return None
    directory = journal_dir(cluster_name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{request['ClientToken']}.json"
    partial = path.with_suffix(".partial")
    with partial.open("w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)
    return path


def forget(path: Path | None) -> None:
    """EC2 answered the request at `path`."""
    if path is not None:
        path.unlink(missing_ok=True)


def instance_tags(request: Mapping[str, Any]) -> dict[str, str]:
    """The tags `request` gives its instances."""
    return {
        str(tag["Key"]): str(tag["Value"])
        for spec in request.get("TagSpecifications", ())
        if spec.get("ResourceType") == "instance"
        for tag in spec.get("Tags", ())
    }


def unanswered(cluster_name: str, now: float | None = None) -> list[SentLaunch]:
    """The requests sent and never answered, oldest first (too old or unreadable ones are
    dropped)."""
    directory = journal_dir(cluster_name)
    if not directory.is_dir():
        return []
    now = time.time() if now is None else now
    found = []
    for path in directory.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            launch = SentLaunch(path, dict(data["request"]), float(data["sent_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            forget(path)
            continue
        if now - launch.sent_at > MAX_AGE_S:
            forget(path)
            continue
        found.append(launch)
    return sorted(found, key=lambda launch: launch.sent_at)
