"""GCP clusters that cannot hurt each other (issue 25): names that differ only in what GCE's
rules remove (`ml.prod`, `ml_prod`, `ML-prod`) get their own service account, network tag,
firewall rules and instance names; the head's account manages its own cluster's instances
only (the fake GCE enforces the project's IAM policy, conditions included); `down --purge`
of one leaves the others' alone; firewall rules follow the config; and the provider's
inputs are checked at validate. Against fakes/gce/server.py, no SSH host, no Ray."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from googleapiclient.errors import HttpError

from fakes.gce.compute import Timings
from fakes.gce.server import PROJECT, GceServer
from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.errors import ConfigError
from launcher.providers.base import NodeKind
from launcher.providers.gcp.instances import encode_value
from launcher.providers.gcp.names import GCE_NAME, GCP_ACCOUNT
from launcher.providers.gcp.provider import GcpProvider
from launcher.providers.gcp.spec import GcpSpec

COLLIDING = ("ml.prod", "ML-prod", "ml_prod")
ZONE = "us-west1-a"
IMAGE = "projects/debian-cloud/global/images/family/debian-12"
NODE = (
    "{machineType: n1-standard-2, disks: [{boot: true, autoDelete: true, "
    f"initializeParams: {{sourceImage: {IMAGE}}}}}]}}"
)


def _text(
    cluster: str, provider_extra: str = "allow_ssh_from: [127.0.0.0/8]", project: str = PROJECT
) -> str:
    return f"""
cluster_name: {json.dumps(cluster)}
provider: {{type: gcp, region: us-west1, availability_zone: {ZONE}, project_id: {project},
  {provider_extra}}}
auth: {{ssh_user: root}}
available_node_types:
  head: {{node_config: {NODE}, max_workers: 0, resources: {{CPU: 1}}}}
  worker: {{node_config: {NODE}, max_workers: 2, resources: {{CPU: 1}}}}
head_node_type: head
"""


def _config(cluster: str, provider_extra: str = "allow_ssh_from: [127.0.0.0/8]") -> ClusterConfig:
    return parse_config(_text(cluster, provider_extra), f"{cluster}.yaml", Overrides())


@pytest.fixture(scope="module")
def server() -> Iterator[GceServer]:
    with GceServer() as gce:
        yield gce


@pytest.fixture
def gce(server: GceServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GceServer:
    server.reset()
    server.compute.timings = Timings(0, 0, 0, 0, 0)  # every operation DONE at once
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    for variable, value in server.env().items():
        monkeypatch.setenv(variable, value)
    return server


def _up(cluster: str, workers: int = 1) -> tuple[GcpProvider, list[str]]:
    """Bootstrap the cluster from this machine and launch its head and `workers` workers, as
    `up` and the autoscaler do. Returns the provider and what bootstrap did."""
    config = _config(cluster)
    provider = GcpProvider(config)
    done = provider.bootstrap()
    provider.create_nodes(config.head_type, NodeKind.HEAD, 1, {})
    if workers:
        provider.create_nodes(config.node_types["worker"], NodeKind.WORKER, workers, {})
    return provider, done


def _names(gce: GceServer, cluster: str, kind: str) -> list[str]:
    return sorted(
        v.name
        for v in gce.instances()
        if v.labels.get("launcher-cluster") == encode_value(cluster)
        and v.labels.get("launcher-node-kind") == kind
    )


def _named(cluster: str) -> dict[str, str]:
    return GcpSpec().derived_names(_config(cluster))


def _members(gce: GceServer) -> dict[str, list[str]]:
    """Member -> the roles (with their condition's title) the project's policy gives it."""
    found: dict[str, list[str]] = {}
    for binding in gce.iam.policy["bindings"]:
        title = (binding.get("condition") or {}).get("title")
        for member in binding["members"]:
            found.setdefault(member, []).append(f"{binding['role']} if {title}")
    return found


# -- names ---------------------------------------------------------------------------------


def test_colliding_cluster_names_get_distinct_valid_names_and_plan_prints_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    clusters = [*COLLIDING, "ml-prod", "a" * 60 + "xyz", "a" * 60 + "uvw"]
    spec = GcpSpec()
    named = {c: spec.derived_names(_config(c)) for c in clusters}
    kinds = {
        "head service account": GCP_ACCOUNT,
        "network tag": GCE_NAME,
        "SSH firewall rule": GCE_NAME,
        "internal firewall rule": GCE_NAME,
        "instance name prefix": GCE_NAME,
        "SSH key file": GCE_NAME,
    }
    for kind, rule in kinds.items():
        names = [named[c][kind] for c in clusters]
        assert len(set(names)) == len(names), (kind, names)
        assert all(rule.valid(n) for n in names), (kind, names)
    prefixes = [named[c]["instance name prefix"] + "-" for c in clusters]
    for first in prefixes:  # no cluster's instance prefix begins another's
        assert [p for p in prefixes if p.startswith(first)] == [first]
    config = _config("ml.prod")
    planned = {(r.kind, r.name.split(" ")[0]) for r in spec.bootstrap_plan(config)}
    mine = named["ml.prod"]
    assert ("firewall rule", mine["SSH firewall rule"]) in planned
    assert ("firewall rule", mine["internal firewall rule"]) in planned
    assert ("service account", mine["head service account"]) in planned
    assert ("SSH key", str(tmp_path / "keys" / f"{mine['SSH key file']}.pem")) in planned


def _head_account(gce: GceServer, cluster: str) -> str:
    (head,) = _names(gce, cluster, "head")
    vm = next(v for v in gce.compute.vms.values() if v.name == head)
    return str(vm.res["serviceAccounts"][0]["email"])


def _tag(gce: GceServer, cluster: str) -> str:
    (head,) = _names(gce, cluster, "head")
    vm = next(v for v in gce.compute.vms.values() if v.name == head)
    (tag,) = vm.res["tags"]["items"]
    return str(tag)


def _ssh_rule(gce: GceServer) -> dict[str, Any]:
    (rule,) = [r for r in gce.compute.firewalls.values() if r["allowed"][0].get("ports") == ["22"]]
    return rule


def test_three_clusters_with_colliding_names_share_nothing_and_purge_only_their_own(
    gce: GceServer,
) -> None:
    providers = {cluster: _up(cluster)[0] for cluster in COLLIDING}
    emails = {c: _head_account(gce, c) for c in COLLIDING}
    assert len(set(emails.values())) == 3  # each head runs as an account of its own
    assert all(gce.iam.has_account(e) for e in emails.values())
    tags = {c: _tag(gce, c) for c in COLLIDING}
    assert len(set(tags.values())) == 3
    rules = gce.compute.firewalls
    assert len(rules) == 6  # two per cluster, each reaching its own cluster's nodes only
    assert sorted(tuple(r["targetTags"]) for r in rules.values()) == sorted(
        (t,) for t in tags.values() for _ in range(2)
    )
    heads = {c: _names(gce, c, "head") for c in COLLIDING}

    providers["ml.prod"].cleanup(purge=True)

    assert not gce.iam.has_account(emails["ml.prod"])
    assert _names(gce, "ml.prod", "head") == [] and _names(gce, "ml.prod", "worker") == []
    members = _members(gce)
    assert f"serviceAccount:{emails['ml.prod']}" not in members
    for cluster in ("ML-prod", "ml_prod"):
        assert gce.iam.has_account(emails[cluster])
        assert len(members[f"serviceAccount:{emails[cluster]}"]) == 2  # its two grants
        assert _names(gce, cluster, "head") == heads[cluster]
        assert len(_names(gce, cluster, "worker")) == 1
    left = sorted(tuple(r["targetTags"]) for r in gce.compute.firewalls.values())
    assert left == sorted((tags[c],) for c in ("ML-prod", "ml_prod") for _ in range(2))


# -- least privilege -------------------------------------------------------------------------


def _head_token(gce: GceServer, head: str) -> str:
    """An access token for the head's service account, from its instance's metadata server,
    as the autoscaler on the head gets one."""
    view = gce.instance(head)
    assert view is not None
    url = (
        f"http://{gce.metadata_host(view.id)}/computeMetadata/v1/"
        "instance/service-accounts/default/token"
    )
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(json.load(answer)["access_token"])


def _status(request: Any) -> int:
    try:
        request.execute()
    except HttpError as error:
        return int(error.resp.status)
    return 200


def test_the_head_manages_its_own_clusters_instances_and_no_other(gce: GceServer) -> None:
    mine, _ = _up("ml.prod")
    theirs, _ = _up("ML-prod")
    (head,) = _names(gce, "ml.prod", "head")
    (their_head,) = _names(gce, "ML-prod", "head")
    (their_worker,) = _names(gce, "ML-prod", "worker")
    token = _head_token(gce, head)
    on_head_text = _text(
        "ml.prod", f"gcp_credentials: {{type: credentials_token, credentials: {token}}}"
    )
    on_head = GcpProvider(parse_config(on_head_text, "head.yaml", Overrides()), on_head=True)

    # The autoscaler's work on its own cluster: list, launch, label, stop and delete.
    config = on_head.config
    (launched,) = on_head.create_nodes(config.node_types["worker"], NodeKind.WORKER, 1, {})
    on_head.set_tags(launched.id, {"launcher-node-status": "up-to-date"})
    assert {n.id for n in on_head.nodes()} == {head, launched.id, *_names(gce, "ml.prod", "worker")}
    on_head.terminate_nodes([launched.id])
    assert gce.instance(launched.id) is None

    # Another cluster's instances, and the project's policy, are out of its reach.
    compute = on_head.clients.compute
    instances = compute.instances()
    assert _status(instances.delete(project=PROJECT, zone=ZONE, instance=their_worker)) == 403
    assert _status(instances.stop(project=PROJECT, zone=ZONE, instance=their_head)) == 403
    view = gce.instance(their_head)
    assert view is not None
    relabel = {"labels": {"x": "y"}, "labelFingerprint": "42WmSpB8rSM="}
    assert (
        _status(instances.setLabels(project=PROJECT, zone=ZONE, instance=their_head, body=relabel))
        == 403
    )
    crm = on_head.clients.crm.projects()
    assert _status(crm.setIamPolicy(resource=PROJECT, body={"policy": gce.iam.policy})) == 403
    assert gce.instance(their_worker) is not None and gce.instance(their_head) is not None
    refused = [c for c in gce.calls() if c.status == 403]
    assert {c.method for c in refused} == {
        "compute.instances.delete",
        "compute.instances.stop",
        "compute.instances.setLabels",
        "cloudresourcemanager.projects.setIamPolicy",
    }
    assert theirs.nodes()  # the other cluster, as its own launcher sees it, is whole
    assert mine.nodes()


def test_up_narrows_an_unconditioned_grant_of_an_earlier_version(gce: GceServer) -> None:
    _up("demo", workers=0)
    member = f"serviceAccount:{_head_account(gce, 'demo')}"
    policy = gce.iam.policy
    policy["bindings"].append({"role": "roles/compute.instanceAdmin.v1", "members": [member]})
    gce.iam.policy = {"version": 3, "bindings": policy["bindings"], "etag": "x"}
    done = GcpProvider(_config("demo")).bootstrap()
    assert any("granted" in line for line in done), done
    assert "roles/compute.instanceAdmin.v1 if None" not in _members(gce)[member]


# -- firewall rules --------------------------------------------------------------------------


def test_a_changed_allow_ssh_from_is_applied_to_the_existing_rule(gce: GceServer) -> None:
    _up("ml.prod", workers=0)
    rule = _ssh_rule(gce)["name"]
    assert gce.compute.firewalls[rule]["sourceRanges"] == ["127.0.0.0/8"]
    narrowed = GcpProvider(_config("ml.prod", "allow_ssh_from: [127.0.0.2/32, 127.0.0.3/32]"))
    done = narrowed.bootstrap()
    assert sorted(gce.compute.firewalls[rule]["sourceRanges"]) == ["127.0.0.2/32", "127.0.0.3/32"]
    assert any(line.startswith(f"updated firewall rule {rule}") for line in done), done
    assert [c.call.params["firewall"] for c in gce.calls("firewalls.patch")] == [rule]
    assert not any("firewall" in line for line in narrowed.bootstrap())  # as asked: no change


def test_internal_ips_open_ssh_from_the_networks_own_ranges(gce: GceServer) -> None:
    GcpProvider(_config("inner", "use_internal_ips: true")).bootstrap()
    ranges = _ssh_rule(gce)["sourceRanges"]
    subnets = gce.client("compute").subnetworks().aggregatedList(project=PROJECT).execute()
    own = {
        s["ipCidrRange"]
        for scope in subnets["items"].values()
        for s in scope.get("subnetworks", [])
    }
    assert ranges and set(ranges) == own
    assert not {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} & set(ranges)


# -- inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "project", "named"),
    [
        ("allow_ssh_from: [999.1.1.1/99]", PROJECT, "provider.allow_ssh_from[0]: '999.1.1.1/99'"),
        ("allow_ssh_from: [10.0.0.0/8, 1.2.3/8]", PROJECT, "provider.allow_ssh_from[1]: '1.2.3/8'"),
        ("use_internal_ips: false", "../../etc", "provider.project_id: '../../etc'"),
    ],
)
def test_bad_provider_inputs_are_refused_at_validate(extra: str, project: str, named: str) -> None:
    text = _text("c", extra, project)
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "c.yaml", Overrides())
    lines = [line for line in str(refused.value).splitlines() if named in line]
    assert len(lines) == 1, str(refused.value)


def test_a_region_or_zone_that_is_not_one_is_refused() -> None:
    text = _text("c").replace("region: us-west1", "region: ../../etc")
    with pytest.raises(ConfigError, match=r"provider.region: '\.\./\.\./etc' is not a GCP region"):
        parse_config(text, "c.yaml", Overrides())
    text = _text("c").replace(f"availability_zone: {ZONE}", "availability_zone: us-west1-a/../x")
    with pytest.raises(ConfigError, match="is not a GCP zone"):
        parse_config(text, "c.yaml", Overrides())


def test_ssh_open_to_the_world_is_a_warning_in_validate_and_plan() -> None:
    for world in ("0.0.0.0/0", "::/0"):
        config = _config("c", f"allow_ssh_from: ['{world}']")
        warnings = [p for p in config.warnings if "allow_ssh_from" in str(p.path)]
        assert len(warnings) == 1 and "every address on the internet" in warnings[0].message
    assert not any("allow_ssh_from" in str(p.path) for p in _config("c").warnings)


def test_a_key_made_under_the_exact_cluster_name_is_kept_while_the_cluster_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier versions named the key `launcher-gcp-CLUSTER.pem` whatever the name held; a
    running `ML-prod` cluster's nodes trust that key, so it is used while it exists and the
    derived one does not."""
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    derived = GcpSpec().derived_names(_config("ML-prod"))["SSH key file"]
    assert derived != "launcher-gcp-ML-prod" and GCE_NAME.valid(derived)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "launcher-gcp-ML-prod.pem").write_text("old key")
    assert GcpProvider(_config("ML-prod")).access.ssh_private_key() == str(
        tmp_path / "keys" / "launcher-gcp-ML-prod.pem"
    )
    assert GcpSpec().derived_names(_config("ML-prod"))["SSH key file"] == "launcher-gcp-ML-prod"
    (tmp_path / "keys" / f"{derived}.pem").write_text("new key")
    assert GcpProvider(_config("ML-prod")).access.ssh_private_key() == str(
        tmp_path / "keys" / f"{derived}.pem"
    )
