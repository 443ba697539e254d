"""Kubernetes API clients, as the user's kubeconfig (or the head pod) says.

On the user's machine: the kubeconfig files of `KUBECONFIG` (colon-separated, merged as
kubectl merges them) or `~/.kube/config`, with `provider.context` or the current context.
In the autoscaler on the head pod: the pod's service account (in-cluster config: the
token and CA under /var/run/secrets/kubernetes.io/serviceaccount and the
KUBERNETES_SERVICE_HOST/PORT variables the kubelet sets). Each provider gets an ApiClient
of its own; the client library's global default configuration is never touched.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.providers.kubernetes.spec import KubernetesProviderConfig

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CREDENTIALS_HINT = (
    "set KUBECONFIG to a kubeconfig file (or put one at ~/.kube/config), and choose its "
    "context with provider.context or `kubectl config use-context`"
)


class StreamingApi:
    """The CoreV1Api that exec and port-forward connections are opened with: its
    `connect_*` methods (given to `kubernetes.stream`) are those of an ApiClient of the
    calling thread's own; every other call goes to `core`.

    `kubernetes.stream.stream` and `portforward` swap their ApiClient's `call_api` for a
    websocket request while they connect, and put back what they found. On an ApiClient
    shared by threads, a call another thread makes meanwhile is sent as a websocket
    handshake (and fails: "Handshake status 200 OK"), and two connects that overlap leave
    the websocket's in place for good, so that every call after them fails. A thread's own
    ApiClient is used for its connects alone (one at a time), and made once per thread:
    making one costs tens of milliseconds (its TLS context)."""

    def __init__(self, core: Any, configuration: Any) -> None:
        self._core = core
        self._configuration = configuration
        self._local = threading.local()

    def _own(self) -> Any:
        api = getattr(self._local, "api", None)
        if api is None:
            from kubernetes import client

            api = client.CoreV1Api(client.ApiClient(self._configuration))
            self._local.api = api
        return api

    def __getattr__(self, name: str) -> Any:
        if name.startswith("connect_"):
            return getattr(self._own(), name)
        return getattr(self._core, name)


@dataclass(frozen=True)
class KubeApis:
    core: Any  # kubernetes.client.CoreV1Api
    rbac: Any  # kubernetes.client.RbacAuthorizationV1Api
    api_client: Any  # kubernetes.client.ApiClient
    source: str  # where the credentials came from, for messages
    streams: StreamingApi  # for execs and port forwards (never `core`: see StreamingApi)


def in_cluster(environ: Mapping[str, str], account_dir: str = SERVICE_ACCOUNT_DIR) -> bool:
    """Whether this process runs in a pod with a service account token."""
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and Path(account_dir, "token").is_file()


def connect(
    settings: KubernetesProviderConfig,
    on_head: bool,
    environ: Mapping[str, str] | None = None,
    account_dir: str = SERVICE_ACCOUNT_DIR,
) -> KubeApis:
    """API clients for the cluster. Raises UsageError saying what to set when there are no
    credentials."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # partly typed: its loaders are not
    environ = os.environ if environ is None else environ
    configuration = client.Configuration()
    if on_head and in_cluster(environ, account_dir):
        loader = config.incluster_config.InClusterConfigLoader(
            token_filename=f"{account_dir}/token",
            cert_filename=f"{account_dir}/ca.crt",
            environ=environ,
        )
        try:
            loader.load_and_set(configuration)
        except config.ConfigException as exc:
            raise UsageError(f"the head pod's service account cannot be used: {exc}") from exc
        source = "the pod's service account"
    else:
        files = environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
        present = [f for f in files.split(os.pathsep) if f and Path(f).expanduser().is_file()]
        if not present:
            raise UsageError(f"no kubeconfig found ({files}); {CREDENTIALS_HINT}")
        try:
            config.load_kube_config(
                config_file=os.pathsep.join(present),
                context=settings.context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (config.ConfigException, ValueError, KeyError) as exc:
            where = f"context {settings.context!r}" if settings.context else "the current context"
            raise UsageError(
                f"kubeconfig {os.pathsep.join(present)}: {where} cannot be used: {exc}; "
                f"{CREDENTIALS_HINT}"
            ) from exc
        source = f"kubeconfig {os.pathsep.join(present)}" + (
            f" (context {settings.context})" if settings.context else ""
        )
    api_client = client.ApiClient(configuration)
    core = client.CoreV1Api(api_client)
    return KubeApis(
        core=core,
        rbac=client.RbacAuthorizationV1Api(api_client),
        api_client=api_client,
        source=source,
        streams=StreamingApi(core, configuration),
    )
