"""kubectl 1.32 against the fake Kubernetes API server (fakes/kube/server.py): create,
apply, label, patch, get with selectors, delete, the imperative `kubectl create` of the kinds
kubectl posts as protobuf, contexts and error messages; and, as root, pods run by the fake
kubelet (fakes/kube/kubelet.py) through the server: exec, logs, in-cluster config."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.kube.kubeconfig import KubeContext
from fakes.kube.scheduler import NodeSpec
from fakes.kube.server import KubeServer

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
SLEEPER = "trap : TERM INT; sleep infinity & wait"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    nodes = [
        NodeSpec("node-a"),
        NodeSpec("node-b"),
        NodeSpec("gpu-1", cpu="8", extra={"nvidia.com/gpu": "2"}),
    ]
    with KubeServer(nodes=nodes) as srv:
        yield srv


@pytest.fixture(scope="module")
def kubeconfig(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "config"
    robot = server.mint_token("default", "robot")
    return server.write_kubeconfig(path, extra=[KubeContext("robot-ctx", robot, "kube-system")])


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    done = subprocess.run(
        [KUBECTL, *args], check=False, capture_output=True, text=True, env=env, timeout=60
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: kc
  labels: {app: web}
spec:
  containers:
  - name: main
    image: busybox:1.36
    resources: {requests: {cpu: 100m}}
"""


def test_kubectl_create_apply_label_patch_delete(
    kubeconfig: Path, tmp_path: Path, server: KubeServer
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD_YAML)
    assert "pod/kc created" in kubectl(kubeconfig, "create", "-f", str(manifest)).stdout
    taken = kubectl(kubeconfig, "create", "-f", str(manifest), check=False)
    assert "Error from server (AlreadyExists)" in taken.stderr
    assert 'pods "kc" already exists' in taken.stderr
    manifest.write_text(POD_YAML.replace("app: web", "app: api"))
    assert "pod/kc configured" in kubectl(kubeconfig, "apply", "-f", str(manifest)).stdout
    kubectl(kubeconfig, "label", "pod", "kc", "tier=head")
    kubectl(kubeconfig, "patch", "pod", "kc", "-p", '{"metadata":{"annotations":{"n":"1"}}}')
    kubectl(
        kubeconfig,
        "patch",
        "pod",
        "kc",
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"tier":null}}}',
    )
    got = json.loads(kubectl(kubeconfig, "get", "pod", "kc", "-o", "json").stdout)
    assert got["metadata"]["labels"] == {"app": "api"}
    assert got["metadata"]["annotations"]["n"] == "1"
    table = kubectl(kubeconfig, "get", "pods", "-l", "app in (api)", "-o", "wide").stdout
    assert "kc" in table and "Running" in table
    names = kubectl(kubeconfig, "get", "pods", "-l", "app!=api", "-o", "name").stdout
    assert "pod/kc" not in names
    missing = kubectl(kubeconfig, "get", "pod", "nope", check=False)
    assert 'Error from server (NotFound): pods "nope" not found' in missing.stderr
    assert 'pod "kc" deleted' in kubectl(kubeconfig, "delete", "pod", "kc").stdout
    assert server.pod("default", "kc") is None


def test_kubectl_contexts_and_unauthorized(
    kubeconfig: Path, tmp_path: Path, server: KubeServer
) -> None:
    since = server.last_seq()
    nodes = kubectl(kubeconfig, "--context", "robot-ctx", "get", "nodes", "-o", "name").stdout
    assert "node/gpu-1" in nodes
    assert {c.call.user for c in server.calls(since=since)} == {
        "system:serviceaccount:default:robot"
    }
    pods = kubectl(kubeconfig, "--context", "robot-ctx", "get", "pods", "-v=6").stderr
    assert "/namespaces/kube-system/pods" in pods
    denied = kubectl(kubeconfig, "--token", "wrong", "get", "pods", check=False)
    assert denied.returncode != 0
    assert "Unauthorized" in denied.stderr


def test_kubectl_imperative_creates_sent_as_protobuf(kubeconfig: Path, server: KubeServer) -> None:
    kubectl(kubeconfig, "create", "namespace", "imp")
    run = ["-n", "imp"]
    kubectl(kubeconfig, "create", "serviceaccount", "robot", *run)
    kubectl(kubeconfig, "create", "secret", "generic", "s", "--from-literal=k=v", *run)
    kubectl(kubeconfig, "create", "configmap", "c", "--from-literal=a=b", *run)
    kubectl(kubeconfig, "create", "role", "r", "--verb=get,list", "--resource=pods", *run)
    kubectl(
        kubeconfig, "create", "rolebinding", "rb", "--role=r", "--serviceaccount=imp:robot", *run
    )
    kubectl(kubeconfig, "create", "service", "clusterip", "svc", "--tcp=80:8080", *run)
    kubectl(kubeconfig, "create", "quota", "q", "--hard=cpu=2,pods=3", *run)
    token = kubectl(kubeconfig, "create", "token", "robot", *run).stdout.strip()
    assert server.identity(token) is not None
    assert server.identity(token).user == "system:serviceaccount:imp:robot"  # type: ignore[union-attr]
    secret = server.get("secrets", "s", "imp")
    assert secret is not None and base64.b64decode(secret["data"]["k"]) == b"v"
    role = server.get("roles", "r", "imp", group="rbac.authorization.k8s.io")
    assert role is not None
    assert role["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]
    binding = server.get("rolebindings", "rb", "imp", group="rbac.authorization.k8s.io")
    assert binding is not None
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "robot", "namespace": "imp"}]
    service = server.get("services", "svc", "imp")
    assert service is not None and service["spec"]["ports"][0]["targetPort"] == 8080
    listed = kubectl(
        kubeconfig, "get", "sa,secret,cm,role,rolebinding,svc,quota", *run, "-o", "name"
    ).stdout.split()
    assert {
        "serviceaccount/robot",
        "secret/s",
        "configmap/c",
        "service/svc",
        "resourcequota/q",
    } <= set(listed)
    kubectl(kubeconfig, "delete", "namespace", "imp")
    assert server.get("namespaces", "imp") is None


def test_kubectl_shows_why_a_pod_is_pending(kubeconfig: Path, server: KubeServer) -> None:
    overrides = json.dumps(
        {
            "spec": {
                "containers": [
                    {"name": "big", "image": "x", "resources": {"requests": {"cpu": "64"}}}
                ]
            }
        }
    )
    kubectl(kubeconfig, "run", "big", "--image=x", f"--overrides={overrides}")
    server.wait_for(lambda: server.pod("default", "big")["status"].get("conditions"))
    described = kubectl(kubeconfig, "describe", "pod", "big").stdout
    assert "FailedScheduling" in described
    assert "0/3 nodes are available: 3 Insufficient cpu." in described
    assert "Pending" in kubectl(kubeconfig, "get", "pod", "big").stdout
    kubectl(kubeconfig, "cordon", "node-a")
    assert "SchedulingDisabled" in kubectl(kubeconfig, "get", "node", "node-a").stdout
    kubectl(kubeconfig, "uncordon", "node-a")
    kubectl(kubeconfig, "delete", "pod", "big")


# -- pods run by the fake kubelet, through the server (root only) ------------------------


def _can_run_pods() -> bool:
    return os.geteuid() == 0 and shutil.which("nsenter") is not None


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeServer, Path]]:
    if not _can_run_pods():
        pytest.skip("the fake kubelet needs root (PID and mount namespaces) and nsenter")
    from fakes.kube.kubelet import FakeKubelet

    with KubeServer(kubelet=lambda s: FakeKubelet(**s.kubelet_options())) as srv:
        yield srv, srv.write_kubeconfig(tmp_path_factory.mktemp("live") / "config")


def test_kubectl_exec_and_logs_reach_a_running_pod(live: tuple[KubeServer, Path]) -> None:
    server, config = live
    kubectl(
        config,
        "run",
        "sh",
        "--image=x",
        "--command",
        "--",
        "/bin/bash",
        "-c",
        f"echo started; {SLEEPER}",
    )
    kubectl(config, "wait", "--for=condition=Ready", "pod/sh", "--timeout=30s")
    done = kubectl(
        config, "exec", "sh", "--", "sh", "-c", "echo hi from $HOSTNAME; exit 3", check=False
    )
    assert done.returncode == 3
    assert done.stdout.strip() == "hi from sh"
    assert kubectl(config, "logs", "sh").stdout.strip() == "started"
    kubectl(config, "delete", "pod", "sh", "--grace-period=1")
    assert server.pod("default", "sh") is None


def test_in_cluster_config_inside_a_pod(live: tuple[KubeServer, Path]) -> None:
    server, config = live
    code = (
        "from kubernetes import config, client; config.load_incluster_config(); "
        "print(client.CoreV1Api().read_namespaced_pod('inside', 'default').metadata.name)"
    )
    kubectl(config, "run", "inside", "--image=x", "--command", "--", "/bin/bash", "-c", SLEEPER)
    kubectl(config, "wait", "--for=condition=Ready", "pod/inside", "--timeout=30s")
    since = server.last_seq()
    out = kubectl(config, "exec", "inside", "--", sys.executable, "-c", code).stdout
    assert out.strip() == "inside"
    users = {c.call.user for c in server.calls("get", "pods", since=since)}
    assert "system:serviceaccount:default:default" in users
    kubectl(config, "delete", "pod", "inside", "--grace-period=0", "--force")
    assert server.pod("default", "inside") is None


def test_kubectl_server_dry_run_changes_nothing(
    kubeconfig: Path, tmp_path: Path, server: KubeServer
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD_YAML.replace("name: kc", "name: dry"))
    done = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", str(manifest))
    assert "pod/dry created (server dry run)" in done.stdout
    assert server.pod("default", "dry") is None
    kubectl(kubeconfig, "create", "-f", str(manifest))
    kubectl(kubeconfig, "delete", "pod", "dry", "--dry-run=server")
    kubectl(kubeconfig, "label", "pod", "dry", "x=y", "--dry-run=server")
    pod = server.pod("default", "dry")
    assert pod is not None and "x" not in pod["metadata"]["labels"]
    kubectl(kubeconfig, "delete", "pod", "dry")
