"""Kubernetes clusters whose names differ only in what Kubernetes names cannot hold
(`ml.prod`, `ml_prod`, `ML-prod`) never share an object, and `down --purge` of one leaves the
others whole; names `plan` prints are the names `up` creates; a namespace that cannot be one
is refused by `validate`. Against the fake API server (fakes/kube/), without Ray."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.kube.server import KubeServer
from launcher.config.loader import Overrides, parse_config
from launcher.errors import UsageError
from launcher.providers.base import TAG_CLUSTER, NodeKind
from launcher.providers.factory import make_provider
from launcher.providers.kubernetes.names import KUBE_NAME, autoscaler_name
from launcher.providers.kubernetes.objects import CREATED_BY, SHARED_NAME, USED_BY
from launcher.providers.kubernetes.provider import KubernetesProvider
from launcher.providers.kubernetes.spec import KubernetesSpec
from tests.conftest import run_cli

RBAC = "rbac.authorization.k8s.io"
OBJECTS = (("serviceaccounts", ""), ("roles", RBAC), ("rolebindings", RBAC))
COLLIDING = ["ml.prod", "ml_prod", "ML-prod", "ml-prod", "a" * 60 + "xyz", "a" * 60 + "xyw"]
POD = (
    "{apiVersion: v1, kind: Pod, metadata: {labels: {component: ray-head}}, "
    "spec: {containers: [{name: ray-node, image: rayproject/ray, "
    "resources: {requests: {cpu: 100m}}}]}}"
)


def config_text(name: str, service: str = "", namespace: str = "ray") -> str:
    services = (
        f"""
  services:
    - {{apiVersion: v1, kind: Service, metadata: {{name: {service}}},
       spec: {{selector: {{component: ray-head}}, ports: [{{port: 8265}}]}}}}"""
        if service
        else ""
    )
    return f"""
cluster_name: {name}
max_workers: 2
provider:
  type: kubernetes
  namespace: {namespace}
  scheduling_timeout_s: 5{services}
available_node_types:
  head: {{node_config: {POD}, resources: {{CPU: 1}}, max_workers: 0}}
  worker: {{node_config: {POD}, resources: {{CPU: 1}}, max_workers: 2}}
head_node_type: head
"""


def derived(name: str) -> dict[str, str]:
    return KubernetesSpec().derived_names(parse_config(config_text(name), "k.yaml", Overrides()))


# -- names, without a server -----------------------------------------------------------------


def test_every_derived_name_is_valid_and_differs_between_colliding_cluster_names() -> None:
    found = {name: derived(name) for name in COLLIDING}
    kinds = set(found["ml.prod"])
    assert {"service account", "role", "role binding"} <= kinds
    assert {"head pod name prefix", "worker pod name prefix"} <= kinds
    for kind in kinds:
        names = [found[cluster][kind] for cluster in COLLIDING]
        assert len(set(names)) == len(names), (kind, names)
        for name in names:
            # A pod's name is its prefix (cut to 58 by the API server) and 5 characters.
            full = name[:58] + "bcdfg" if kind.endswith("prefix") else name
            assert KUBE_NAME.valid(full), (kind, name)
            assert name == full or len(name) <= 58, name


def test_a_name_kubernetes_accepts_is_kept_as_it_is() -> None:
    names = derived("ml-prod")
    assert names["service account"] == "launcher-autoscaler-ml-prod"
    assert names["head pod name prefix"] == "ml-prod-head-"


def test_plan_prints_the_names_up_creates() -> None:
    for name in ("ml.prod", "ML-prod"):
        config = parse_config(config_text(name), "k.yaml", Overrides())
        spec = KubernetesSpec()
        shown = {(r.kind, r.name) for r in spec.bootstrap_plan(config)}
        names = spec.derived_names(config)
        for kind in ("service account", "role", "role binding"):
            assert (kind, names[kind]) in shown
        for kind in ("head", "worker"):
            assert (f"{kind} pods", names[f"{kind} pod name prefix"] + "*") in shown


def test_objects_the_config_names_are_not_derived() -> None:
    text = config_text("ml.prod").replace(
        "  type: kubernetes\n",
        "  type: kubernetes\n  autoscaler_service_account: "
        "{apiVersion: v1, kind: ServiceAccount, metadata: {name: autoscaler}}\n",
    )
    config = parse_config(text, "k.yaml", Overrides())
    names = KubernetesSpec().derived_names(config)
    assert "service account" not in names and names["role"] == autoscaler_name("ml.prod")
    shown = {(r.kind, r.name) for r in KubernetesSpec().bootstrap_plan(config)}
    assert ("service account", "autoscaler") in shown


# -- inputs refused by `validate` ------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["../kube-system", "'Ray Space'", "Ray", "a-", "x" * 64])
def test_a_namespace_that_cannot_be_one_is_refused_in_one_line(
    namespace: str, tmp_path: Path
) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(config_text("c", namespace=namespace))
    result = run_cli("validate", str(path))
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "provider.namespace:" in lines[0], lines
    assert "lowercase letters, digits or '-'" in lines[0]


def test_a_cluster_name_that_cannot_label_pods_is_refused_by_validate(tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(config_text("ml."))  # allowed as a cluster name, not as a label value
    result = run_cli("validate", str(path))
    assert result.exit_code == 2, result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert "cluster_name: 'ml.' cannot be a Kubernetes label value" in line
    assert line.endswith("; rename the cluster")


# -- on the fake API server ------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeServer]:
    monkeypatch.setenv("HOME", str(tmp_path))
    with KubeServer() as made:
        made.create("namespaces", {"metadata": {"name": "ray"}})
        monkeypatch.setenv("KUBECONFIG", str(made.write_kubeconfig(tmp_path / "kubeconfig")))
        yield made


def up(
    name: str, home: Path, monkeypatch: pytest.MonkeyPatch, service: str = ""
) -> KubernetesProvider:
    """Bootstrap the cluster and make its head and one worker, from its own LAUNCHER_HOME."""
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    provider = make_provider(parse_config(config_text(name, service), "k.yaml", Overrides()))
    assert isinstance(provider, KubernetesProvider)
    provider.bootstrap()
    types = provider.config.node_types
    provider.create_nodes(types["head"], NodeKind.HEAD, 1, {})
    provider.create_nodes(types["worker"], NodeKind.WORKER, 1, {})
    return provider


def objects_of(server: KubeServer, name: str) -> list[str]:
    """The autoscaler objects named for cluster `name` that exist."""
    own = autoscaler_name(name)
    return [p for p, g in OBJECTS if server.get(p, own, "ray", g) is not None]


def pods_of(server: KubeServer, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in server.pods("ray", f"{TAG_CLUSTER}={name}")
        if not p["metadata"].get("deletionTimestamp")
    ]


def test_clusters_with_colliding_names_get_their_own_objects_and_purge_only_theirs(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["ml.prod", "ML-prod", "ml_prod"]
    providers = {
        name: up(name, tmp_path / f"home{i}", monkeypatch, service=f"head-{i}")
        for i, name in enumerate(names)
    }
    accounts = {name: autoscaler_name(name) for name in names}
    assert len(set(accounts.values())) == 3
    for name in names:
        assert objects_of(server, name) == ["serviceaccounts", "roles", "rolebindings"]
        pods = pods_of(server, name)
        assert len(pods) == 2
        head = next(p for p in pods if p["metadata"]["generateName"].endswith("-head-"))
        assert head["spec"]["serviceAccountName"] == accounts[name]
        binding = server.get("rolebindings", accounts[name], "ray", RBAC)
        assert binding is not None and binding["subjects"][0]["name"] == accounts[name]
    prefixes = {p["metadata"]["generateName"] for n in names for p in pods_of(server, n)}
    assert len(prefixes) == 6  # a head and a worker prefix per cluster
    # Each service selects only its own cluster's pods, though all three configs say
    # `component: ray-head`.
    for i, name in enumerate(names):
        service = server.get("services", f"head-{i}", "ray")
        assert service is not None
        assert service["spec"]["selector"] == {"component": "ray-head", TAG_CLUSTER: name}

    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home0"))
    providers["ml.prod"].cleanup(purge=True)
    assert pods_of(server, "ml.prod") == [] and objects_of(server, "ml.prod") == []
    assert server.get("services", "head-0", "ray") is None
    for i, name in enumerate(names[1:], start=1):
        assert len(pods_of(server, name)) == 2, name
        assert objects_of(server, name) == ["serviceaccounts", "roles", "rolebindings"]
        assert server.get("services", f"head-{i}", "ray") is not None
    for name in names[1:]:
        providers[name].cleanup(purge=True)
        assert pods_of(server, name) == [] and objects_of(server, name) == []


def test_a_service_another_cluster_owns_is_refused_not_shared(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = up("ml.prod", tmp_path / "a", monkeypatch, service="ray-head")
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "b"))
    second = make_provider(parse_config(config_text("ml_prod", "ray-head"), "k.yaml", Overrides()))
    with pytest.raises(UsageError) as raised:
        second.bootstrap()
    message = str(raised.value)
    assert "\n" not in message
    assert "service ray-head in namespace ray belongs to cluster ml.prod" in message
    assert "give this cluster's service another name in provider.services" in message
    service = server.get("services", "ray-head", "ray")
    assert service is not None and service["metadata"]["labels"][TAG_CLUSTER] == "ml.prod"
    first.cleanup(purge=True)


def test_a_service_the_user_made_is_used_as_it_is(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.create(
        "services",
        {"metadata": {"name": "ray-head"}, "spec": {"ports": [{"port": 80}]}},
        namespace="ray",
    )
    provider = up("ml.prod", tmp_path / "a", monkeypatch, service="ray-head")
    provider.cleanup(purge=True)
    assert server.get("services", "ray-head", "ray") is not None  # not the cluster's


def test_purge_releases_the_objects_earlier_versions_shared(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier launchers gave every cluster of a namespace one `launcher-autoscaler` set:
    purging a cluster releases its use of it, and the last user's purge deletes it."""
    made = {CREATED_BY: "launcher", USED_BY: "ml.prod,ml_prod"}
    for plural, group in OBJECTS:
        body: dict[str, Any] = {"metadata": {"name": SHARED_NAME, "annotations": made}}
        if plural == "roles":
            body["rules"] = []
        if plural == "rolebindings":
            body["roleRef"] = {"kind": "Role", "name": SHARED_NAME, "apiGroup": RBAC}
        server.create(plural, body, namespace="ray", group=group)
    first = up("ml.prod", tmp_path / "a", monkeypatch)
    first.cleanup(purge=True)
    for plural, group in OBJECTS:
        left = server.get(plural, SHARED_NAME, "ray", group)
        assert left is not None and left["metadata"]["annotations"][USED_BY] == "ml_prod"
    second = up("ml_prod", tmp_path / "b", monkeypatch)
    second.cleanup(purge=True)
    for plural, group in OBJECTS:
        assert server.get(plural, SHARED_NAME, "ray", group) is None


def test_plan_json_lists_the_names_the_provider_creates(
    server: KubeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(config_text("ML-prod"))
    result = run_cli("plan", "--json", str(path))
    assert result.exit_code == 0, result.stderr
    shown = {(r["kind"], r["name"]) for r in json.loads(result.stdout)["resources"]}
    provider = up("ML-prod", tmp_path / "a", monkeypatch)
    created = [
        ("service account", server.get("serviceaccounts", autoscaler_name("ML-prod"), "ray")),
        ("role", server.get("roles", autoscaler_name("ML-prod"), "ray", RBAC)),
        ("role binding", server.get("rolebindings", autoscaler_name("ML-prod"), "ray", RBAC)),
    ]
    for kind, found in created:
        assert found is not None and (kind, found["metadata"]["name"]) in shown
    for pod in pods_of(server, "ML-prod"):
        kind = "head" if pod["metadata"]["generateName"].endswith("-head-") else "worker"
        assert (f"{kind} pods", pod["metadata"]["generateName"] + "*") in shown
    provider.cleanup(purge=True)
