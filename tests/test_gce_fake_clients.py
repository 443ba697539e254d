"""The fake GCE's instances as SSH hosts (fakes/gce/hosts.py), Ray's own GCP node provider
and the real gcloud CLI against the fake (fakes/gce/server.py)."""

from __future__ import annotations

import io
import ipaddress
import json
import re
import shutil
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.error import HTTPError as HttpError

import paramiko
import pytest

from fakes.gce.helpers import ZONE, P, fresh_server, get, insert, serve, wait
from fakes.gce.hosts import GceHosts
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


def _id(server: GceServer, name: str) -> str:
    view = server.instance(name)
    assert view is not None
    return view.id


def _metadata(url: str) -> str:
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Metadata-Flavor"] == "Google"
        return str(answer.read().decode())


def _refused(ip: str) -> bool:
    try:
        with socket.create_connection((ip, 22), 1):
            return False
    except OSError:
        return True


def _set_project_keys(compute: Any, value: str) -> None:
    common = compute.projects().get(project=P).execute()["commonInstanceMetadata"]
    body = {"fingerprint": common["fingerprint"], "items": [{"key": "ssh-keys", "value": value}]}
    wait(compute, compute.projects().setCommonInstanceMetadata(project=P, body=body).execute())


def _keys(*entries: tuple[str, paramiko.PKey]) -> dict[str, Any]:
    value = "\n".join(f"{user}:{_public(key, user)}" for user, key in entries)
    return {"items": [{"key": "ssh-keys", "value": value}]}


def test_running_instances_are_ssh_hosts_with_the_keys_of_their_metadata(
    server: GceServer, compute: Any
) -> None:
    own, project_key, later, stranger = _key(), _key(), _key(), _key()
    _set_project_keys(compute, f"ray:{_public(project_key, 'ray')}")
    with GceHosts(server) as hosts:
        keys = _keys(("ubuntu", own))
        blocked = {"items": [*keys["items"], {"key": "block-project-ssh-keys", "value": "true"}]}
        insert(compute, "open", metadata=keys)
        insert(compute, "closed", metadata=blocked)
        host, closed = hosts.wait_for("open"), hosts.wait_for("closed")
        assert (host.ip, closed.ip) == ("127.17.9.2", "127.17.9.3")
        assert _ssh(host.ip, own, "echo $HOME").strip() == "/root"  # any user's key: root
        assert _ssh(host.ip, project_key, "echo in").strip() == "in"  # project-wide key
        assert _ssh(closed.ip, own, "echo in").strip() == "in"
        for ip, key in ((closed.ip, project_key), (host.ip, stranger)):
            with pytest.raises(paramiko.AuthenticationException):
                _ssh(ip, key, "true")
        metadata = get(compute, "open")["metadata"]
        added = {"fingerprint": metadata["fingerprint"], **_keys(("ubuntu", own), ("late", later))}
        request = compute.instances().setMetadata(project=P, zone=ZONE, instance="open", body=added)
        wait(compute, request.execute())
        hosts.wait_pass()  # as GCE's guest agent, the hosts apply new keys on a running host
        assert _ssh(host.ip, later, "echo late").strip() == "late"
        hosts.check()


def test_an_instance_reaches_the_fake_with_its_service_account_from_its_metadata_server(
    server: GceServer, compute: Any
) -> None:
    own = _key()
    scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    with GceHosts(server) as hosts:
        account = [{"email": "default", "scopes": scopes}]
        insert(compute, "head", metadata=_keys(("ray", own)), serviceAccounts=account)
        insert(compute, "bare", metadata=_keys(("ray", own)))
        host = hosts.wait_for("head")
        probe = (
            "python3 -c 'import os, google.auth; from googleapiclient import discovery; "
            "credentials, project = google.auth.default(); print(type(credentials).__module__); "
            'endpoint = os.environ["CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"]; '
            'compute = discovery.build("compute", "v1", credentials=credentials, '
            'client_options={"api_endpoint": endpoint}, static_discovery=True); '
            f'print(project, len(compute.instances().list(project=project, zone="{ZONE}").execute()["items"]))\''
        )
        # As the head's autoscaler would: project and token from the instance's metadata.
        found = _ssh(host.ip, own, probe).split()
        assert found == ["google.auth.compute_engine.credentials", P, "2"]
        assert server.calls("instances.list")[-1].call.origin == "head"
        asked = {c.call.path for c in server.calls("metadata.get")}
        assert "computeMetadata/v1/instance/service-accounts/default/token" in asked
    head = f"http://{server.metadata_host(_id(server, 'head'))}/"
    with pytest.raises(HttpError) as no_flavor:  # the header GCE's metadata server wants
        urllib.request.urlopen(head, timeout=10)
    assert no_flavor.value.code == 403
    assert _metadata(head + "computeMetadata/v1/instance/attributes/ssh-keys").startswith("ray:")
    assert _metadata(head + "computeMetadata/v1/instance/zone").endswith(f"/zones/{ZONE}")
    bare = f"http://{server.metadata_host(_id(server, 'bare'))}/computeMetadata/v1/"
    assert _metadata(bare + "instance/network-interfaces/0/ip") == "127.17.9.3"
    with pytest.raises(HttpError) as no_account:  # "bare" has no service account
        _metadata(bare + "instance/service-accounts/default/token")
    assert no_account.value.code == 404


def test_hosts_power_off_with_stop_delete_and_preemption_before_gce_says_so(
    server: GceServer, compute: Any
) -> None:
    own = _key()
    keys = _keys(("ray", own))
    with GceHosts(server) as hosts:
        insert(compute, "kept", metadata=keys)
        insert(compute, "gone", metadata=keys)
        host, doomed = hosts.wait_for("kept"), hosts.wait_for("gone")
        _ssh(host.ip, own, "echo kept > ~/disk")
        wait(compute, compute.instances().stop(project=P, zone=ZONE, instance="kept").execute())
        assert not host.running and _refused(host.ip)  # TERMINATED only once the machine is off
        wait(compute, compute.instances().start(project=P, zone=ZONE, instance="kept").execute())
        assert hosts.wait_for("kept") is host
        assert _ssh(host.ip, own, "cat ~/disk").strip() == "kept"

        wait(compute, compute.instances().delete(project=P, zone=ZONE, instance="gone").execute())
        assert _refused(doomed.ip)  # gone only once its machine is off: the address is free
        insert(compute, "next", metadata=keys)
        assert get(compute, "next")["networkInterfaces"][0]["networkIP"] == doomed.ip
        assert hosts.wait_for("next").ip == doomed.ip

        spot = {"provisioningModel": "SPOT"}
        wait(compute, insert(compute, "spot", scheduling=spot, metadata=keys))
        reclaimed = hosts.wait_for("spot")
        server.preempt("spot")
        assert not reclaimed.running and _refused(reclaimed.ip)
        assert get(compute, "spot")["status"] == "TERMINATED"
        hosts.check()
        assert all(
            ipaddress.ip_address(ip) in ipaddress.ip_network("127.17.0.0/16")
            for _, ip in hosts.started
        )


# -- Ray's own provider as a client -----------------------------------------------------


def test_rays_own_gcp_node_provider_runs_against_the_fake(
    server: GceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_provider = pytest.importorskip("ray.autoscaler._private.gcp.node_provider")
    from googleapiclient import discovery

    build = discovery.build

    def to_the_fake(service: str, version: str, *args: Any, **kwargs: Any) -> Any:
        kwargs["client_options"] = {"api_endpoint": server.endpoint(service)}
        return build(service, version, *args, **kwargs)

    # Ray builds its clients without an endpoint (static discovery, Google's URL).
    monkeypatch.setattr(discovery, "build", to_the_fake)
    for step in ("provision", "stage", "stop", "delete", "operation"):
        setattr(server.timings, step, 0.0)  # Ray polls operations every 5 s: answer DONE
    credentials = {"type": "service_account", "credentials": server.key_file.read_text()}
    config = {"type": "gcp", "project_id": P, "region": "us-west1", "availability_zone": ZONE}
    provider = node_provider.GCPNodeProvider({**config, "gcp_credentials": credentials}, "c1")
    node_config = {
        "machineType": "n1-standard-2",
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {
                    "diskSizeGb": 50,
                    "sourceImage": "projects/deeplearning-platform-release/global/images/family/common-cpu",
                },
            }
        ],
        "networkInterfaces": [
            {
                "subnetwork": f"{server.compute_url}projects/{P}/regions/us-west1/subnetworks/default",
                "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
            }
        ],
        "scheduling": [{"preemptible": True}],  # as Ray's example-full.yaml writes it
    }
    tags = {
        "ray-node-kind": "worker",
        "ray-user-node-type": "cpu",
        "ray-node-name": "ray-c1-worker",
    }
    created = provider.create_node(node_config, tags, 2)
    assert len(created) == 2 and all(name.endswith("-compute") for name in created)
    workers = provider.non_terminated_nodes({"ray-node-kind": "worker"})
    assert sorted(workers) == sorted(created)
    assert provider.non_terminated_nodes({"ray-node-kind": "head"}) == []
    first = workers[0]
    assert provider.is_running(first) and not provider.is_terminated(first)
    assert ipaddress.ip_address(provider.internal_ip(first)) in ipaddress.ip_network(
        "127.17.9.0/24"
    )
    assert provider.external_ip(first) == provider.internal_ip(first)
    assert provider.node_tags(first)["ray-cluster-name"] == "c1"
    provider.set_node_tags(first, {"ray-node-status": "up-to-date"})
    assert get(server.client("compute"), first)["labels"]["ray-node-status"] == "up-to-date"
    assert get(server.client("compute"), first)["scheduling"]["preemptible"] is True
    provider.terminate_node(first)
    assert provider.non_terminated_nodes({}) == [workers[1]]
    filters = [c.call.params["filter"] for c in server.calls("instances.list")]
    assert filters and all("labels.ray-cluster-name = c1" in f for f in filters)


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
    insert(server.client("compute"), "unlabelled")
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


def test_the_real_gcloud_patches_firewalls_lists_subnets_and_keeps_conditions(
    server: GceServer,
) -> None:
    """What the launcher's GCE provider relies on beyond instances, as gcloud does it:
    `firewall-rules update` (firewalls.patch), `subnets list` (subnetworks.aggregatedList)
    and a conditional project binding (policy version 3) read back whole."""
    if shutil.which("gcloud") is None:
        pytest.skip("the gcloud CLI is not installed on this machine")

    def gcloud(*args: str) -> str:
        done = server.gcloud(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    rule = ("compute", "firewall-rules")
    gcloud(
        *rule, "create", "r1", "--allow=tcp:22", "--source-ranges=127.0.0.0/8", "--target-tags=t"
    )
    gcloud(*rule, "update", "r1", "--source-ranges=127.0.0.2/32,127.0.0.3/32")
    assert server.calls("firewalls.patch")
    described = json.loads(gcloud(*rule, "describe", "r1", "--format=json"))
    assert described["sourceRanges"] == ["127.0.0.2/32", "127.0.0.3/32"]
    assert described["targetTags"] == ["t"]  # a patch changes only what it names
    listed = gcloud("compute", "networks", "subnets", "list", "--format=value(ipCidrRange)")
    assert "127.17.8.0/21" in listed.split()
    assert server.calls("subnetworks.aggregatedList")
    condition = 'title=mine,expression=resource.name.startsWith("projects/p/zones/z/instances/m-")'
    gcloud(
        "projects", "add-iam-policy-binding", P, f"--member=serviceAccount:{server.account_email}",
        "--role=roles/compute.viewer", f"--condition={condition}", "--format=json",
    )  # fmt: skip
    policy = json.loads(gcloud("projects", "get-iam-policy", P, "--format=json"))
    (kept,) = [b for b in policy["bindings"] if b.get("condition")]
    assert kept["role"] == "roles/compute.viewer" and kept["condition"]["title"] == "mine"
    assert policy["version"] == 3
    assert all(c.status < 400 for c in server.calls()), [
        c for c in server.calls() if c.status >= 400
    ]
