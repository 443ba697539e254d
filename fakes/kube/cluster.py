"""The fake cluster's controllers: the scheduler loop, the kubelet's pods, graceful
deletion of pods and namespaces, and the ResourceQuota admission check.

The scheduler runs in a thread woken whenever something may let a pending pod fit (a pod
created, deleted or finished, a node changed); it binds pods in creation order and calls
`Kubelet.run_pod` outside the store's lock. Deleting a pod the kubelet runs sets its
deletionTimestamp, then a worker thread calls `Kubelet.stop_pod` and removes the object.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from aiohttp import web

from . import errors, quantity, resources, scheduler
from .kubelet_api import Kubelet, Pod
from .resources import EVENTS, NAMESPACES, NODES, PODS, QUOTAS
from .store import Obj, Store, now


class StandInKubelet:
    """A kubelet that runs nothing: a bound pod is Running (a 127.18.x.y IP, containers
    ready) at once; for tests of the API alone. Its streaming handlers answer 400."""

    def __init__(self) -> None:
        self.sink: Any = None
        self._next = 0
        self._lock = threading.Lock()

    def bind(self, sink: Any) -> None:
        self.sink = sink

    def run_pod(self, pod: Pod, node_name: str) -> None:
        with self._lock:
            self._next += 1
            ip = f"127.18.{self._next // 250}.{self._next % 250 + 1}"
        containers = pod["spec"].get("containers") or []
        started = now()
        self.sink.update_status(
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "hostIP": "127.17.0.1",
                "startTime": started,
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": started}
                    for t in ("Initialized", "ContainersReady", "Ready")
                ],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "image": c.get("image", ""),
                        "imageID": "",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": started}},
                    }
                    for c in containers
                ],
            },
        )

    def stop_pod(self, pod: Pod, grace_period_s: float) -> None:
        return None

    async def _unsupported(self, request: web.Request, pod: Pod) -> web.StreamResponse:
        raise errors.bad_request("the stand-in kubelet runs no containers")

    exec = attach = portforward = log = _unsupported

    def close(self) -> None:
        return None


def _merge_status(status: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if key != "conditions":
            status[key] = copy.deepcopy(value)
            continue
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        for condition in value:
            conditions[condition["type"]] = dict(conditions.get(condition["type"], {}), **condition)
        status["conditions"] = list(conditions.values())


class Cluster:
    """The controllers of one fake cluster over `store`; `kubelet` runs the bound pods."""

    def __init__(self, store: Store, kubelet: Kubelet) -> None:
        self.store = store
        self.kubelet = kubelet
        self._started: set[str] = set()  # uids of the pods given to the kubelet
        self._stopping: dict[str, Future[None]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers=32, thread_name_prefix="kube-fake-stop")
        self._thread = threading.Thread(target=self._loop, name="kube-fake-scheduler", daemon=True)
        self.schedule_passes = 0

    def start(self) -> None:
        self.kubelet.bind(self)
        self._thread.start()

    def stop_scheduling(self) -> None:
        """Stop the scheduler (no pod is given to the kubelet after this returns)."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def close(self) -> None:
        """Stop the scheduler and wait for the deletions under way."""
        self.stop_scheduling()
        self._workers.shutdown(wait=True, cancel_futures=False)

    def kick(self) -> None:
        """Ask the scheduler for a pass (something changed that may let a pod fit)."""
        self._wake.set()

    # -- the kubelet's reports (PodStatusSink) -----------------------------------------

    def update_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        def edit(pod: Obj) -> None:
            _merge_status(pod.setdefault("status", {}), status)

        try:
            pod = self.store.change(PODS, namespace, name, edit)
        except errors.ApiError:
            return  # the pod is gone
        if pod["status"].get("phase") in scheduler.TERMINAL:
            self.kick()

    # -- scheduling --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self.schedule_once()
            except Exception:  # a bad pod must not stop the scheduler for the others
                import traceback

                traceback.print_exc()

    def schedule_once(self) -> None:
        self.schedule_passes += 1
        pods, _ = self.store.list(PODS)
        nodes, _ = self.store.list(NODES)
        used = scheduler.used_by_node(pods)
        pending = [
            p
            for p in pods
            if not p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"
        ]
        pending.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        for pod in pending:
            choice = scheduler.place(pod, nodes, used)
            if isinstance(choice, str):
                self._mark_unschedulable(pod, choice)
                continue
            node_name = choice["metadata"]["name"]
            bound = self._bind(pod, node_name)
            if bound is not None:
                quantity.add(used.setdefault(node_name, {}), quantity.pod_requests(bound))

    def _bind(self, pod: Obj, node_name: str) -> Obj | None:
        meta = pod["metadata"]

        def edit(current: Obj) -> None:
            if current["spec"].get("nodeName") or current["metadata"].get("deletionTimestamp"):
                raise errors.conflict("", "pods", meta["name"])
            current["spec"]["nodeName"] = node_name
            _merge_status(
                current.setdefault("status", {}),
                {
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
                    ]
                },
            )
            for c in current["status"]["conditions"]:
                if c["type"] == "PodScheduled":
                    c.pop("reason", None)
                    c.pop("message", None)

        try:
            bound = self.store.change(PODS, meta["namespace"], meta["name"], edit)
        except errors.ApiError:
            return None
        with self._lock:
            self._started.add(bound["metadata"]["uid"])
        self.record_event(
            bound,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name}",
        )
        self.kubelet.run_pod(copy.deepcopy(bound), node_name)
        return bound

    def pod_created(self, pod: Obj) -> None:
        """A new pod: the kubelet runs it at once when it names its node, else it waits for
        the scheduler."""
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            self.kick()
            return
        with self._lock:
            self._started.add(pod["metadata"]["uid"])
        self.kubelet.run_pod(copy.deepcopy(pod), node_name)

    def bind_to(self, namespace: str, name: str, node_name: str) -> None:
        """Bind a pod as a Binding (pods/NAME/binding) does; 409 if it is already bound."""
        self.store.get(NODES, "", node_name)
        if self._bind(self.store.get(PODS, namespace, name), node_name) is None:
            raise errors.conflict("", "pods", name)

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        old = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            None,
        )
        if old and old.get("status") == "False" and old.get("message") == message:
            return  # unchanged: no new resourceVersion
        self.update_status(
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastTransitionTime": now(),
                    }
                ],
            },
        )
        self.record_event(pod, "Warning", "FailedScheduling", message)

    def record_event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        with contextlib.suppress(errors.ApiError):
            self.store.create(
                EVENTS,
                {
                    "metadata": {
                        "generateName": meta["name"] + ".",
                        "namespace": meta["namespace"],
                    },
                    "involvedObject": {
                        "kind": obj.get("kind", "Pod"),
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "uid": meta.get("uid"),
                    },
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "source": {"component": "default-scheduler"},
                    "firstTimestamp": now(),
                    "lastTimestamp": now(),
                    "count": 1,
                },
            )

    # -- deletion ----------------------------------------------------------------------

    def delete_pod(self, namespace: str, name: str, grace: float | None) -> tuple[Obj, bool]:
        """Delete a pod as the API does: at once when the kubelet never ran it (or grace is
        0 and the pod is not bound), else mark it and let the kubelet stop it. Returns the
        object and whether it is already gone."""
        pod = self.store.get(PODS, namespace, name)
        uid = pod["metadata"]["uid"]
        with self._lock:
            started = uid in self._started
            stopping = self._stopping.get(uid)
        if not started:
            return self.store.remove(PODS, namespace, name), True
        if grace is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if stopping is not None:
            return pod, False

        def mark(current: Obj) -> None:
            when = datetime.now(UTC) + timedelta(seconds=grace)
            current["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            current["metadata"]["deletionGracePeriodSeconds"] = int(grace)

        marked = self.store.change(PODS, namespace, name, mark)
        future = self._workers.submit(self._stop, marked, grace)
        with self._lock:
            self._stopping[uid] = future
        return marked, False

    def _stop(self, pod: Obj, grace: float) -> None:
        meta = pod["metadata"]
        try:
            self.kubelet.stop_pod(copy.deepcopy(pod), grace)
        finally:
            with contextlib.suppress(errors.ApiError):
                self.store.remove(PODS, meta["namespace"], meta["name"])
            with self._lock:
                self._started.discard(meta["uid"])
                self._stopping.pop(meta["uid"], None)
            self.kick()

    def wait_stopped(self, uid: str, timeout: float) -> None:
        with self._lock:
            future = self._stopping.get(uid)
        if future is not None:
            future.result(timeout=timeout)

    def delete_namespace(self, name: str) -> Obj:
        """Mark the namespace Terminating; a worker deletes what is in it, then it."""

        def mark(ns: Obj) -> None:
            ns["metadata"]["deletionTimestamp"] = now()
            ns.setdefault("status", {})["phase"] = "Terminating"

        current = self.store.get(NAMESPACES, "", name)
        if current["metadata"].get("deletionTimestamp"):
            return current
        marked = self.store.change(NAMESPACES, "", name, mark)
        self._workers.submit(self._empty_namespace, name)
        return marked

    def _empty_namespace(self, name: str) -> None:
        for pod in self.store.list(PODS, name)[0]:
            with contextlib.suppress(errors.ApiError):
                self.delete_pod(name, pod["metadata"]["name"], None)
        for pod in self.store.list(PODS, name)[0]:
            self.wait_stopped(pod["metadata"]["uid"], timeout=120)
        for resource in resources.RESOURCES:
            if resource.namespaced and resource is not PODS:
                for obj in self.store.list(resource, name)[0]:
                    with contextlib.suppress(errors.ApiError):
                        self.store.remove(resource, name, obj["metadata"]["name"])
        with contextlib.suppress(errors.ApiError):
            self.store.remove(NAMESPACES, "", name)

    def when_idle(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Poll `predicate` until true or `timeout` seconds pass (for the server's helpers)."""
        deadline = datetime.now(UTC) + timedelta(seconds=timeout)
        while not predicate():
            if datetime.now(UTC) > deadline or self._closed.wait(0.01):
                return False
        return True

    # -- admission: ResourceQuota ------------------------------------------------------

    def check_quota(self, pod: Obj) -> None:
        """403 Forbidden 'exceeded quota' when creating `pod` would go over a quota of its
        namespace (hard limits on pods, cpu, memory, requests.X, limits.X)."""
        namespace = pod["metadata"]["namespace"]
        quotas, _ = self.store.list(QUOTAS, namespace)
        if not quotas:
            return
        wanted = _quota_usage([pod])
        used = _quota_usage(
            p
            for p in self.store.list(PODS, namespace)[0]
            if p["status"].get("phase") not in scheduler.TERMINAL
        )
        for quota in quotas:
            hard = quantity.parse_map((quota.get("spec") or {}).get("hard"))
            over = sorted(
                n
                for n, limit in hard.items()
                if wanted.get(n, Fraction(0)) > 0 and used.get(n, Fraction(0)) + wanted[n] > limit
            )
            if over:
                fmt = functools.partial(_show, over)
                raise errors.forbidden(
                    f'pods "{pod["metadata"].get("name") or pod["metadata"].get("generateName")}"'
                    f" is forbidden: exceeded quota: {quota['metadata']['name']}, requested: "
                    f"{fmt(wanted)}, used: {fmt(used)}, limited: {fmt(hard)}"
                )


def _show(names: list[str], values: dict[str, Fraction]) -> str:
    return ",".join(f"{n}={quantity.show(n, values.get(n, Fraction(0)))}" for n in names)


def _quota_usage(pods: Any) -> dict[str, Fraction]:
    usage: dict[str, Fraction] = {}
    for pod in pods:
        requests = quantity.pod_requests(pod)
        limits: quantity.Resources = {}
        for container in pod["spec"].get("containers") or []:
            quantity.add(
                limits, quantity.parse_map((container.get("resources") or {}).get("limits"))
            )
        for name, value in requests.items():
            if name == "pods":
                continue
            for key in (name, f"requests.{name}"):
                usage[key] = usage.get(key, Fraction(0)) + value
        for name, value in limits.items():
            usage[f"limits.{name}"] = usage.get(f"limits.{name}", Fraction(0)) + value
        usage["pods"] = usage.get("pods", Fraction(0)) + 1
        usage["count/pods"] = usage["pods"]
    return usage
