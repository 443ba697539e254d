"""`launcher check` against the fake GCE (testIamPermissions, regions.get quotas) and the
fake Kubernetes API server (SelfSubjectAccessReview, ResourceQuota), with the real SDK
clients; and the fakes' own answers to those calls, checked with the real clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.gce.helpers import fresh_server, serve
from fakes.gce.server import GceServer
from fakes.kube.kubeconfig import KubeContext
from fakes.kube.server import KubeServer
from tests.check_env import by_aspect, check, isolate, outside
from tests.conftest import run_cli

RBAC = "rbac.authorization.k8s.io"


@pytest.fixture(scope="module")
def gce() -> Iterator[GceServer]:
    yield from serve()


@pytest.fixture
def google(gce: GceServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[GceServer]:
    isolate(monkeypatch, tmp_path)
    for name, value in gce.env().items():
        monkeypatch.setenv(name, value)
    yield from (gce for _ in fresh_server(gce))


def gcp_config(tmp_path: Path, project: str, workers: int = 4) -> Path:
    path = tmp_path / "gcp.yaml"
    path.write_text(f"""
cluster_name: chk
max_workers: {workers}
provider: {{type: gcp, region: us-west1, availability_zone: us-west1-a, project_id: {project}}}
auth: {{ssh_user: ubuntu}}
available_node_types:
  head:
    node_config: {{machineType: n1-standard-4}}
  worker:
    node_config: {{machineType: n1-standard-4}}
    min_workers: 1
    max_workers: {workers}
head_node_type: head
""")
    return path


# -- the fakes' new calls --


def test_fake_gce_test_iam_permissions_answers_what_the_policy_grants(google: GceServer) -> None:
    crm = google.client("cloudresourcemanager")
    asked = ["compute.instances.create", "iam.serviceAccounts.create"]
    body = {"permissions": asked}
    owner = crm.projects().testIamPermissions(resource=google.project, body=body).execute()
    assert owner == {"permissions": asked}
    policy = google.iam.policy
    policy["bindings"] = [
        {
            "role": "roles/compute.instanceAdmin.v1",
            "members": [f"serviceAccount:{google.account_email}"],
        }
    ]
    limited = crm.projects().testIamPermissions(resource=google.project, body=body).execute()
    assert limited == {"permissions": ["compute.instances.create"]}
    from googleapiclient.errors import HttpError

    with pytest.raises(HttpError) as bad:
        crm.projects().testIamPermissions(
            resource=google.project, body={"permissions": ["compute.*"]}
        ).execute()
    assert bad.value.resp.status == 400


def test_fake_gce_region_quota_counts_live_instances(google: GceServer) -> None:
    from fakes.gce.helpers import body_of

    compute = google.client("compute")
    compute.instances().insert(
        project=google.project, zone="us-west1-b", body=body_of("q1")
    ).execute()
    google.wait_until(lambda: google.instance("q1") is not None)
    region = compute.regions().get(project=google.project, region="us-west1").execute()
    cpus = {q["metric"]: q for q in region["quotas"]}["CPUS"]
    assert cpus["limit"] == 24.0 and cpus["usage"] == 2.0  # one n1-standard-2


def test_fake_kube_self_subject_access_review_follows_rbac(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes import client, config

    isolate(monkeypatch, tmp_path)
    with KubeServer(nodes=()) as server:
        token = rbac_user(server, verbs=["create", "get"])
        path = server.write_kubeconfig(tmp_path / "kc", extra=[KubeContext("dev", token, "ray")])
        api = config.new_client_from_config(config_file=str(path), context="dev")
        reviews = client.AuthorizationV1Api(api)

        def allowed(verb: str, resource: str, sub: str | None = None) -> bool:
            spec = client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace="ray", verb=verb, resource=resource, subresource=sub
                )
            )
            answer = reviews.create_self_subject_access_review(
                client.V1SelfSubjectAccessReview(spec=spec)
            )
            return bool(answer.status.allowed)

        assert allowed("create", "pods") and allowed("get", "pods")
        assert not allowed("delete", "pods") and not allowed("create", "pods", "exec")
        assert not allowed("create", "services")


def rbac_user(server: KubeServer, verbs: list[str], exec_too: bool = False) -> str:
    """A serviceaccount token bound to a Role in namespace ray allowing `verbs` on pods."""
    server.create("namespaces", {"metadata": {"name": "ray"}})
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]
    if exec_too:
        rules.append({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]})
    server.create("roles", {"metadata": {"name": "dev"}, "rules": rules}, "ray", RBAC)
    server.create(
        "rolebindings",
        {
            "metadata": {"name": "dev"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "dev"},
            "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": "ray"}],
        },
        "ray",
        RBAC,
    )
    return server.mint_token("ray", "dev")


# -- launcher check --


def test_gcp_ready_lists_permissions_and_region_quota(google: GceServer, tmp_path: Path) -> None:
    code, answer = check(gcp_config(tmp_path, google.project))
    assert code == 0, answer
    assert by_aspect(answer, "credentials")[0]["status"] == "ok"
    assert by_aspect(answer, "permissions")[0]["status"] == "ok"
    quota = by_aspect(answer, "quota")[0]
    assert quota["status"] == "ok" and "CPUS in us-west1: 24 of 24" in quota["detail"]
    assert google.calls("cloudresourcemanager.projects.testIamPermissions")
    assert outside() == []


def test_gcp_missing_permissions_and_quota_are_problems(google: GceServer, tmp_path: Path) -> None:
    google.iam.policy["bindings"] = [
        {
            "role": "roles/compute.instanceAdmin.v1",
            "members": [f"serviceAccount:{google.account_email}"],
        }
    ]
    google.compute.region_limits["CPUS"] = 6.0  # head 4 + one worker 4 = 8 to start
    result = run_cli("check", str(gcp_config(tmp_path, google.project)))
    assert result.exit_code == 1
    assert "not allowed: compute.firewalls.create" in result.stdout
    assert "iam.serviceAccounts.create" in result.stdout
    assert "lower min_workers of head, worker" in result.stdout


def test_kubernetes_access_review_and_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolate(monkeypatch, tmp_path)
    with KubeServer(nodes=()) as server:
        token = rbac_user(server, verbs=["create", "get", "list", "watch", "patch", "delete"])
        kubeconfig = server.write_kubeconfig(
            tmp_path / "kc", context="admin", extra=[KubeContext("dev", token, "ray")]
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        path = tmp_path / "k.yaml"
        path.write_text("""
cluster_name: chk
provider: {type: kubernetes, namespace: ray, context: dev}
available_node_types:
  head:
    node_config:
      apiVersion: v1
      kind: Pod
      spec:
        containers:
          - {name: ray, image: rayproject/ray, resources: {requests: {cpu: "1"}}}
head_node_type: head
""")
        code, answer = check(path)
        assert code == 1  # no pods/exec
        denied = by_aspect(answer, "permissions")[0]
        assert denied["status"] == "problem" and denied["detail"].startswith(
            "not allowed: create pods/exec"
        )
        server.create(
            "resourcequotas",
            {"metadata": {"name": "small"}, "spec": {"hard": {"requests.cpu": "500m"}}},
            "ray",
        )
        path.write_text(path.read_text().replace("context: dev", "context: admin"))
        code, answer = check(path)
        assert code == 1 and by_aspect(answer, "permissions")[0]["status"] == "ok"
        quota = by_aspect(answer, "quota")[0]
        assert quota["status"] == "problem" and "0.5 of 0.5 CPUs left" in quota["detail"]
    assert outside() == []
