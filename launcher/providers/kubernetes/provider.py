"""Ray nodes as pods in one Kubernetes namespace.

Nodes are the pods labelled with the cluster's name, listed with a label selector (never a
listing of the whole namespace). A node's pod is built from its type's pod manifest (Ray's
format) with the node's tags as labels and a generated name; a launch carries its request
id as a label, so a retried launch counts what the first made and makes only the rest.

Capacity: after creating pods the provider waits until the scheduler has placed them. A pod
still unschedulable after `provider.scheduling_timeout_s` (PodScheduled False, reason
Unschedulable), or a create refused for the namespace's ResourceQuota, is a capacity
failure of its type: its pods are deleted and CapacityError raised, so the autoscaler's
capacity memory and fallback types take over as for a cloud stockout.

Commands run over the exec API (`launcher.runners.kube_exec`), not SSH; the autoscaler runs
in the head pod with the head's service account (`objects.py` makes its Role).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from launcher.config.model import ClusterConfig, NodeType
from launcher.errors import CapacityError, ProviderError, UsageError
from launcher.providers.base import (
    TAG_LAUNCH_ID,
    Launch,
    Node,
    NodeProvider,
    ProviderTraits,
)
from launcher.providers.kubernetes import objects
from launcher.providers.kubernetes.access import KubeExecAccess
from launcher.providers.kubernetes.clients import KubeApis, connect
from launcher.providers.kubernetes.names import label_problem
from launcher.providers.kubernetes.objects import (
    Objects,
    api_error,
    autoscaler_objects,
    message_of,
    name_of,
    status_of,
)
from launcher.providers.kubernetes.pods import (
    NodeMemo,
    cluster_selector,
    pod_body,
    scheduled,
    tag_patch,
    to_node,
    unschedulable,
)
from launcher.providers.kubernetes.spec import KubernetesProviderConfig

DELETE_GRACE_S = 5  # a pod's processes get SIGTERM, then SIGKILL this much later
GONE_WAIT_S = 120.0  # how long `terminate_nodes` waits for deleted pods to be gone
POLL_S = (0.1, 1.0)  # first and longest pause between listings while waiting


class KubernetesProvider(NodeProvider):
    traits = ProviderTraits(installs_launcher_on_head=True, node_env_has_cluster_head_ip=True)

    def __init__(self, config: ClusterConfig, on_head: bool = False) -> None:
        super().__init__(config, on_head)
        settings = config.provider
        assert isinstance(settings, KubernetesProviderConfig)
        problem = label_problem(config.cluster_name)
        if problem:
            raise UsageError(f"cluster_name {problem}; rename the cluster")
        self.settings = settings
        self.namespace = settings.namespace
        self._apis: KubeApis | None = None
        self._lock = threading.Lock()
        self._memo = NodeMemo()
        self._memo_lock = threading.Lock()  # setups and launches list from threads too
        self.access = KubeExecAccess(
            config, self.namespace, lambda: self.apis.streams, settings.head_python
        )

    @property
    def apis(self) -> KubeApis:
        with self._lock:
            if self._apis is None:
                self._apis = connect(self.settings, self.on_head)
            return self._apis

    @property
    def objects(self) -> Objects:
        return Objects(self.apis, self.namespace, self.cluster_name)

    # -- before the first node -----------------------------------------------------------
    def bootstrap(self, wait_s: float = 300.0) -> list[str]:
        if self.on_head:
            return []
        self._check_namespace()
        done = []
        for kind, manifest in autoscaler_objects(self.settings, self.cluster_name):
            line = self.objects.ensure_shared(kind, manifest)
            if line:
                done.append(line)
        for service in self.settings.services:
            line = self.objects.ensure_service(service)
            if line:
                done.append(line)
        return done

    def _check_namespace(self) -> None:
        try:
            self.apis.core.read_namespace(self.namespace)
        except api_error() as exc:
            if status_of(exc) == 404:
                raise UsageError(
                    f"namespace {self.namespace} does not exist in {self.apis.source}; create "
                    f"it (`kubectl create namespace {self.namespace}`) or set "
                    "provider.namespace to one that does"
                ) from exc
            if status_of(exc) == 403:
                return  # may not read namespaces; the objects' creation will say more
            raise self._unreachable(exc) from exc
        except OSError as exc:
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: Exception) -> ProviderError:
        why = message_of(exc) if status_of(exc) else str(exc)
        return ProviderError(f"cannot reach the Kubernetes API ({self.apis.source}): {why}")

    def _service_account(self) -> str:
        return name_of(autoscaler_objects(self.settings, self.cluster_name)[0][1])

    # -- nodes ----------------------------------------------------------------------------
    def _pods(self, selector: str) -> list[dict[str, Any]]:
        """The namespace's pods matching `selector`, as JSON (not the client's models: at a
        thousand pods, building those costs more than the call)."""
        try:
            answer = self.apis.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            )
            items: list[dict[str, Any]] = json.loads(answer.data)["items"]
        except api_error() as exc:
            raise ProviderError(
                f"cannot list the pods of cluster {self.cluster_name}: {message_of(exc)}"
            ) from exc
        except OSError as exc:
            raise self._unreachable(exc) from exc
        return items

    def _pod_names(self) -> set[str]:
        """The names of the cluster's pods, those being deleted included."""
        return {str(p["metadata"]["name"]) for p in self._pods(cluster_selector(self.cluster_name))}

    def nodes(self) -> list[Node]:
        pods = self._pods(cluster_selector(self.cluster_name))
        with self._memo_lock:
            return self._memo.nodes(pods)

    def _made_by(self, request_id: str | None) -> list[Node]:
        if not request_id:
            return []
        return _as_nodes(self._pods(_launch_selector(self.cluster_name, request_id)))

    def _create(self, launch: Launch) -> list[Node]:
        request_id = launch.request_id or uuid.uuid4().hex
        launch = launch.with_request_id(request_id)
        node_type, kind, count = launch.node_type, launch.kind, launch.count
        made = self._made_by(request_id)
        body = pod_body(
            node_type.node_config,
            cluster_name=self.cluster_name,
            kind=kind,
            tags=launch.tags,
            service_account=self._service_account(),
        )
        body.setdefault("metadata", {})["namespace"] = self.namespace
        for _ in range(count - len(made)):
            try:
                self.apis.core.create_namespaced_pod(self.namespace, body, _preload_content=False)
            except api_error() as exc:
                raise self._create_failed(node_type, request_id, exc) from exc
        return self._await_scheduled(node_type, request_id)

    def _create_failed(self, node_type: NodeType, request_id: str, exc: Exception) -> ProviderError:
        message = message_of(exc)
        if status_of(exc) == 403 and "exceeded quota" in message:
            made = self._made_by(request_id)
            return CapacityError(node_type.name, ("",), message, created=made, scope="quota")
        return ProviderError(
            f"cannot create a {node_type.name} pod in namespace {self.namespace}: {message}"
        )

    def _await_scheduled(self, node_type: NodeType, request_id: str) -> list[Node]:
        """Wait until the launch's pods are placed; those still unschedulable after
        `scheduling_timeout_s` are deleted and reported as a capacity failure."""
        deadline = time.monotonic() + self.settings.scheduling_timeout_s
        for pause in _pauses():
            pods = self._pods(_launch_selector(self.cluster_name, request_id))
            if all(scheduled(p) for p in pods) or time.monotonic() >= deadline:
                break  # placed (or, past the deadline, still pending: listed as such)
            time.sleep(pause)
        stuck = {str(p["metadata"]["name"]): unschedulable(p) for p in pods}
        stuck = {name: why for name, why in stuck.items() if why}
        nodes = _as_nodes(pods)
        if not stuck:
            return nodes
        self._delete(list(stuck))
        self._wait_gone(list(stuck))
        detail = next(iter(stuck.values()))
        raise CapacityError(
            node_type.name,
            ("",),
            f"{len(stuck)} pod(s) unschedulable for {self.settings.scheduling_timeout_s:g} s: "
            f"{detail}",
            created=[n for n in nodes if n.id not in stuck],
        )

    def terminate_nodes(self, node_ids: Sequence[str]) -> None:
        if not node_ids:
            return
        self._delete(node_ids)
        self._wait_gone(node_ids)

    def _delete(self, names: Sequence[str]) -> None:
        for name in names:
            try:
                self.apis.core.delete_namespaced_pod(
                    name,
                    self.namespace,
                    grace_period_seconds=DELETE_GRACE_S,
                    _preload_content=False,
                )
            except api_error() as exc:
                if status_of(exc) != 404:
                    raise ProviderError(f"cannot delete pod {name}: {message_of(exc)}") from exc

    def _wait_gone(self, names: Sequence[str]) -> None:
        """Wait until no pod of `names` exists (deleted pods linger while their processes
        are stopped)."""
        wanted = set(names)
        deadline = time.monotonic() + GONE_WAIT_S
        for pause in _pauses():
            left = wanted & self._pod_names()
            if not left:
                return
            if time.monotonic() >= deadline:
                raise ProviderError(
                    f"pods still present {GONE_WAIT_S:g} s after they were deleted: "
                    f"{', '.join(sorted(left))}"
                )
            time.sleep(pause)

    def set_tags(self, node_id: str, tags: Mapping[str, str]) -> None:
        try:
            self.apis.core.patch_namespaced_pod(
                node_id, self.namespace, tag_patch(tags), _preload_content=False
            )
        except api_error() as exc:
            if status_of(exc) == 404:
                return  # gone (or never made): nothing to tag
            raise ProviderError(f"cannot label pod {node_id}: {message_of(exc)}") from exc

    def cleanup(self, purge: bool = False) -> list[str]:
        removed = []
        left = sorted(self._pod_names())
        if left:
            self._delete(left)
            self._wait_gone(left)
            removed.append(f"{len(left)} pod(s)")
        for name in self.objects.services():
            if self.objects.delete(objects.SERVICE, name):
                removed.append(f"service {name}")
        if purge:
            removed += self._release_autoscaler_objects()
        return removed

    def _release_autoscaler_objects(self) -> list[str]:
        """Delete the cluster's own autoscaler objects and release its use of shared ones
        (those the config names, and the set earlier versions shared by all clusters)."""
        settings = self.settings
        given = (settings.service_account, settings.role, settings.role_binding)
        made = autoscaler_objects(settings, self.cluster_name)
        removed = []
        for (kind, manifest), named in reversed(list(zip(made, given, strict=True))):
            names = [name_of(manifest)] + ([] if named else [objects.SHARED_NAME])
            for name in names:
                line = self.objects.release_shared(kind, name)
                if line:
                    removed.append(line)
        return removed


def _as_nodes(pods: Iterable[Mapping[str, Any]]) -> list[Node]:
    return [n for n in (to_node(p) for p in pods) if n is not None]


def _pauses() -> Iterator[float]:
    """Pauses between listings while waiting: from POLL_S[0], doubling up to POLL_S[1]."""
    pause = POLL_S[0]
    while True:
        yield pause
        pause = min(pause * 2, POLL_S[1])


def _launch_selector(cluster_name: str, request_id: str) -> str:
    return f"{cluster_selector(cluster_name)},{TAG_LAUNCH_ID}={request_id}"
