"""The fake GCE of tests/gce_fake.py through the real google-api-python-client (service
account credentials from the fake's key file, tokens from its token endpoint) and the real
gcloud CLI. No launcher code: these prove the infrastructure the GCE provider is tested with."""

from __future__ import annotations

import io
import ipaddress
import json
import re
import shutil
import socket
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import paramiko
import pytest
from googleapiclient.errors import HttpError

from tests.gce_fake import PROJECT, GceServer
from tests.gce_hosts import GceHosts

P = PROJECT
ZONE = "us-west1-b"  # its addresses: 127.17.9.y
OTHER = "us-central1-a"  # 127.17.16.y

# Every address this process connects to or looks up while these tests run.
_connected: list[Any] = []
_looked_up: list[Any] = []
_recording = threading.Event()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _recording.is_set():
        return
    if event == "socket.connect":
        _connected.append(args[1])
    elif event == "socket.getaddrinfo":
        _looked_up.append(args[0])


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def server() -> Iterator[GceServer]:
    _recording.set()
    try:
        with GceServer() as server:
            yield server
    finally:
        _recording.clear()
    inet = [a for a in _connected if isinstance(a, tuple)]
    assert inet, "the audit hook saw no connection at all"
    outside = [a for a in inet if not ipaddress.ip_address(a[0]).is_loopback]
    assert outside == [], f"connections left this machine: {outside}"
    names = {str(h) for h in _looked_up if h is not None}
    assert all(ipaddress.ip_address(h).is_loopback for h in names), names


@pytest.fixture(autouse=True)
def fresh(server: GceServer) -> None:
    server.reset()


@pytest.fixture(scope="module")
def compute(server: GceServer) -> Any:
    return server.client("compute")


def _body(name: str, zone: str = ZONE, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/n1-standard-2",
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "initializeParams": {
                    "sourceImage": "projects/deeplearning-platform-release/global/images/family/common-cpu"
                },
            }
        ],
        "networkInterfaces": [{"subnetwork": f"regions/{zone[:-2]}/subnetworks/default"}],
    }
    body.update(extra)
    return body


def _insert(compute: Any, name: str, zone: str = ZONE, **extra: Any) -> dict[str, Any]:
    request_id = extra.pop("requestId", None)
    op: dict[str, Any] = (
        compute.instances()
        .insert(project=P, zone=zone, body=_body(name, zone, **extra), requestId=request_id)
        .execute()
    )
    return op


def _wait(compute: Any, op: dict[str, Any]) -> dict[str, Any]:
    zone = op.get("zone", "").rpartition("/")[2]
    if zone:
        done = compute.zoneOperations().wait(project=P, zone=zone, operation=op["name"])
    else:
        done = compute.globalOperations().wait(project=P, operation=op["name"])
    result: dict[str, Any] = done.execute()
    assert result["status"] == "DONE"
    return result


def _get(compute: Any, name: str, zone: str = ZONE) -> dict[str, Any]:
    found: dict[str, Any] = compute.instances().get(project=P, zone=zone, instance=name).execute()
    return found


def _error(raised: pytest.ExceptionInfo[HttpError]) -> tuple[int, str, dict[str, Any]]:
    body = json.loads(raised.value.content)["error"]
    reason = body["errors"][0]["reason"] if "errors" in body else body["status"]
    return raised.value.resp.status, reason, body


def _running(server: GceServer, *names: str) -> None:
    assert server.wait_until(
        lambda: all((v := server.instance(n)) is not None and v.status == "RUNNING" for n in names)
    )


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
    op = _insert(compute, "node-1", labels={"ray-cluster-name": "c1"})
    assert (op["kind"], op["status"], op["operationType"]) == (
        "compute#operation",
        "RUNNING",
        "insert",
    )
    assert op["targetLink"].endswith(f"/projects/{P}/zones/{ZONE}/instances/node-1")
    assert op["zone"].endswith(f"/zones/{ZONE}") and op["selfLink"].startswith(server.compute_url)
    assert _get(compute, "node-1")["status"] in ("PROVISIONING", "STAGING", "RUNNING")
    done = _wait(compute, op)
    assert "error" not in done and done["progress"] == 100
    _running(server, "node-1")
    node = _get(compute, "node-1")
    assert node["labels"] == {"ray-cluster-name": "c1"}
    assert node["machineType"].endswith(f"/zones/{ZONE}/machineTypes/n1-standard-2")
    assert node["disks"][0]["boot"] and node["scheduling"]["provisioningModel"] == "STANDARD"
    ip = node["networkInterfaces"][0]["networkIP"]

    stop = compute.instances().stop(project=P, zone=ZONE, instance="node-1").execute()
    assert stop["operationType"] == "stop"
    _wait(compute, stop)
    stopped = _get(compute, "node-1")
    assert stopped["status"] == "TERMINATED"  # GCE's name for a stopped instance
    assert stopped["networkInterfaces"][0]["networkIP"] == ip
    filtered = 'status = "TERMINATED"'
    listed = compute.instances().list(project=P, zone=ZONE, filter=filtered).execute()
    assert [i["name"] for i in listed["items"]] == ["node-1"]
    _wait(compute, compute.instances().start(project=P, zone=ZONE, instance="node-1").execute())
    started = _get(compute, "node-1")
    assert started["status"] == "RUNNING" and started["networkInterfaces"][0]["networkIP"] == ip

    gone = compute.instances().delete(project=P, zone=ZONE, instance="node-1").execute()
    assert gone["operationType"] == "delete"
    _wait(compute, gone)
    with pytest.raises(HttpError) as missing:
        _get(compute, "node-1")
    assert _error(missing)[:2] == (404, "notFound")
    got = compute.zoneOperations().get(project=P, zone=ZONE, operation=op["name"]).execute()
    assert got["status"] == "DONE" and got["name"] == op["name"]


def test_wait_blocks_until_the_operation_is_done_and_steps_move_the_lifecycle(
    server: GceServer, compute: Any
) -> None:
    server.timings.provision = server.timings.stage = 3600.0  # only step() moves things
    op = _insert(compute, "slow")
    assert _get(compute, "slow")["status"] == "PROVISIONING"
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
    assert _get(compute, "slow")["status"] == "STAGING"
    assert server.step() and _get(compute, "slow")["status"] == "RUNNING"
    assert not server.step()


# -- errors ---------------------------------------------------------------------------------


def test_google_error_bodies_for_404_409_400_and_a_sync_429(
    server: GceServer, compute: Any
) -> None:
    with pytest.raises(HttpError) as missing:
        _get(compute, "nope")
    status, reason, body = _error(missing)
    assert (status, reason, body["status"], body["code"]) == (404, "notFound", "NOT_FOUND", 404)
    assert body["errors"][0]["domain"] == "global"
    assert (
        body["message"] == f"The resource 'projects/{P}/zones/{ZONE}/instances/nope' was not found"
    )

    _insert(compute, "dup")
    with pytest.raises(HttpError) as duplicate:
        _insert(compute, "dup")
    assert _error(duplicate)[:2] == (409, "alreadyExists")
    bad_bodies = [
        _body("Bad_Name"),
        _body("x", machineType="n1-standard-2"),  # GCE wants a URL
        _body("x", machineType=f"zones/{ZONE}/machineTypes/n9-huge-3"),
        _body("x", labels={"Upper": "v"}),
        _body("x", labels={"k": "v" * 64}),
        _body("x", labels={f"k{i}": "v" for i in range(65)}),
        _body(
            "x", guestAccelerators=[{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]
        ),
        _body("x", networkInterfaces=[]),
    ]
    for body in bad_bodies:
        with pytest.raises(HttpError) as rejected:
            compute.instances().insert(project=P, zone=ZONE, body=body).execute()
        assert _error(rejected)[:2] == (400, "invalid"), body
    no_image = _body("x")
    no_image["disks"][0]["initializeParams"]["sourceImage"] = (
        "projects/debian-cloud/global/images/family/debian-99"
    )
    with pytest.raises(HttpError) as unknown_image:
        compute.instances().insert(project=P, zone=ZONE, body=no_image).execute()
    assert _error(unknown_image)[:2] == (404, "notFound")
    assert not any(v.name == "x" for v in server.instances())

    fault = server.faults.add("instances.list", "rateLimitExceeded", times=1)
    with pytest.raises(HttpError) as limited:
        compute.instances().list(project=P, zone=ZONE).execute()
    status, reason, body = _error(limited)
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
        op = _insert(compute, "big", zone)
        assert op["status"] == "RUNNING" and "error" not in op  # accepted
        with pytest.raises(HttpError) as missing:
            _get(compute, "big", zone)
        assert _error(missing)[0] == 404
        done = _wait(compute, op)
        error = done["error"]["errors"][0]
        assert error["code"] == code and done["httpErrorStatusCode"] == http
        assert error["errorDetails"]
        assert ("does not have enough resources" if http == 503 else "Quota 'CPUS'") in error[
            "message"
        ]
        assert not any(v.name == "big" for v in server.instances())
        logged = server.calls("instances.insert")[-1]
        assert (logged.status, logged.error, logged.injected) == (200, code, True)
    _wait(compute, _insert(compute, "big"))  # the fault fired once
    stockout = server.faults.add(
        "instances.insert", "ZONE_RESOURCE_POOL_EXHAUSTED", 503, zone=OTHER, in_operation=False
    )
    with pytest.raises(HttpError) as unavailable:
        _insert(compute, "big", OTHER)
    assert _error(unavailable)[:2] == (503, "ZONE_RESOURCE_POOL_EXHAUSTED")
    assert stockout.fired == 1


def test_faults_skip_effects_and_the_log_and_reset_forgets_everything(
    server: GceServer, compute: Any
) -> None:
    seen: list[str] = []
    watcher = server.faults.add(
        "instances.get", effect=lambda call: seen.append(call.params["instance"])
    )
    missing = server.faults.add("instances.get", "notFound", skip=1, times=1, zone=OTHER)
    _wait(compute, _insert(compute, "n", OTHER))
    assert _get(compute, "n", OTHER)["name"] == "n"  # skipped
    with pytest.raises(HttpError) as injected:
        _get(compute, "n", OTHER)
    assert _error(injected)[:2] == (404, "notFound")
    assert _get(compute, "n", OTHER)["name"] == "n"  # fired once
    assert (
        seen == ["n", "n", "n"] and watcher.fired == 3 and (missing.seen, missing.fired) == (2, 1)
    )
    gets = server.calls("compute.instances.get")
    assert [(c.status, c.injected, c.call.zone) for c in gets] == [
        (200, False, OTHER),
        (404, True, OTHER),
        (200, False, OTHER),
    ]
    insert = server.calls("instances.insert")[0].call
    assert insert.body["name"] == "n" and insert.params["project"] == P

    with pytest.raises(HttpError) as unmodelled:  # a real method the fake does not model
        compute.instances().reset(project=P, zone=OTHER, instance="n").execute()
    assert (
        _error(unmodelled)[0] == 501
        and "compute.instances.reset" in _error(unmodelled)[2]["message"]
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
        _insert(compute, name, labels=labels)
    _insert(compute, "tpu", labels={**worker, "tpu_cores": "8"})
    _insert(compute, "far", OTHER, labels=worker)
    _running(server, "h", "w1", "w2", "other", "tpu", "far")
    _wait(compute, compute.instances().stop(project=P, zone=ZONE, instance="w2").execute())

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
        assert _error(rejected)[:2] == (400, "invalid"), bad

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
    assert _error(too_many)[0] == 400

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
    _wait(compute, _insert(compute, "n", labels={"a": "1"}))
    node = _get(compute, "n")
    old = node["labelFingerprint"]
    body = {"labels": {**node["labels"], "b": "2"}, "labelFingerprint": old}
    op = compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=body).execute()
    assert op["operationType"] == "setLabels"
    _wait(compute, op)
    node = _get(compute, "n")
    assert node["labels"] == {"a": "1", "b": "2"} and node["labelFingerprint"] != old
    for stale in ({"labels": {"c": "3"}, "labelFingerprint": old}, {"labels": {"c": "3"}}):
        with pytest.raises(HttpError) as conflict:
            compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=stale).execute()
        assert _error(conflict)[:2] == (412, "conditionNotMet")
    bad = {"labels": {"ok": "Not OK"}, "labelFingerprint": node["labelFingerprint"]}
    with pytest.raises(HttpError) as invalid:
        compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=bad).execute()
    assert _error(invalid)[:2] == (400, "invalid")
    many = {
        "labels": {f"k{i}": "v" for i in range(64)},
        "labelFingerprint": node["labelFingerprint"],
    }
    _wait(
        compute,
        compute.instances().setLabels(project=P, zone=ZONE, instance="n", body=many).execute(),
    )
    assert len(_get(compute, "n")["labels"]) == 64


def test_metadata_fingerprints_of_instances_and_the_project(
    server: GceServer, compute: Any
) -> None:
    _wait(compute, _insert(compute, "n", metadata={"items": [{"key": "startup", "value": "x"}]}))
    metadata = _get(compute, "n")["metadata"]
    body = {
        "fingerprint": metadata["fingerprint"],
        "items": [{"key": "ssh-keys", "value": "u:ssh-ed25519 AAAA u"}],
    }
    _wait(
        compute,
        compute.instances().setMetadata(project=P, zone=ZONE, instance="n", body=body).execute(),
    )
    assert _get(compute, "n")["metadata"]["items"] == body["items"]
    with pytest.raises(HttpError) as stale:
        compute.instances().setMetadata(project=P, zone=ZONE, instance="n", body=body).execute()
    assert _error(stale)[:2] == (412, "conditionNotMet")

    project = compute.projects().get(project=P).execute()
    common = project["commonInstanceMetadata"]
    assert project["name"] == P and common.get("items", []) == []
    body = {
        "fingerprint": common["fingerprint"],
        "items": [{"key": "ssh-keys", "value": "ray:ssh-rsa AAAA ray"}],
    }
    op = compute.projects().setCommonInstanceMetadata(project=P, body=body).execute()
    assert "zone" not in op and "/global/operations/" in op["selfLink"]
    _wait(compute, op)
    assert (
        compute.projects().get(project=P).execute()["commonInstanceMetadata"]["items"]
        == body["items"]
    )
    with pytest.raises(HttpError) as conflict:
        compute.projects().setCommonInstanceMetadata(project=P, body=body).execute()
    assert _error(conflict)[0] == 412


def test_request_ids_make_mutations_idempotent(server: GceServer, compute: Any) -> None:
    token = str(uuid.uuid4())
    first = _insert(compute, "once", requestId=token)
    again = _insert(compute, "once", requestId=token)  # not 409: the same operation
    assert again["name"] == first["name"]
    assert [v.name for v in server.instances()] == ["once"]
    _wait(compute, first)
    node = _get(compute, "once")
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
        _insert(compute, "retried", requestId=lost)
    assert _error(unavailable)[0] == 503
    _wait(compute, _insert(compute, "retried", requestId=lost))
    assert sorted(v.name for v in server.instances()) == ["once", "retried"]
    with pytest.raises(HttpError) as invalid:
        _insert(compute, "x", requestId="not-a-uuid")
    assert _error(invalid)[0] == 400


# -- spot, addresses ------------------------------------------------------------------------


def test_spot_and_preemptible_instances_and_preemption(server: GceServer, compute: Any) -> None:
    spot = {"provisioningModel": "SPOT", "instanceTerminationAction": "STOP"}
    _insert(compute, "spot", scheduling=spot)
    _insert(compute, "pre", scheduling={"preemptible": True, "instanceTerminationAction": "DELETE"})
    _insert(compute, "plain")
    _running(server, "spot", "pre", "plain")
    echoed = _get(compute, "spot")["scheduling"]
    assert echoed["provisioningModel"] == "SPOT" and echoed["instanceTerminationAction"] == "STOP"
    assert echoed["automaticRestart"] is False and echoed["onHostMaintenance"] == "TERMINATE"
    assert _get(compute, "pre")["scheduling"]["preemptible"] is True
    with pytest.raises(ValueError, match="neither spot nor preemptible"):
        server.preempt("plain")
    op = server.preempt("spot")
    assert (op["operationType"], op["status"], op["user"]) == (
        "compute.instances.preempted",
        "DONE",
        "system",
    )
    assert _get(compute, "spot")["status"] == "TERMINATED"
    server.preempt("pre")
    with pytest.raises(HttpError):
        _get(compute, "pre")
    recorded = (
        compute.zoneOperations()
        .list(project=P, zone=ZONE, filter="operationType = compute.instances.preempted")
        .execute()
    )
    assert {o["targetLink"].rpartition("/")[2] for o in recorded["items"]} == {"spot", "pre"}
    with pytest.raises(HttpError) as restart:
        _insert(compute, "bad", scheduling={"provisioningModel": "SPOT", "automaticRestart": True})
    assert _error(restart)[0] == 400


def test_addresses_are_loopback_per_zone_and_reused_only_once_the_instance_is_gone(
    server: GceServer, compute: Any
) -> None:
    _insert(compute, "a", networkInterfaces=[{"accessConfigs": [{"type": "ONE_TO_ONE_NAT"}]}])
    _insert(compute, "b")
    _insert(compute, "c", OTHER)
    a, b, c = (
        _get(compute, n, z)["networkInterfaces"][0]
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
    _running(server, "a", "b")
    _wait(compute, compute.instances().stop(project=P, zone=ZONE, instance="a").execute())
    _insert(compute, "d")  # a stopped instance keeps its address
    assert _get(compute, "d")["networkInterfaces"][0]["networkIP"] == "127.17.9.4"
    _wait(compute, compute.instances().delete(project=P, zone=ZONE, instance="b").execute())
    _insert(compute, "e")
    assert _get(compute, "e")["networkInterfaces"][0]["networkIP"] == "127.17.9.3"


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
    assert _error(missing)[0] == 404
    network = compute.networks().get(project=P, network="default").execute()
    assert network["autoCreateSubnetworks"] is True

    rule = {
        "name": "ray-c1",
        "network": "global/networks/default",
        "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
        "sourceRanges": ["127.0.0.0/8"],
    }
    _wait(compute, compute.firewalls().insert(project=P, body=rule).execute())
    assert (
        compute.firewalls().get(project=P, firewall="ray-c1").execute()["allowed"]
        == rule["allowed"]
    )
    with pytest.raises(HttpError) as duplicate:
        compute.firewalls().insert(project=P, body=rule).execute()
    assert _error(duplicate)[0] == 409
    assert [f["name"] for f in compute.firewalls().list(project=P).execute()["items"]] == ["ray-c1"]
    _wait(compute, compute.firewalls().delete(project=P, firewall="ray-c1").execute())
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
    assert _error(duplicate)[:2] == (409, "ALREADY_EXISTS")
    with pytest.raises(HttpError) as unknown:
        accounts.get(
            name=f"projects/{P}/serviceAccounts/nobody@{P}.iam.gserviceaccount.com"
        ).execute()
    status, reason, body = _error(unknown)
    assert (status, reason) == (404, "NOT_FOUND") and "errors" not in body
    with pytest.raises(HttpError) as bad_id:
        accounts.create(name=f"projects/{P}", body={"accountId": "X"}).execute()
    assert _error(bad_id)[0] == 400

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
    assert _error(stale)[0] == 409
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
    assert _error(no_account)[0] == 400

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
    _wait(
        compute,
        _insert(
            compute,
            "n",
            serviceAccounts=[
                {"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
            ],
        ),
    )
    assert _get(compute, "n")["serviceAccounts"][0]["email"] == email
    accounts.delete(name=resource).execute()
    with pytest.raises(HttpError):
        accounts.get(name=resource).execute()


# -- SSH hosts ------------------------------------------------------------------------------


def _key() -> paramiko.Ed25519Key:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pem = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem))


def _public(key: paramiko.PKey, comment: str) -> str:
    return f"{key.get_name()} {key.get_base64()} {comment}"


def _ssh(ip: str, key: paramiko.PKey, command: str) -> str:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        client.connect(ip, 22, "root", pkey=key, timeout=20, allow_agent=False, look_for_keys=False)
        _, out, _ = client.exec_command(command, timeout=20)
        return str(out.read().decode())
    finally:
        client.close()


def _refused(ip: str) -> bool:
    try:
        with socket.create_connection((ip, 22), 1):
            return False
    except OSError:
        return True


def test_running_instances_are_ssh_hosts_with_the_keys_of_their_metadata(
    server: GceServer, compute: Any
) -> None:
    own, project_key, later, stranger = _key(), _key(), _key(), _key()
    common = compute.projects().get(project=P).execute()["commonInstanceMetadata"]
    body = {
        "fingerprint": common["fingerprint"],
        "items": [{"key": "ssh-keys", "value": f"ray:{_public(project_key, 'ray')}"}],
    }
    _wait(compute, compute.projects().setCommonInstanceMetadata(project=P, body=body).execute())
    with GceHosts(server) as hosts:
        keys = {"items": [{"key": "ssh-keys", "value": f"ubuntu:{_public(own, 'ubuntu')}"}]}
        blocked = {"items": [*keys["items"], {"key": "block-project-ssh-keys", "value": "true"}]}
        _insert(compute, "open", metadata=keys)
        _insert(compute, "closed", metadata=blocked)
        host = hosts.wait_for("open")
        closed = hosts.wait_for("closed")
        assert (host.ip, closed.ip) == ("127.17.9.2", "127.17.9.3")
        assert _ssh(host.ip, own, "echo $HOME; hostname -I >/dev/null; echo ok").split() == [
            "/root",
            "ok",
        ]
        assert _ssh(host.ip, project_key, "echo in").strip() == "in"  # project-wide key
        probe = (
            "python3 -c 'import os, google.auth; from googleapiclient import discovery; "
            "credentials, project = google.auth.default(); "
            'endpoint = os.environ["CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"]; '
            'compute = discovery.build("compute", "v1", credentials=credentials, '
            'client_options={"api_endpoint": endpoint}, static_discovery=True); '
            f'print(project, len(compute.instances().list(project=project, zone="{ZONE}").execute()["items"]))\''
        )
        assert _ssh(host.ip, own, probe).split() == [P, "2"]  # from the instance, as the head would
        assert _ssh(closed.ip, own, "echo in").strip() == "in"
        for ip, key in ((closed.ip, project_key), (host.ip, stranger)):
            with pytest.raises(paramiko.AuthenticationException):
                _ssh(ip, key, "true")
        metadata = _get(compute, "open")["metadata"]
        added = {
            "fingerprint": metadata["fingerprint"],
            "items": [
                {
                    "key": "ssh-keys",
                    "value": keys["items"][0]["value"] + f"\nlate:{_public(later, 'late')}",
                }
            ],
        }
        _wait(
            compute,
            compute.instances()
            .setMetadata(project=P, zone=ZONE, instance="open", body=added)
            .execute(),
        )
        hosts.wait_pass()  # as GCE's guest agent, the hosts apply new keys on a running host
        assert _ssh(host.ip, later, "echo late").strip() == "late"

        _ssh(host.ip, own, "echo kept > ~/disk")
        _wait(compute, compute.instances().stop(project=P, zone=ZONE, instance="open").execute())
        assert not host.running and _refused(host.ip)  # TERMINATED only once the machine is off
        _wait(compute, compute.instances().start(project=P, zone=ZONE, instance="open").execute())
        assert hosts.wait_for("open") is host
        assert _ssh(host.ip, own, "cat ~/disk").strip() == "kept"

        _wait(
            compute, compute.instances().delete(project=P, zone=ZONE, instance="closed").execute()
        )
        assert _refused(closed.ip)  # gone only once its machine is off: the address is free
        _insert(compute, "next", metadata=keys)
        assert _get(compute, "next")["networkInterfaces"][0]["networkIP"] == closed.ip
        assert hosts.wait_for("next").ip == closed.ip

        _wait(
            compute,
            _insert(compute, "spot", scheduling={"provisioningModel": "SPOT"}, metadata=keys),
        )
        spot = hosts.wait_for("spot")
        server.preempt("spot")
        assert not spot.running and _refused(spot.ip)
        assert _get(compute, "spot")["status"] == "TERMINATED"
        hosts.check()
        assert all(
            ipaddress.ip_address(ip) in ipaddress.ip_network("127.17.0.0/16")
            for _, ip in hosts.started
        )


# -- gcloud ---------------------------------------------------------------------------------


def test_the_real_gcloud_cli_creates_lists_describes_and_deletes(server: GceServer) -> None:
    if shutil.which("gcloud") is None:
        pytest.skip("the gcloud CLI is not installed on this machine")
    trace = server.dir / "connects.txt"
    strace = shutil.which("strace")
    prefix = (strace, "-f", "-qq", "-e", "trace=connect", "-o", str(trace)) if strace else ()

    def gcloud(*args: str) -> str:
        done = server.gcloud(*args, prefix=prefix)
        assert done.returncode == 0, done.stderr
        if strace:  # every address gcloud connected to, DNS servers included
            found = re.findall(
                r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"', trace.read_text()
            )
            addresses = {a or b for a, b in found}
            assert addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses), (
                addresses
            )
        return done.stdout

    # First, in the server's fresh CLOUDSDK_CONFIG: activation fetches a token from token_uri.
    assert (
        "Activated"
        in server.gcloud(
            "auth", "activate-service-account", "--key-file", str(server.key_file), prefix=prefix
        ).stderr
    )
    zone = ["--zone", ZONE]
    gcloud(
        "compute", "instances", "create", "g1", "g2", *zone, "--machine-type", "n1-standard-2",
        "--image-family", "debian-12", "--image-project", "debian-cloud", "--labels", "a=b",
    )  # fmt: skip
    batches = server.calls("compute.batch")  # two requests at once: gcloud batches them
    assert [b.call.params["parts"] for b in batches] == ["2", "2", "2"]  # insert, wait, get
    made = server.calls("instances.insert")[-1].call.body
    assert made["labels"] == {"a": "b"}
    assert made["disks"][0]["initializeParams"]["sourceImage"].endswith(
        "debian-cloud/zones/-/imageFamilyViews/debian-12"
    )
    _insert(server.client("compute"), "unlabelled")
    listed = json.loads(
        gcloud("compute", "instances", "list", "--filter=labels.a=b", "--format=json")
    )
    assert [(i["name"], i["labels"]) for i in listed] == [("g1", {"a": "b"}), ("g2", {"a": "b"})]
    described = json.loads(gcloud("compute", "instances", "describe", "g1", *zone, "--format=json"))
    assert described["networkInterfaces"][0]["networkIP"] == "127.17.9.2"
    assert described["status"] == "RUNNING" and described["labels"] == {"a": "b"}
    gcloud("compute", "instances", "delete", "g1", "g2", *zone, "--quiet")
    assert [v.name for v in server.instances()] == ["unlabelled"]
    methods = {c.method for c in server.calls()}
    assert {
        "oauth2.token",
        "compute.zones.get",
        "compute.projects.get",
        "compute.zoneOperations.wait",
        "compute.instances.aggregatedList",
        "compute.instances.get",
        "compute.instances.delete",
    } <= methods
    assert all(c.status < 400 for c in server.calls()), [
        c for c in server.calls() if c.status >= 400
    ]
