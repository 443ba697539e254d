"""`launcher check` against the fake Azure (fakes/azure): azure-identity's token from the
fake's Entra, the subscription and resource group reads (refused for a principal without a
role), and Compute's usage list (regional, family and spot vCPUs) against the config's node
types; and the fake's usage list itself, read with the real SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.azure.server import AzureServer, Clients
from tests.check_env import by_aspect, check, isolate, outside
from tests.conftest import run_cli
from tests.test_fake_azure import LOCATION, network, vm_model

GROUP = "chk-rg"
IMAGE = "imagePublisher: microsoft-dsvm, imageOffer: ubuntu-2204, imageSku: 2204-gen2"


@pytest.fixture(scope="module")
def server() -> Iterator[AzureServer]:
    with AzureServer(retry_after=0, lro_s=0.01) as running:
        yield running


@pytest.fixture
def azure(
    server: AzureServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[AzureServer]:
    """The fake, emptied, and this process's environment pointing the launcher at it."""
    server.reset()
    isolate(monkeypatch, tmp_path)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    yield server
    assert server.errors == []


def clients(server: AzureServer) -> Clients:
    return server.clients(polling_interval=0.01)


def write(tmp_path: Path, workers: int = 4, head: str = "Standard_D4s_v3", extra: str = "") -> Path:
    """A cluster in eastus: a regular head and 1 to `workers` spot Standard_D2s_v3 workers."""
    path = tmp_path / "azure.yaml"
    path.write_text(f"""
cluster_name: chk
max_workers: {workers}
provider: {{type: azure, location: {LOCATION}, resource_group: {GROUP}}}
auth: {{ssh_user: ubuntu}}
available_node_types:
  head:
    node_config: {{azure_arm_parameters: {{vmSize: {head}, {IMAGE}}}}}
{extra}
  spot:
    node_config:
      azure_arm_parameters: {{vmSize: Standard_D2s_v3, priority: Spot, {IMAGE}}}
    min_workers: 1
    max_workers: {workers}
head_node_type: head
""")
    return path


def quota(answer: dict[str, Any], name: str) -> dict[str, Any]:
    found = [f for f in by_aspect(answer, "quota") if f["detail"].startswith(name + " in ")]
    assert len(found) == 1, by_aspect(answer, "quota")
    return found[0]


def start_vm(c: Clients, name: str, size: str, spot: bool = False) -> None:
    nic = network(c, "other", public_ip=False, nic=f"{name}-nic")
    extra: dict[str, Any] = {"priority": "Spot", "eviction_policy": "Delete"} if spot else {}
    c.compute.virtual_machines.begin_create_or_update(
        "other", name, vm_model(str(nic.id), size, **extra)
    ).result()


# -- the fake's usage list --


def test_fake_usage_list_counts_allocated_vms_by_family_and_spot(azure: AzureServer) -> None:
    c = clients(azure)
    azure.set_quota("cores", 20)
    azure.set_quota("standardDSv3Family", 12)
    start_vm(c, "regular", "Standard_D4s_v3")
    start_vm(c, "cheap", "Standard_D2s_v3", spot=True)
    start_vm(c, "small", "Standard_B2s")
    azure.usage_page_size = 4  # the SDK's pager follows nextLink
    usages = {u.name.value: u for u in c.compute.usage.list(LOCATION)}
    assert len(azure.calls("usages.list")) > 1
    assert (usages["cores"].current_value, usages["cores"].limit) == (6, 20)
    assert usages["cores"].name.localized_value == "Total Regional vCPUs"
    family = usages["standardDSv3Family"]
    assert (family.current_value, family.limit, family.unit) == (4, 12, "Count")
    assert family.name.localized_value == "Standard DSv3 Family vCPUs"
    assert usages["standardBSFamily"].current_value == 2
    assert usages["lowPriorityCores"].current_value == 2
    assert usages["virtualMachines"].current_value == 3
    assert {u.current_value for u in c.compute.usage.list("westus2")} == {0}
    # A deallocated VM holds no vCPUs; the create beyond the family's limit is refused.
    c.compute.virtual_machines.begin_deallocate("other", "regular").result()
    usages = {u.name.value: u for u in c.compute.usage.list(LOCATION)}
    assert usages["cores"].current_value == 2 and usages["standardDSv3Family"].current_value == 0
    from azure.core.exceptions import HttpResponseError

    with pytest.raises(HttpResponseError) as refused:
        start_vm(c, "big", "Standard_D16s_v3")
    assert refused.value.error is not None
    assert refused.value.error.code == "OperationNotAllowed"


def test_fake_refuses_a_principal_without_a_role_until_granted(azure: AzureServer) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.identity import ClientSecretCredential

    client_id, secret, object_id = azure.add_service_principal("no-role")
    credential = ClientSecretCredential(
        azure.tenant,
        client_id,
        secret,
        authority=azure.url,
        disable_instance_discovery=True,
        connection_verify=str(azure.ca_bundle),
    )
    c = azure.clients(credential)
    with pytest.raises(HttpResponseError) as refused:
        list(c.compute.usage.list(LOCATION))
    assert refused.value.status_code == 403 and refused.value.error is not None
    assert "Microsoft.Compute/locations/usages/read" in str(refused.value.error.message)
    azure.grant(object_id, "Reader")
    assert list(c.compute.usage.list(LOCATION))


# -- launcher check --


def test_ready_lists_the_subscription_and_the_vcpus_left(
    azure: AzureServer, tmp_path: Path
) -> None:
    code, answer = check(write(tmp_path))
    assert code == 0 and answer["ready"] is True, answer
    report = answer["providers"][0]
    assert report["provider"] == "azure" and report["status"] == "ok", report
    assert by_aspect(answer, "extra")[0]["status"] == "ok"
    credentials = by_aspect(answer, "credentials")[0]
    assert credentials["status"] == "ok"
    assert azure.subscription in credentials["detail"]
    assert f"resource group {GROUP} (up creates it)" in credentials["detail"]
    regional = quota(answer, "Total Regional vCPUs")
    assert regional["status"] == "ok" and "1000 of 1000 vCPUs left" in regional["detail"]
    spot = quota(answer, "Total Regional Spot vCPUs")
    assert spot["status"] == "ok" and "spot need 2 to start, 8 at max_workers" in spot["detail"]
    assert azure.calls("usages.list")
    assert outside() == []

    clients(azure).resource.resource_groups.create_or_update(GROUP, {"location": LOCATION})
    code, answer = check(write(tmp_path))
    assert f"resource group {GROUP} found" in by_aspect(answer, "credentials")[0]["detail"]


def test_spot_workers_count_against_low_priority_vcpus_only(
    azure: AzureServer, tmp_path: Path
) -> None:
    azure.set_quota("cores", 4)  # the head's 4 fit; the spot workers do not take these
    azure.set_quota("lowPriorityCores", 8)
    start_vm(clients(azure), "elsewhere", "Standard_D2s_v3", spot=True)  # 2 of the 8 used
    code, answer = check(write(tmp_path, workers=4))  # spot: 1 to 4 workers, 2 to 8 vCPUs
    assert code == 0, answer
    assert answer["providers"][0]["status"] == "warning"
    regional = quota(answer, "Total Regional vCPUs")
    assert (
        regional["status"] == "ok"
        and "head need 4 to start, 4 at max_workers" in (regional["detail"])
    )
    spot = quota(answer, "Total Regional Spot vCPUs")
    assert spot["status"] == "warning" and "6 of 8 vCPUs left" in spot["detail"]
    assert "lower max_workers of spot" in spot["fix"]


def test_quota_short_for_the_start_is_not_ready_with_the_fix(
    azure: AzureServer, tmp_path: Path
) -> None:
    azure.set_quota("cores", 2)  # the head is a Standard_D4s_v3: 4 vCPUs
    code, answer = check(write(tmp_path))
    assert code == 1 and answer["ready"] is False
    regional = quota(answer, "Total Regional vCPUs")
    assert regional["status"] == "problem"
    assert "Quotas page of the Azure portal" in regional["fix"]
    assert "lower min_workers of head" in regional["fix"]
    result = run_cli("check", str(write(tmp_path)))
    assert result.exit_code == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith("Azure") or first.startswith("azure"), first
    assert "NOT READY" in first and "Total Regional vCPUs in eastus: 2 of 2 vCPUs left" in first


def test_family_quota_short_is_not_ready(azure: AzureServer, tmp_path: Path) -> None:
    azure.set_quota("standardDSv3Family", 2)  # regional room, but not the head's family
    code, answer = check(write(tmp_path))
    assert code == 1, answer
    family = quota(answer, "Standard DSv3 Family vCPUs")
    assert family["status"] == "problem" and "head need 4 to start" in family["detail"]


def test_a_head_kept_free_of_tasks_still_takes_its_vcpus(
    azure: AzureServer, tmp_path: Path
) -> None:
    """Ray's `resources: {CPU: 0}` on the head keeps tasks off it; the VM still has 4 vCPUs."""
    azure.set_quota("cores", 2)
    code, answer = check(write(tmp_path, extra="    resources: {CPU: 0}"))
    assert code == 1, answer
    assert quota(answer, "Total Regional vCPUs")["status"] == "problem"


def test_no_token_says_how_to_sign_in(
    azure: AzureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "not-the-secret")
    code, answer = check(write(tmp_path))
    assert code == 1 and answer["ready"] is False
    (found,) = by_aspect(answer, "credentials")
    assert found["status"] == "problem" and "no Azure token" in found["detail"]
    assert (
        "EnvironmentCredential: AADSTS7000215: Invalid client secret provided." in (found["detail"])
    )
    assert "Trace ID" not in found["detail"] and "az login" in found["fix"]
    assert by_aspect(answer, "quota") == []
    assert azure.calls("usages.list") == []
    assert outside() == []


def test_no_credentials_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no az, azd or pwsh to ask
    result = run_cli("check", str(write(tmp_path)))
    assert result.exit_code == 1, result.stdout
    first = result.stdout.splitlines()[0]
    assert "NOT READY: no Azure token" in first and "no credentials found; tried " in first
    assert "EnvironmentCredential" in first and "az login" in first
    assert outside() == []


def test_a_principal_without_a_role_cannot_read_the_subscription(
    azure: AzureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client_id, secret, object_id = azure.add_service_principal("no-role")
    monkeypatch.setenv("AZURE_CLIENT_ID", client_id)
    monkeypatch.setenv("AZURE_CLIENT_SECRET", secret)
    code, answer = check(write(tmp_path))
    assert code == 1
    (found,) = by_aspect(answer, "credentials")
    assert found["status"] == "problem" and "AuthorizationFailed" in found["detail"], found
    assert "Microsoft.Resources/subscriptions/read" in found["detail"]
    assert "--role Contributor" in found["fix"] and azure.subscription in found["fix"]
    assert by_aspect(answer, "quota") == []

    azure.grant(object_id, "Reader", f"/subscriptions/{azure.subscription}/resourceGroups/x")
    code, answer = check(write(tmp_path))  # a role on some other group reads nothing here
    assert code == 1 and by_aspect(answer, "credentials")[0]["status"] == "problem"

    azure.grant(object_id, "Reader")
    code, answer = check(write(tmp_path))
    assert code == 0, answer
    assert by_aspect(answer, "credentials")[0]["status"] == "ok"
    assert quota(answer, "Total Regional vCPUs")["status"] == "ok"


def test_a_refused_usage_list_leaves_the_quota_unknown(azure: AzureServer, tmp_path: Path) -> None:
    azure.faults.add(operation="usages.list", error="AuthorizationFailed", status=403)
    code, answer = check(write(tmp_path))
    assert code == 0, answer
    (found,) = by_aspect(answer, "quota")
    assert found["status"] == "unknown" and "AuthorizationFailed" in found["detail"]
    assert "not known: vCPU usage in eastus" in answer["providers"][0]["summary"]


def test_without_the_extra_the_hint_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.abc
    import sys

    from launcher.providers.registry import SPECS

    found_module = SPECS["azure"].sdk_module
    assert found_module
    module: str = found_module

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, *args: Any) -> None:
            if name == module or name.startswith(module + "."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    isolate(monkeypatch, tmp_path)
    for loaded in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(), *sys.meta_path])
    code, answer = check(write(tmp_path))
    assert code == 1
    (found,) = by_aspect(answer, "extra")
    assert found["status"] == "problem" and f"{module} is not installed" in found["detail"]
    assert found["fix"] == "pip install 'launcher-ray[azure]'"
    assert len(answer["providers"][0]["findings"]) == 1  # nothing probed without the SDK


def test_without_a_config_azure_is_checked_with_its_defaults_and_exits_0(
    azure: AzureServer,
) -> None:
    azure.set_quota("cores", 1)  # no config: no node types to hold against it
    result = run_cli("check", "--json")
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    (report,) = [r for r in answer["providers"] if r["provider"] == "azure"]
    assert report["in_config"] is False and report["status"] == "ok", report
    assert "Total Regional vCPUs in westus2: 1 of 1 vCPUs left" in report["summary"]
    assert outside() == []
