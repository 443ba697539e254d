"""The fake GCE's catalog (zones, regions, machine types, accelerator and image lookups),
its network and firewalls, IAM service accounts and policies and Resource Manager, through
the real google-api-python-client (fakes/gce/server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from fakes.gce.helpers import ZONE, P, error_of, fresh_server, get, insert, serve, wait
from fakes.gce.server import GceServer


@pytest.fixture(scope="module")
def server() -> Iterator[GceServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def fresh(server: GceServer) -> Iterator[None]:
    yield from fresh_server(server)


@pytest.fixture(scope="module")
def compute(server: GceServer) -> Any:
    return server.client("compute")


# -- catalog, network, IAM ------------------------------------------------------------------


def test_catalog_networks_and_firewalls(server: GceServer, compute: Any) -> None:
    region = compute.regions().get(project=P, region="us-west1").execute()
    assert {z.rpartition("/")[2] for z in region["zones"]} == {
        "us-west1-a",
        "us-west1-b",
        "us-west1-c",
    }
    assert compute.zones().get(project=P, zone=ZONE).execute()["status"] == "UP"
    kinds = {
        name: compute.machineTypes().get(project=P, zone=ZONE, machineType=name).execute()
        for name in (
            "n1-standard-2",
            "n2-standard-8",
            "e2-medium",
            "a2-highgpu-1g",
            "g2-standard-4",
            "custom-6-16384",
        )
    }
    assert {n: (k["guestCpus"], k["memoryMb"]) for n, k in kinds.items()} == {
        "n1-standard-2": (2, 7680),
        "n2-standard-8": (8, 32768),
        "e2-medium": (2, 4096),
        "a2-highgpu-1g": (12, 87040),
        "g2-standard-4": (4, 16384),
        "custom-6-16384": (6, 16384),
    }
    assert kinds["a2-highgpu-1g"]["accelerators"] == [
        {"guestAcceleratorType": "nvidia-tesla-a100", "guestAcceleratorCount": 1}
    ]
    listed = (
        compute.machineTypes().list(project=P, zone=ZONE, filter="name = n1-standard-16").execute()
    )
    assert [k["guestCpus"] for k in listed["items"]] == [16]
    t4 = (
        compute.acceleratorTypes()
        .get(project=P, zone=ZONE, acceleratorType="nvidia-tesla-t4")
        .execute()
    )
    assert t4["name"] == "nvidia-tesla-t4"
    for project, family in (
        ("deeplearning-platform-release", "common-cpu"),
        ("debian-cloud", "debian-12"),
    ):
        image = compute.images().getFromFamily(project=project, family=family).execute()
        assert image["family"] == family and image["status"] == "READY"
        assert (
            compute.images().get(project=project, image=image["name"]).execute()["selfLink"]
            == image["selfLink"]
        )
    with pytest.raises(HttpError) as missing:
        compute.images().getFromFamily(project="debian-cloud", family="debian-99").execute()
    assert error_of(missing)[0] == 404
    network = compute.networks().get(project=P, network="default").execute()
    assert network["autoCreateSubnetworks"] is True

    rule = {
        "name": "ray-c1",
        "network": "global/networks/default",
        "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
        "sourceRanges": ["127.0.0.0/8"],
    }
    wait(compute, compute.firewalls().insert(project=P, body=rule).execute())
    assert (
        compute.firewalls().get(project=P, firewall="ray-c1").execute()["allowed"]
        == rule["allowed"]
    )
    with pytest.raises(HttpError) as duplicate:
        compute.firewalls().insert(project=P, body=rule).execute()
    assert error_of(duplicate)[0] == 409
    assert [f["name"] for f in compute.firewalls().list(project=P).execute()["items"]] == ["ray-c1"]
    wait(compute, compute.firewalls().delete(project=P, firewall="ray-c1").execute())
    assert "items" not in compute.firewalls().list(project=P).execute()


def test_service_accounts_and_iam_policy_round_trips(server: GceServer, compute: Any) -> None:
    iam, crm = server.client("iam"), server.client("cloudresourcemanager")
    accounts = iam.projects().serviceAccounts()
    made = accounts.create(
        name=f"projects/{P}",
        body={"accountId": "ray-autoscaler-sa-v1", "serviceAccount": {"displayName": "Ray"}},
    ).execute()
    email = made["email"]
    assert email == f"ray-autoscaler-sa-v1@{P}.iam.gserviceaccount.com"
    assert (
        accounts.get(name=f"projects/{P}/serviceAccounts/{email}").execute()["displayName"] == "Ray"
    )
    assert email in {a["email"] for a in accounts.list(name=f"projects/{P}").execute()["accounts"]}
    with pytest.raises(HttpError) as duplicate:
        accounts.create(name=f"projects/{P}", body={"accountId": "ray-autoscaler-sa-v1"}).execute()
    assert error_of(duplicate)[:2] == (409, "ALREADY_EXISTS")
    with pytest.raises(HttpError) as unknown:
        accounts.get(
            name=f"projects/{P}/serviceAccounts/nobody@{P}.iam.gserviceaccount.com"
        ).execute()
    status, reason, body = error_of(unknown)
    assert (status, reason) == (404, "NOT_FOUND") and "errors" not in body
    with pytest.raises(HttpError) as bad_id:
        accounts.create(name=f"projects/{P}", body={"accountId": "X"}).execute()
    assert error_of(bad_id)[0] == 400

    assert crm.projects().get(projectId=P).execute()["projectNumber"] == server.project_number
    policy = (
        crm.projects()
        .getIamPolicy(resource=P, body={"options": {"requestedPolicyVersion": 3}})
        .execute()
    )
    old_etag = policy["etag"]
    policy["bindings"].append(
        {"role": "roles/compute.admin", "members": [f"serviceAccount:{email}"]}
    )
    updated = crm.projects().setIamPolicy(resource=P, body={"policy": policy}).execute()
    assert updated["etag"] != old_etag
    again = crm.projects().getIamPolicy(resource=P, body={}).execute()
    assert {"role": "roles/compute.admin", "members": [f"serviceAccount:{email}"]} in again[
        "bindings"
    ]
    with pytest.raises(HttpError) as stale:
        crm.projects().setIamPolicy(resource=P, body={"policy": policy}).execute()
    assert error_of(stale)[0] == 409
    ghost = {
        "bindings": [
            {
                "role": "roles/viewer",
                "members": [f"serviceAccount:ghost@{P}.iam.gserviceaccount.com"],
            }
        ]
    }
    with pytest.raises(HttpError) as no_account:
        crm.projects().setIamPolicy(resource=P, body={"policy": ghost}).execute()
    assert error_of(no_account)[0] == 400

    resource = f"projects/{P}/serviceAccounts/{email}"
    account_policy = accounts.getIamPolicy(resource=resource).execute()
    account_policy["bindings"] = [
        {
            "role": "roles/iam.serviceAccountUser",
            "members": [f"serviceAccount:{server.account_email}"],
        }
    ]
    accounts.setIamPolicy(resource=resource, body={"policy": account_policy}).execute()
    assert (
        accounts.getIamPolicy(resource=resource).execute()["bindings"][0]["role"]
        == "roles/iam.serviceAccountUser"
    )
    wait(
        compute,
        insert(
            compute,
            "n",
            serviceAccounts=[
                {"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
            ],
        ),
    )
    assert get(compute, "n")["serviceAccounts"][0]["email"] == email
    accounts.delete(name=resource).execute()
    with pytest.raises(HttpError):
        accounts.get(name=resource).execute()


def test_conditional_bindings_need_version_3_and_are_enforced(server: GceServer) -> None:
    """A binding with a condition is stored only in a version 3 policy, shown to version 1
    readers as IAM does (`ROLE_withcond_...`, no condition), and enforced: the account may
    act on instances whose names the condition allows, and gets 403 elsewhere."""
    from google.oauth2.credentials import Credentials

    from fakes.gce.authz import compile_condition

    crm = server.client("cloudresourcemanager").projects()
    accounts = server.client("iam").projects().serviceAccounts()
    email = accounts.create(name=f"projects/{P}", body={"accountId": "scoped-head"}).execute()[
        "email"
    ]
    expression = (
        'resource.type != "compute.googleapis.com/Instance" || '
        'resource.name.extract("/instances/{name}").startsWith("mine-")'
    )
    binding = {
        "role": "roles/compute.instanceAdmin.v1",
        "members": [f"serviceAccount:{email}"],
        "condition": {"title": "mine", "expression": expression},
    }
    policy = crm.getIamPolicy(resource=P, body={}).execute()
    policy["bindings"].append(binding)
    with pytest.raises(HttpError) as old_version:
        crm.setIamPolicy(resource=P, body={"policy": policy}).execute()
    assert error_of(old_version)[0] == 400
    bad = {**policy, "bindings": [*policy["bindings"][:-1], {**binding, "condition": {
        "title": "x", "expression": 'resource.name.matches("x")'}}], "version": 3}  # fmt: skip
    with pytest.raises(HttpError) as unmodelled:
        crm.setIamPolicy(resource=P, body={"policy": bad}).execute()
    assert error_of(unmodelled)[0] == 400
    crm.setIamPolicy(resource=P, body={"policy": {**policy, "version": 3}}).execute()
    as_v1 = crm.getIamPolicy(resource=P, body={}).execute()
    (shown,) = [b for b in as_v1["bindings"] if f"serviceAccount:{email}" in b["members"]]
    assert "_withcond_" in shown["role"] and "condition" not in shown
    with pytest.raises(HttpError) as v1_back:  # a version 1 view cannot be written back
        crm.setIamPolicy(resource=P, body={"policy": as_v1}).execute()
    assert error_of(v1_back)[0] == 400
    as_v3 = crm.getIamPolicy(resource=P, body={"options": {"requestedPolicyVersion": 3}}).execute()
    assert binding["condition"] in [b.get("condition") for b in as_v3["bindings"]]

    owner = server.client("compute")
    for name in ("mine-1", "theirs-1"):
        wait(owner, insert(owner, name))
    token = "ya29.fake-scoped-head"
    server.iam.tokens[token] = email  # as the token endpoint records the account
    from googleapiclient import discovery

    compute = discovery.build(
        "compute", "v1", credentials=Credentials(token), static_discovery=True,
        client_options={"api_endpoint": server.compute_url},
    )  # fmt: skip
    instances = compute.instances()
    assert len(instances.list(project=P, zone=ZONE).execute()["items"]) == 2  # no type: allowed
    wait(compute, instances.stop(project=P, zone=ZONE, instance="mine-1").execute())
    with pytest.raises(HttpError) as refused:
        instances.stop(project=P, zone=ZONE, instance="theirs-1").execute()
    status, reason, body = error_of(refused)
    assert (status, reason) == (403, "forbidden")
    assert body["message"] == (
        f"Required 'compute.instances.stop' permission for "
        f"'projects/{P}/zones/{ZONE}/instances/theirs-1'"
    )
    scoped_crm = discovery.build(
        "cloudresourcemanager", "v1", credentials=Credentials(token), static_discovery=True,
        client_options={"api_endpoint": server.endpoint("cloudresourcemanager")},
    )  # fmt: skip
    with pytest.raises(HttpError) as no_iam:  # it may not widen its own grant
        scoped_crm.projects().setIamPolicy(resource=P, body={"policy": as_v3}).execute()
    assert error_of(no_iam)[0] == 403
    attributes = {"resource.type": "", "resource.name": "projects/p/zones/z/instances/mine-9"}
    assert compile_condition(expression)(attributes)
    assert compile_condition(f"!({expression})")(attributes) is False
    assert compile_condition('resource.name.extract("/disks/{n}") == ""')(attributes)
