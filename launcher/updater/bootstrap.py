"""`~/ray_bootstrap_config.yaml`: the file Ray's usual head start command names
(`ray start --head --autoscaling-config=~/ray_bootstrap_config.yaml`).

`ray up` writes the cluster's config there for Ray's own autoscaler. Here the launcher's
autoscaler does that job, so the head gets a config that lets Ray's autoscaler act on
nothing (a read-only provider, no workers): Ray's monitor still runs and reports resources
and demand to `ray status`, and launches or stops no machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"
_NAME = "ray_bootstrap_config.yaml"


def names_bootstrap_config(commands: Sequence[str]) -> bool:
    return any(_NAME in command for command in commands)


def bootstrap_config_text(cluster_name: str) -> str:
    config: dict[str, Any] = {
        "cluster_name": cluster_name,
        "max_workers": 0,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 0,
        "docker": {},
        "auth": {},
        "provider": {
            "type": "readonly",
            "use_node_id_as_ip": True,
            "disable_launch_config_check": True,
        },
        "available_node_types": {
            "ray.head.default": {"resources": {}, "node_config": {}, "max_workers": 0}
        },
        "head_node_type": "ray.head.default",
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        **{
            key: []
            for key in (
                "initialization_commands",
                "setup_commands",
                "head_setup_commands",
                "worker_setup_commands",
                "head_start_ray_commands",
                "worker_start_ray_commands",
            )
        },
    }
    header = "# Written by launcher: its own autoscaler manages this cluster's nodes.\n"
    return header + yaml.safe_dump(config, sort_keys=False)
