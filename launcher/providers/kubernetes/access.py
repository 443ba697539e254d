"""How the launcher reaches Ray's pods: commands over the API's exec subresource, ports over
its port-forward (`launcher.runners.kube_exec`), never SSH; the head's Python is the
image's unless `provider.head_python` names one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.config.model import ClusterConfig
from launcher.providers.access import NodeAccess
from launcher.providers.nodes import Node
from launcher.runners.base import CommandRunner
from launcher.runners.forward import PortOpener


class KubeExecAccess(NodeAccess):
    """Pods of `namespace`, reached with the CoreV1Api `streams` gives (connected on
    first use) and, where set, `head_python` on the head."""

    def __init__(
        self,
        config: ClusterConfig,
        namespace: str,
        streams: Callable[[], Any],
        head_python: str | None = None,
    ) -> None:
        super().__init__(config)
        self.namespace = namespace
        self._streams = streams
        self._head_python = head_python

    def command_runner(self, node: Node, log_path: Path) -> CommandRunner:
        from launcher.runners.kube_exec import KubeExecRunner

        return KubeExecRunner(
            self._streams(),
            self.namespace,
            node.id,
            container=None,
            base_env={},
            log_path=log_path,
        )

    def port_opener(self, node: Node, runner: CommandRunner) -> PortOpener:
        from launcher.runners.kube_exec import pod_port_opener

        return pod_port_opener(self._streams(), self.namespace, node.id)

    def head_python(self) -> str:
        return self._head_python or "python3"
