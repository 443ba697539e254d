"""What `up` hands the head node's autoscaler: the config text and the command-line overrides.

The head holds its own copies of the file mounts at their remote paths, so the autoscaler
syncs workers from those (its config's local paths become the remote ones).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.pricing.handoff import PriceHandoff

HEAD_DIR = "~/.launcher/head"
SPEC_FILE = f"{HEAD_DIR}/autoscaler.json"
LOG_FILE = f"{HEAD_DIR}/monitor.log"
PID_FILE = f"{HEAD_DIR}/monitor.pid"
STATE_FILE = f"{HEAD_DIR}/autoscaler-state.json"
# What the cluster had, was asked for and what the autoscaler did (timeline.py), rotated to
# timeline.1.jsonl.
TIMELINE_FILE = f"{HEAD_DIR}/timeline.jsonl"
# Autostop set by `launcher autostop` / `up --idle-minutes-to-autostop` (over the config's).
AUTOSTOP_FILE = f"{HEAD_DIR}/autostop.json"
# One file per open exec/attach/submit session, named by its shell's process id.
SESSIONS_DIR = f"{HEAD_DIR}/sessions"
STARTED_LINE = "autoscaler for cluster"  # the daemon's first log line begins so


@dataclass(frozen=True)
class AutoscalerSpec:
    config_text: str
    source: str
    overrides: Overrides
    launcher_digest: str = ""  # of the launcher installed on a remote head (its code changed)
    head_key: str | None = None  # where `up` put the SSH key the head reaches workers with
    # The prices `up` knew: not in the digest, so new prices alone restart nothing (the
    # head keeps its own current).
    prices: PriceHandoff = dataclasses.field(default_factory=PriceHandoff)

    def _identity(self) -> dict[str, object]:
        return {
            "config_text": self.config_text,
            "source": self.source,
            "overrides": dataclasses.asdict(self.overrides),
            "launcher_digest": self.launcher_digest,
            "head_key": self.head_key,
        }

    def to_json(self) -> str:
        return json.dumps({**self._identity(), "prices": self.prices.to_json()}, sort_keys=True)

    @property
    def digest(self) -> str:
        text = json.dumps(self._identity(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @staticmethod
    def from_json(text: str) -> AutoscalerSpec:
        data = json.loads(text)
        return AutoscalerSpec(
            data["config_text"],
            data["source"],
            Overrides(**data["overrides"]),
            data.get("launcher_digest", ""),
            data.get("head_key"),
            PriceHandoff.from_json(data.get("prices")),
        )

    def load_on_head(self) -> ClusterConfig:
        config = parse_config(
            self.config_text, self.source, self.overrides, Path.home(), local_files=False
        )
        mounts = {remote: remote for remote in config.file_mounts}
        auth = config.auth
        if self.head_key:
            auth = dataclasses.replace(auth, ssh_private_key=self.head_key)
        return dataclasses.replace(config, file_mounts=mounts, auth=auth)
