"""The fake GCE's catalog (zones, regions, machine types, accelerator and image lookups),
its network and firewalls, IAM service accounts and policies and Resource Manager, through
the real google-api-python-client (tests/gce_fake.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from tests.gce_fake import GceServer
from tests.gce_fake_helpers import ZONE, P, error_of, fresh_server, get, insert, serve, wait


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
