"""Launches this machine sent to EC2 that no listing has shown yet: a small journal.

A RunInstances whose answer never came back (the launcher was interrupted or killed while
it was in flight, or the connection dropped) may still make instances, seconds later; and
an answered one makes instances that DescribeInstances may not list for a while (EC2 is
eventually consistent). Either way a command run right after would not see them: `down`
would leave them running, `up` would make a second head. So before sending a launch, the
provider writes the request, client token included, to
`$LAUNCHER_HOME/clusters/NAME/aws-launches/`; adds the instances once EC2 answers; and
removes the record once a listing shows them.

The next `up` (as it bootstraps) or `down` (as it cleans up) sends each unanswered request
once more: EC2 answers a repeated client token with the instances of the first request
(making them only if the first never arrived), so what the lost request made becomes known
either way. Other commands send nothing. The instances of records are nodes of the cluster
until a listing shows them: `up` takes such a head as its own, `down` terminates it.

Pure file handling here; the provider sends the requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from launcher.files import write_whole
from launcher.paths import cluster_dir
from launcher.providers.aws.instances import aws_tags

UNANSWERED_MAX_AGE_S = 24 * 3600.0  # older requests are dropped unsent (EC2 forgets tokens)
UNLISTED_MAX_AGE_S = 3600.0  # instances still not listed by then are not coming
_KEPT = ("InstanceId", "PrivateIpAddress", "PublicIpAddress", "Placement", "InstanceLifecycle")


@dataclass(frozen=True)
class SentLaunch:
    path: Path
    request: Mapping[str, Any]  # RunInstances' keyword arguments, ClientToken included
    sent_at: float  # time.time()
    instances: tuple[Mapping[str, Any], ...] | None  # as EC2 answered; None: no answer yet

    @property
    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.sent_at))

    @property
    def instance_ids(self) -> set[str]:
        return {str(i["InstanceId"]) for i in self.instances or ()}


def journal_dir(cluster_name: str) -> Path:
    return cluster_dir(cluster_name) / "aws-launches"


def _write(path: Path, data: Mapping[str, Any]) -> None:
    """Replace `path` with `data`, whole: the journal outlives this process being killed
    mid-call, which is what it is for."""
    write_whole(path, json.dumps(data))


def record(cluster_name: str, request: Mapping[str, Any]) -> Path | None:
    """Write `request` down before it is sent; None when it cannot be (a request that is
    not plain JSON is sent unrecorded)."""
    data = {"request": request, "sent_at": time.time(), "instances": None}
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        return None
    directory = journal_dir(cluster_name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{request['ClientToken']}.json"
    _write(path, data)
    return path


def portable(instance: Mapping[str, Any]) -> dict[str, Any]:
    kept = {key: instance[key] for key in _KEPT if key in instance}
    launched = instance.get("LaunchTime")
    if isinstance(launched, datetime):
        kept["LaunchTime"] = launched.isoformat()
    return kept


def answered(path: Path | None, instances: Sequence[Mapping[str, Any]]) -> None:
    """EC2 answered the request at `path` with `instances` (kept until listed)."""
    if path is None or not path.exists():
        return
    data = json.loads(path.read_text())
    if not instances:
        forget(path)
        return
    data["instances"] = [portable(i) for i in instances]
    _write(path, data)


def forget(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def restored(instance: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """An instance of a record as DescribeInstances would show it just after launch."""
    launched = instance.get("LaunchTime")
    tags = instance_tags(request)
    return {
        **instance,
        "State": {"Name": "pending"},
        "Tags": aws_tags(tags),
        **({"LaunchTime": datetime.fromisoformat(launched)} if isinstance(launched, str) else {}),
    }


def instance_tags(request: Mapping[str, Any]) -> dict[str, str]:
    """The tags `request` gives its instances."""
    return {
        str(tag["Key"]): str(tag["Value"])
        for spec in request.get("TagSpecifications", ())
        if spec.get("ResourceType") == "instance"
        for tag in spec.get("Tags", ())
    }


def pending(cluster_name: str, now: float | None = None) -> list[SentLaunch]:
    """The recorded launches, oldest first (too old or unreadable records are dropped)."""
    directory = journal_dir(cluster_name)
    if not directory.is_dir():
        return []
    now = time.time() if now is None else now
    found = []
    for path in directory.glob("*.json"):
        try:
            data = json.loads(path.read_text())
            made = data["instances"]
            launch = SentLaunch(
                path,
                dict(data["request"]),
                float(data["sent_at"]),
                None if made is None else tuple(dict(i) for i in made),
            )
        except (OSError, ValueError, KeyError, TypeError):
            forget(path)
            continue
        limit = UNANSWERED_MAX_AGE_S if launch.instances is None else UNLISTED_MAX_AGE_S
        if now - launch.sent_at > limit:
            forget(path)
            continue
        found.append(launch)
    return sorted(found, key=lambda launch: launch.sent_at)
