"""Evacuating a noticed worker: stop its Ray (on a thread of its own: it may take a while
over SSH), so Ray moves its work now rather than once the machine is gone. When to do it is
decide/evacuate.py's decision."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from launcher.autoscaler.decide.evacuate import Evacuation
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.paths import node_log
from launcher.providers.base import NodeProvider
from launcher.updater.runner import node_runner


def evacuate(
    provider: NodeProvider,
    config: ClusterConfig,
    evacuation: Evacuation,
    log: Callable[[str], None],
    done: Callable[[], None],
) -> threading.Thread:
    """Start stopping the Ray of `evacuation.node`; `done` is called once it was tried."""
    node = evacuation.node
    when = time.strftime("%H:%M:%S", time.localtime(node.reclaim_at))
    log(
        f"{node.id} ({node.node_type}): stopping its Ray ahead of the reclaim at {when} "
        f"({evacuation.reason}), so its work restarts elsewhere now"
    )

    def stop() -> None:
        runner = node_runner(provider, config, node, node_log(config.cluster_name, node.id))
        try:
            problem = provider.access.stop_node_ray(node, runner)
        except LauncherError as exc:
            problem = str(exc)
        finally:
            done()
        if problem:
            log(f"{node.id}: could not stop its Ray before the reclaim: {problem}")
        else:
            log(f"{node.id}: Ray stopped; its work can restart elsewhere")

    thread = threading.Thread(target=stop, name=f"evacuate-{node.id}", daemon=True)
    thread.start()
    return thread
