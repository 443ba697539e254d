"""The fake GCE of fakes/gce/server.py through the real google-api-python-client (service
account credentials from the fake's key file, tokens from its token endpoint): the Compute,
IAM and Resource Manager behaviour it models. No launcher code: these prove the
infrastructure the GCE provider is tested with (tests/test_gce_fake_clients.py drives it
with SSH, Ray's own provider and gcloud)."""

from __future__ import annotations

import ipaddress
import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from fakes.gce.helpers import (
    OTHER,
    ZONE,
    P,
    body_of,
    error_of,
    fresh_server,
    get,
    insert,
    running,
    serve,
    wait,
)
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


# -- auth -----------------------------------------------------------------------------------


def test_tokens_come_from_the_fake_and_calls_without_one_get_401(
    server: GceServer, compute: Any
) -> None:
    key = json.loads(server.key_file.read_text())
    assert key["token_uri"] == f"{server.url}/token" and key["type"] == "service_account"
    zones = compute.zones().list(project=P).execute()
    assert ZONE in {z["name"] for z in zones["items"]}
    assert [c.method for c in server.calls()][-1] == "compute.zones.list"
    url = f"{server.compute_url}projects/{P}/zones"
    for headers in ({}, {"Authorization": "Bearer not-issued-here"}):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
        error = json.loads(refused.value.read())["error"]
        assert (refused.value.code, error["status"], error["errors"][0]["reason"]) == (
            401,
            "UNAUTHENTICATED",
            "authError",
        )
    form = b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b"
    with pytest.raises(urllib.error.HTTPError) as bad_grant:
        urllib.request.urlopen(f"{server.url}/token", data=form, timeout=10)
    assert json.loads(bad_grant.value.read())["error"] == "invalid_grant"


# -- lifecycle and operations ---------------------------------------------------------------


def test_lifecycle_insert_stop_start_delete_with_operations(
    server: GceServer, compute: Any
) -> None:
    op = insert(compute, "node-1", labels={"ray-cluster-name": "c1"}, tags={"items": ["ray-c1"]})
    assert (op["kind"], op["status"], op["operationType"]) == (
        "compute#operation",
        "RUNNING",
        "insert",
    )
    assert op["targetLink"].endswith(f"/projects/{P}/zones/{ZONE}/instances/node-1")
    assert op["zone"].endswith(f"/zones/{ZONE}") and op["selfLink"].startswith(server.compute_url)
    assert get(compute, "node-1")["status"] in ("PROVISIONING", "STAGING", "RUNNING")
    done = wait(compute, op)
    assert "error" not in done and done["progress"] == 100
    running(server, "node-1")
    node = get(compute, "node-1")
    assert node["labels"] == {"ray-cluster-name": "c1"} and node["tags"]["items"] == ["ray-c1"]
    assert node["machineType"].endswith(f"/zones/{ZONE}/machineTypes/n1-standard-2")
    assert node["disks"][0]["boot"] and node["scheduling"]["provisioningModel"] == "STANDARD"
    ip = node["networkInterfaces"][0]["networkIP"]

    stop = compute.instances().stop(project=P, zone=ZONE, instance="node-1").execute()
    assert stop["operationType"] == "stop"
    wait(compute, stop)
    stopped = get(compute, "node-1")
    assert stopped["status"] == "TERMINATED"  # GCE's name for a stopped instance
    assert stopped["networkInterfaces"][0]["networkIP"] == ip
    filtered = 'status = "TERMINATED"'
    listed = compute.instances().list(project=P, zone=ZONE, filter=filtered).execute()
    assert [i["name"] for i in listed["items"]] == ["node-1"]
    wait(compute, compute.instances().start(project=P, zone=ZONE, instance="node-1").execute())
    started = get(compute, "node-1")
    assert started["status"] == "RUNNING" and started["networkInterfaces"][0]["networkIP"] == ip

    gone = compute.instances().delete(project=P, zone=ZONE, instance="node-1").execute()
    assert gone["operationType"] == "delete"
    wait(compute, gone)
    with pytest.raises(HttpError) as missing:
        get(compute, "node-1")
    assert error_of(missing)[:2] == (404, "notFound")
    got = compute.zoneOperations().get(project=P, zone=ZONE, operation=op["name"]).execute()
    assert got["status"] == "DONE" and got["name"] == op["name"]


def test_wait_blocks_until_the_operation_is_done_and_steps_move_the_lifecycle(
    server: GceServer, compute: Any
) -> None:
    server.timings.provision = server.timings.stage = 3600.0  # only step() moves things
    op = insert(compute, "slow")
    assert get(compute, "slow")["status"] == "PROVISIONING"
    waited: list[dict[str, Any]] = []
    waiter = threading.Thread(
        target=lambda: waited.append(
            server.client("compute")
            .zoneOperations()
            .wait(project=P, zone=ZONE, operation=op["name"])
            .execute()
        )
    )
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not waited  # the operation is not DONE: wait blocks
    assert server.step()  # PROVISIONING -> STAGING, the insert operation DONE
    waiter.join(30)
    assert waited and waited[0]["status"] == "DONE"
    assert get(compute, "slow")["status"] == "STAGING"
    assert server.step() and get(compute, "slow")["status"] == "RUNNING"
    assert not server.step()


# -- errors ---------------------------------------------------------------------------------


def test_google_error_bodies_for_404_409_400_and_a_sync_429(
    server: GceServer, compute: Any
) -> None:
    with pytest.raises(HttpError) as missing:
        get(compute, "nope")
    status, reason, body = error_of(missing)
    assert (status, reason, body["status"], body["code"]) == (404, "notFound", "NOT_FOUND", 404)
    assert body["errors"][0]["domain"] == "global"
    assert (
        body["message"] == f"The resource 'projects/{P}/zones/{ZONE}/instances/nope' was not found"
    )

    insert(compute, "dup")
    with pytest.raises(HttpError) as duplicate:
        insert(compute, "dup")
    assert error_of(duplicate)[:2] == (409, "alreadyExists")
    bad_bodies = [
        body_of("Bad_Name"),
        body_of("x", machineType="n1-standard-2"),  # GCE wants a URL
        body_of("x", machineType=f"zones/{ZONE}/machineTypes/n9-huge-3"),
        body_of("x", labels={"Upper": "v"}),
        body_of("x", labels={"k": "v" * 64}),
        body_of("x", labels={f"k{i}": "v" for i in range(65)}),
        body_of(
            "x", guestAccelerators=[{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]
        ),
        body_of("x", networkInterfaces=[]),
    ]
    for body in bad_bodies:
        with pytest.raises(HttpError) as rejected:
            compute.instances().insert(project=P, zone=ZONE, body=body).execute()
        assert error_of(rejected)[:2] == (400, "invalid"), body
    no_image = body_of("x")
    no_image["disks"][0]["initializeParams"]["sourceImage"] = (
        "projects/debian-cloud/global/images/family/debian-99"
    )
    with pytest.raises(HttpError) as unknown_image:
        compute.instances().insert(project=P, zone=ZONE, body=no_image).execute()
    assert error_of(unknown_image)[:2] == (404, "notFound")
    assert not any(v.name == "x" for v in server.instances())

    fault = server.faults.add("instances.list", "rateLimitExceeded", times=1)
    with pytest.raises(HttpError) as limited:
        compute.instances().list(project=P, zone=ZONE).execute()
    status, reason, body = error_of(limited)
    assert (status, reason, body["status"], body["message"]) == (
        429,
        "rateLimitExceeded",
        "RESOURCE_EXHAUSTED",
        "Rate Limit Exceeded",
    )
    assert compute.instances().list(project=P, zone=ZONE).execute()["items"][0]["name"] == "dup"
    assert (fault.seen, fault.fired, fault.exhausted) == (1, 1, True)
    logged = server.calls("instances.list")
    assert [(c.status, c.error, c.injected) for c in logged] == [
        (429, "rateLimitExceeded", True),
        (200, None, False),
    ]


def test_capacity_errors_finish_the_operation_and_the_instance_never_exists(
    server: GceServer, compute: Any
) -> None:
    server.faults.no_capacity(zone=ZONE, times=1)
    server.faults.add("instances.insert", "QUOTA_EXCEEDED", zone=OTHER, times=1)
    for zone, code, http in (
        (ZONE, "ZONE_RESOURCE_POOL_EXHAUSTED", 503),
        (OTHER, "QUOTA_EXCEEDED", 403),
    ):
        op = insert(compute, "big", zone)
        assert op["status"] == "RUNNING" and "error" not in op  # accepted
        with pytest.raises(HttpError) as missing:
            get(compute, "big", zone)
        assert error_of(missing)[0] == 404
        done = wait(compute, op)
        error = done["error"]["errors"][0]
        assert error["code"] == code and done["httpErrorStatusCode"] == http
        assert error["errorDetails"]
        assert ("does not have enough resources" if http == 503 else "Quota 'CPUS'") in error[
            "message"
        ]
        assert not any(v.name == "big" for v in server.instances())
        logged = server.calls("instances.insert")[-1]
        assert (logged.status, logged.error, logged.injected) == (200, code, True)
    wait(compute, insert(compute, "big"))  # the fault fired once
    stockout = server.faults.add(
        "instances.insert", "ZONE_RESOURCE_POOL_EXHAUSTED", 503, zone=OTHER, in_operation=False
    )
    with pytest.raises(HttpError) as unavailable:
        insert(compute, "big", OTHER)
    assert error_of(unavailable)[:2] == (503, "ZONE_RESOURCE_POOL_EXHAUSTED")
    assert stockout.fired == 1


def test_faults_skip_effects_and_the_log_and_reset_forgets_everything(
    server: GceServer, compute: Any
) -> None:
    seen: list[str] = []
    watcher = server.faults.add(
        "instances.get", effect=lambda call: seen.append(call.params["instance"])
    )
    missing = server.faults.add("instances.get", "notFound", skip=1, times=1, zone=OTHER)
    wait(compute, insert(compute, "n", OTHER))
    assert get(compute, "n", OTHER)["name"] == "n"  # skipped
    with pytest.raises(HttpError) as injected:
        get(compute, "n", OTHER)
    assert error_of(injected)[:2] == (404, "notFound")
    assert get(compute, "n", OTHER)["name"] == "n"  # fired once
    assert (
        seen == ["n", "n", "n"] and watcher.fired == 3 and (missing.seen, missing.fired) == (2, 1)
    )
    gets = server.calls("compute.instances.get")
    assert [(c.status, c.injected, c.call.zone) for c in gets] == [
        (200, False, OTHER),
        (404, True, OTHER),
        (200, False, OTHER),
    ]
    made = server.calls("instances.insert")[0].call
    assert made.body["name"] == "n" and made.params["project"] == P

    with pytest.raises(HttpError) as unmodelled:  # a real method the fake does not model
        compute.instances().reset(project=P, zone=OTHER, instance="n").execute()
    assert (
        error_of(unmodelled)[0] == 501
        and "compute.instances.reset" in error_of(unmodelled)[2]["message"]
    )

    server.reset()
    assert server.instances() == [] and server.calls() == [] and list(server.faults) == []
    assert "items" not in compute.instances().list(project=P, zone=OTHER).execute()  # same token


# -- lists ----------------------------------------------------------------------------------


def test_filters_as_gce_accepts_them_and_paging(server: GceServer, compute: Any) -> None:
    head = {"ray-cluster-name": "c1", "ray-node-kind": "head"}
    worker = {"ray-cluster-name": "c1", "ray-node-kind": "worker"}
    for name, labels in (
        ("h", head),
        ("w1", worker),
        ("w2", worker),
        ("other", {"ray-cluster-name": "c2"}),
    ):
        insert(compute, name, labels=labels)
    insert(compute, "tpu", labels={**worker, "tpu_cores": "8"})
    insert(compute, "far", OTHER, labels=worker)
    running(server, "h", "w1", "w2", "other", "tpu", "far")
    wait(compute, compute.instances().stop(project=P, zone=ZONE, instance="w2").execute())

    def names(expression: str, zone: str = ZONE) -> set[str]:
        found = compute.instances().list(project=P, zone=zone, filter=expression).execute()
        return {i["name"] for i in found.get("items", [])}

    ray = (
        "((labels.ray-node-kind = worker)) AND ((status = PROVISIONING) OR (status = STAGING) "
        "OR (status = RUNNING)) AND (labels.ray-cluster-name = c1) AND (NOT labels.tpu_cores:*)"
    )
    assert names(ray) == {"w1"}  # Ray's own GCP provider's filter
    assert names('labels.ray-cluster-name = "c1"') == {"h", "w1", "w2", "tpu"}
    assert names('(labels.ray-cluster-name = "c1") AND (status != "TERMINATED")') == {
        "h",
        "w1",
        "tpu",
    }
    assert names("name = h") == {"h"}
    assert names("status = RUNNING") == {"h", "w1", "other", "tpu"}
    assert names("labels.tpu_cores:*") == {"tpu"}
    assert names("-labels.tpu_cores:* labels.ray-node-kind = worker") == {"w1", "w2"}
    assert names("name eq 'w[0-9]'") == {"w1", "w2"}
    assert names("(name = h) OR (name = other)") == {"h", "other"}
    assert names(f"zone = {ZONE} AND name != h") == {"w1", "w2", "other", "tpu"}
    assert names("labels.ray-cluster-name = c1", OTHER) == {"far"}
    for bad in ("name =", "(name = h", "name h", "= h"):
        with pytest.raises(HttpError) as rejected:
            names(bad)
        assert error_of(rejected)[:2] == (400, "invalid"), bad

    pages, token = [], None
    while True:
        found = (
            compute.instances().list(project=P, zone=ZONE, maxResults=2, pageToken=token).execute()
        )
        pages.append([i["name"] for i in found["items"]])
        if not (token := found.get("nextPageToken")):
            break
    assert pages == [["h", "other"], ["tpu", "w1"], ["w2"]]
    with pytest.raises(HttpError) as too_many:
        compute.instances().list(project=P, zone=ZONE, maxResults=501).execute()
    assert error_of(too_many)[0] == 400

    seen: list[tuple[str, str]] = []
    request = compute.instances().aggregatedList(
        project=P, filter="labels.ray-node-kind = worker", maxResults=2
    )
    while request is not None:
        answer = request.execute()
        for scope, part in answer["items"].items():
            seen += [(scope, i["name"]) for i in part.get("instances", [])]
            if "instances" not in part:
                assert part["warning"]["code"] == "NO_RESULTS_ON_PAGE"
        request = compute.instances().aggregatedList_next(request, answer)
    assert seen == [
        (f"zones/{ZONE}", "tpu"),
        (f"zones/{ZONE}", "w1"),
        (f"zones/{ZONE}", "w2"),
        (f"zones/{OTHER}", "far"),
    ]


# -- labels, metadata, request ids ----------------------------------------------------------


def test_set_labels_needs_the_current_fingerprint(server: GceServer, compute: Any) -> None:
    wait(compute, insert(compute, "n", labels={"a": "1"}))
    node = get(compute, "n")
    old = node["labelFingerprint"]
    body = {"labels": {**node["labels"], "b": "2"}, "labelFingerprint": old}
    op = compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=body).execute()
    assert op["operationType"] == "setLabels"
    wait(compute, op)
    node = get(compute, "n")
    assert node["labels"] == {"a": "1", "b": "2"} and node["labelFingerprint"] != old
    for stale in ({"labels": {"c": "3"}, "labelFingerprint": old}, {"labels": {"c": "3"}}):
        with pytest.raises(HttpError) as conflict:
            compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=stale).execute()
        assert error_of(conflict)[:2] == (412, "conditionNotMet")
    bad = {"labels": {"ok": "Not OK"}, "labelFingerprint": node["labelFingerprint"]}
    with pytest.raises(HttpError) as invalid:
        compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=bad).execute()
    assert error_of(invalid)[:2] == (400, "invalid")
    many = {
        "labels": {f"k{i}": "v" for i in range(64)},
        "labelFingerprint": node["labelFingerprint"],
    }
    wait(
        compute,
        compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=many).execute(),
    )
    assert len(get(compute, "n")["labels"]) == 64


def test_metadata_fingerprints_of_instances_and_the_project(
    server: GceServer, compute: Any
) -> None:
    wait(compute, insert(compute, "n", metadata={"items": [{"key": "startup", "value": "x"}]}))
    metadata = get(compute, "n")["metadata"]
    body = {
        "fingerprint": metadata["fingerprint"],
        "items": [{"key": "ssh-keys", "value": "u:ssh-ed25519 AAAA u"}],
    }
    wait(
        compute,
        compute.instances().setMetadata(project=P, zone=ZONE, instance="n", body=body).execute(),
    )
    assert get(compute, "n")["metadata"]["items"] == body["items"]
    with pytest.raises(HttpError) as stale:
        compute.instances().setMetadata(project=P, zone=ZONE, instance="n", body=body).execute()
    assert error_of(stale)[:2] == (412, "conditionNotMet")

    project = compute.projects().get(project=P).execute()
    common = project["commonInstanceMetadata"]
    assert project["name"] == P and common.get("items", []) == []
    body = {
        "fingerprint": common["fingerprint"],
        "items": [{"key": "ssh-keys", "value": "ray:ssh-rsa AAAA ray"}],
    }
    op = compute.projects().setCommonInstanceMetadata(project=P, body=body).execute()
    assert "zone" not in op and "/global/operations/" in op["selfLink"]
    wait(compute, op)
    assert (
        compute.projects().get(project=P).execute()["commonInstanceMetadata"]["items"]
        == body["items"]
    )
    with pytest.raises(HttpError) as conflict:
        compute.projects().setCommonInstanceMetadata(project=P, body=body).execute()
    assert error_of(conflict)[0] == 412


def test_request_ids_make_mutations_idempotent(server: GceServer, compute: Any) -> None:
    token = str(uuid.uuid4())
    first = insert(compute, "once", requestId=token)
    again = insert(compute, "once", requestId=token)  # not 409: the same operation
    assert again["name"] == first["name"]
    assert [v.name for v in server.instances()] == ["once"]
    wait(compute, first)
    node = get(compute, "once")
    stop_id = str(uuid.uuid4())
    stops = [
        compute.instances()
        .stop(project=P, zone=ZONE, instance="once", requestId=stop_id)
        .execute()["name"]
        for _ in range(2)
    ]
    assert stops[0] == stops[1]
    body = {"labels": {"x": "y"}, "labelFingerprint": node["labelFingerprint"]}
    label_id = str(uuid.uuid4())
    ops = [
        compute.instances()
        .setLabels(project=P, zone=ZONE, instance="once", body=body, requestId=label_id)
        .execute()
        for _ in range(2)
    ]
    assert ops[0]["name"] == ops[1]["name"]  # the stale fingerprint of the repeat is not seen

    # A lost answer (the insert acted, then the client saw a 503) retried with its requestId.
    server.faults.add("instances.insert", "backendError", times=1, after=True)
    lost = str(uuid.uuid4())
    with pytest.raises(HttpError) as unavailable:
        insert(compute, "retried", requestId=lost)
    assert error_of(unavailable)[0] == 503
    wait(compute, insert(compute, "retried", requestId=lost))
    assert sorted(v.name for v in server.instances()) == ["once", "retried"]
    with pytest.raises(HttpError) as invalid:
        insert(compute, "x", requestId="not-a-uuid")
    assert error_of(invalid)[0] == 400


# -- spot, addresses ------------------------------------------------------------------------


def test_spot_and_preemptible_instances_and_preemption(server: GceServer, compute: Any) -> None:
    spot = {"provisioningModel": "SPOT", "instanceTerminationAction": "STOP"}
    insert(compute, "spot", scheduling=spot)
    insert(compute, "pre", scheduling={"preemptible": True, "instanceTerminationAction": "DELETE"})
    insert(compute, "plain")
    running(server, "spot", "pre", "plain")
    echoed = get(compute, "spot")["scheduling"]
    assert echoed["provisioningModel"] == "SPOT" and echoed["instanceTerminationAction"] == "STOP"
    assert echoed["automaticRestart"] is False and echoed["onHostMaintenance"] == "TERMINATE"
    assert get(compute, "pre")["scheduling"]["preemptible"] is True
    with pytest.raises(ValueError, match="neither spot nor preemptible"):
        server.preempt("plain")
    op = server.preempt("spot")
    assert (op["operationType"], op["status"], op["user"]) == (
        "compute.instances.preempted",
        "DONE",
        "system",
    )
    assert get(compute, "spot")["status"] == "TERMINATED"
    server.preempt("pre")
    with pytest.raises(HttpError):
        get(compute, "pre")
    recorded = (
        compute.zoneOperations()
        .list(project=P, zone=ZONE, filter="operationType = compute.instances.preempted")
        .execute()
    )
    assert {o["targetLink"].rpartition("/")[2] for o in recorded["items"]} == {"spot", "pre"}
    with pytest.raises(HttpError) as restart:
        insert(compute, "bad", scheduling={"provisioningModel": "SPOT", "automaticRestart": True})
    assert error_of(restart)[0] == 400


def test_addresses_are_loopback_per_zone_and_reused_only_once_the_instance_is_gone(
    server: GceServer, compute: Any
) -> None:
    insert(compute, "a", networkInterfaces=[{"accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}])
    insert(compute, "b")
    insert(compute, "c", OTHER)
    a, b, c = (
        get(compute, n, z)["networkInterfaces"][0]
        for n, z in (("a", ZONE), ("b", ZONE), ("c", OTHER))
    )
    assert (a["networkIP"], b["networkIP"], c["networkIP"]) == (
        "127.17.9.2",
        "127.17.9.3",
        "127.17.16.2",
    )
    assert a["accessConfigs"][0]["natIP"] == "127.17.9.2" and "accessConfigs" not in b
    subnet = compute.subnetworks().get(project=P, region="us-west1", subnetwork="default").execute()
    assert ipaddress.ip_address(a["networkIP"]) in ipaddress.ip_network(subnet["ipCidrRange"])
    running(server, "a", "b")
    wait(compute, compute.instances().stop(project=P, zone=ZONE, instance="a").execute())
    insert(compute, "d")  # a stopped instance keeps its address
    assert get(compute, "d")["networkInterfaces"][0]["networkIP"] == "127.17.9.4"
    wait(compute, compute.instances().delete(project=P, zone=ZONE, instance="b").execute())
    insert(compute, "e")
    assert get(compute, "e")["networkInterfaces"][0]["networkIP"] == "127.17.9.3"
