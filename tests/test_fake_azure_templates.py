"""fakes/azure's template deployments (deployments.py, templates.py): the evaluator on its
own, then Ray's two ARM templates deployed through the real SDK (ResourceManagementClient's
deployments) against the fake, and refusals as ARM gives them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError

from fakes.azure.server import SUBSCRIPTION, AzureServer, Clients
from fakes.azure.templates import (
    Scope,
    TemplateError,
    bind_parameters,
    dependencies,
    evaluate,
    plan,
)

RAY_AZURE = Path(__import__("ray").__file__).parent / "autoscaler/_private/_azure"
LOCATION = "eastus"
RG = "ray-rg"
POLL = 0.05


def template(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((RAY_AZURE / name).read_text())
    return loaded


def scope(params: dict[str, Any] | None = None, variables: dict[str, Any] | None = None) -> Scope:
    group = {"id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}", "name": RG}
    return Scope(SUBSCRIPTION, {**group, "location": LOCATION}, params or {}, variables or {})


# -- the evaluator --------------------------------------------------------------------------


def test_expressions() -> None:
    s = scope({"n": "vm", "zones": ["1", "2"], "size": 0}, {"v": "[concat(parameters('n'), '-x')]"})
    assert evaluate("[concat(variables('v'), 'y', 1)]", s) == "vm-xy1"
    assert evaluate("[[literal]", s) == "[literal]"
    assert evaluate("plain", s) == "plain"
    assert evaluate("['it''s']", s) == "it's"
    assert evaluate("[if(equals(parameters('size'), 0), json('null'), 3)]", s) is None
    assert evaluate("[greater(length(parameters('zones')), 0)]", s) is True
    # if() evaluates only the branch it takes (Ray's VM template relies on it)
    empty = scope({"zones": []})
    assert (
        evaluate(
            "[if(greater(length(parameters('zones')), 0), parameters('zones')[0], 'no')]", empty
        )
        == "no"
    )
    at = s.at(3)
    assert evaluate(
        "[createArray(string(parameters('zones')[mod(copyIndex(), length(parameters('zones')))]))]",
        at,
    ) == ["2"]
    assert evaluate("[resourceId('Microsoft.Network/publicIpAddresses/', 'ip0')]", s) == (
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/"
        "Microsoft.Network/publicIpAddresses/ip0"
    )
    assert evaluate(
        "[resourceId('Microsoft.Network/virtualNetworks/subnets', 'v', 's')]", s
    ).endswith("/virtualNetworks/v/subnets/s")
    assert evaluate("[resourceId('other', 'Microsoft.A/b', 'x')]", s).startswith(
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/other/"
    )
    assert evaluate(
        "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'r')]", s
    ) == (f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/r")
    assert evaluate("[resourceGroup().location]", s) == LOCATION
    assert evaluate('[json(\'{"a": [1, {"b": 2}]}\').a[1].b]', s) == 2
    assert (
        evaluate("[guid('a', 'b')]", s)
        == evaluate("[guid('a', 'b')]", s)
        != evaluate("[guid('a', 'c')]", s)
    )
    assert len(evaluate("[uniqueString(resourceGroup().id)]", s)) == 13
    # object keys are evaluated too
    assert evaluate({"[parameters('n')]": {}}, s) == {"vm": {}}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[nosuch('a')]", "'nosuch' is not valid"),
        ("[parameters('missing')]", "'missing' is not found"),
        ("[variables('missing')]", "'missing' is not found"),
        ("[concat('a']", "expected ')'"),
        ("[copyIndex()]", "copyIndex"),
        ("[json('{nope')]", "not JSON"),
        ("[createArray(1)[3]]", "out of the array"),
    ],
)
def test_bad_expressions(text: str, says: str) -> None:
    with pytest.raises(TemplateError, match=re.escape(says)):
        evaluate(text, scope())


def test_parameters_bound_as_arm_binds_them() -> None:
    t = template("azure-config-template.json")
    given = {
        "subnet": {"value": "10.1.0.0/16"},
        "clusterId": {"value": "c"},
        "msiName": {"value": "m"},
        "msiResourceGroup": {"value": RG},
        "roleAssignmentGuid": {"value": "g"},
    }
    bound = bind_parameters(t, given)
    assert bound["createMsi"] is True  # the template's default is the string "true"
    with pytest.raises(TemplateError, match="'nope' in the parameters file are not valid"):
        bind_parameters(t, {**given, "nope": {"value": 1}})
    with pytest.raises(TemplateError, match=r"'subnet' at line .* is not provided"):
        bind_parameters(t, {k: v for k, v in given.items() if k != "subnet"})
    with pytest.raises(TemplateError, match=re.escape("Expected 'Bool'. Actual 'String'")):
        bind_parameters(t, {**given, "createMsi": {"value": "maybe"}})


def test_copy_condition_and_depends_on() -> None:
    vm = template("azure-vm-template.json")
    params = {
        p: {"value": v}
        for p, v in {
            "vmName": "n",
            "adminUsername": "u",
            "publicKey": "k",
            "vmSize": "Standard_D2s_v3",
            "vmTags": {},
            "vmCount": 2,
            "msi": "m",
            "nsg": "g",
            "subnet": "s",
            "provisionPublicIp": False,
        }.items()
    }
    s = scope(bind_parameters(vm, params), vm["variables"])
    instances = plan(vm, s)
    enabled = sorted((i.kind.lower(), i.name) for i in instances if i.enabled)
    assert enabled == [
        ("microsoft.compute/virtualmachines", "n0"),
        ("microsoft.compute/virtualmachines", "n1"),
        ("microsoft.network/networkinterfaces", "n-nic0"),
        ("microsoft.network/networkinterfaces", "n-nic1"),
    ]
    needs = dependencies(instances)
    for inst in instances:
        if inst.enabled and inst.kind.endswith("virtualMachines"):
            assert {instances[k].name for k in needs[inst.key]} == {f"n-nic{inst.index}"}
    looped = {**vm, "resources": [{**vm["resources"][0], "dependsOn": ["[concat('a', 'b')]"]}]}
    with pytest.raises(TemplateError, match="'ab' is not defined in the template"):
        dependencies(plan(looped, s))


# -- deployments through the SDK ------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[AzureServer]:
    with AzureServer(retry_after=0, lro_s=0.05) as server:
        yield server


@pytest.fixture
def azure(server: AzureServer) -> Iterator[Clients]:
    server.reset()
    clients = server.clients(polling_interval=POLL)
    clients.resource.resource_groups.create_or_update(RG, {"location": LOCATION})
    yield clients
    assert server.errors == []


@pytest.fixture
def deployments(server: AzureServer, azure: Clients) -> Any:
    """The SDK's deployments operations (azure-mgmt-resource-deployments: since
    azure-mgmt-resource 24 they are a package of their own) on the fake."""
    sdk = pytest.importorskip("azure.mgmt.resource.deployments")
    client = sdk.DeploymentsMgmtClient(
        azure.credential,
        server.subscription,
        base_url=server.url,
        credential_scopes=[server.credential_scope],
        connection_verify=str(server.ca_bundle),
        polling_interval=POLL,
    )
    return client.deployments


def deploy(c: Any, name: str, t: dict[str, Any], params: dict[str, Any]) -> Any:
    body = {
        "properties": {
            "mode": "Incremental",
            "template": t,
            "parameters": {k: {"value": v} for k, v in params.items()},
        }
    }
    return c.begin_create_or_update(RG, name, body).result()


def config_params(cluster: str = "c-ab12") -> dict[str, Any]:
    return {
        "subnet": "10.7.0.0/16",
        "clusterId": cluster,
        "msiName": f"ray-{cluster}-msi",
        "msiResourceGroup": RG,
        "createMsi": True,
        "roleAssignmentGuid": "5b7f8d6c-1111-4222-8333-444455556666",
    }


def vm_params(
    config: dict[str, Any], count: int, zones: list[str], public: bool = True
) -> dict[str, Any]:
    return {
        "vmName": "ray-c-worker-ab12-x",
        "adminUsername": "ubuntu",
        "publicKey": "ssh-rsa AAAAB3NzaC1yc2E bench",
        "imagePublisher": "microsoft-dsvm",
        "imageOffer": "ubuntu-hpc",
        "imageSku": "2204",
        "imageVersion": "latest",
        "vmSize": "Standard_D2s_v3",
        "vmTags": {"ray-cluster-name": "c", "ray-node-kind": "worker"},
        "vmCount": count,
        "provisionPublicIp": public,
        "msi": config["msi"]["value"],
        "nsg": config["nsg"]["value"],
        "subnet": config["subnet"]["value"],
        "zones": zones,
    }


def test_rays_config_template_makes_what_it_says(
    azure: Clients, server: AzureServer, deployments: Any
) -> None:
    result = deploy(
        deployments, "ray-config", template("azure-config-template.json"), config_params()
    )
    assert result.properties.provisioning_state == "Succeeded"
    out = result.properties.outputs
    nsg = azure.network.network_security_groups.get(RG, "ray-c-ab12-nsg")
    assert out["nsg"]["value"].lower() == nsg.id.lower()
    assert [r.destination_port_range for r in nsg.security_rules] == ["22"]
    vnet = azure.network.virtual_networks.get(RG, "ray-c-ab12-vnet")
    assert vnet.address_space.address_prefixes == ["10.7.0.0/16"]
    subnet = vnet.subnets[0]
    assert subnet.id.lower() == out["subnet"]["value"].lower()
    assert subnet.network_security_group.id.lower() == nsg.id.lower()
    msi = azure.msi.user_assigned_identities.get(RG, "ray-c-ab12-msi")
    assert out["msi"]["value"].lower() == msi.id.lower()
    scope_id = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}"
    assigned = list(azure.authorization.role_assignments.list_for_scope(scope_id))
    assert [a.principal_id for a in assigned] == [msi.principal_id]
    assert assigned[0].role_definition_id.endswith("b24988ac-6180-42a0-ab88-20f7382dd24c")
    # the engine's calls are logged as the deployment's, the client's as its own
    engine = {c.operation for c in server.calls() if (c.origin or "").startswith("deployment:")}
    assert "virtualNetworks.create" in engine and "roleAssignments.create" in engine
    # a second deployment of the same template makes nothing new
    before = sorted(server.resource_ids())
    again = deploy(
        deployments, "ray-config", template("azure-config-template.json"), config_params()
    )
    assert again.properties.provisioning_state == "Succeeded"
    assert sorted(server.resource_ids()) == before


def test_rays_vm_template_makes_vms_across_zones(
    azure: Clients, server: AzureServer, deployments: Any
) -> None:
    config = deploy(
        deployments, "ray-config", template("azure-config-template.json"), config_params()
    ).properties.outputs
    result = deploy(
        deployments, "w1", template("azure-vm-template.json"), vm_params(config, 3, ["1", "2"])
    )
    out = result.properties.outputs
    names = [f"ray-c-worker-ab12-x{i}" for i in range(3)]
    vms = {v.name: v for v in server.vms()}
    assert sorted(vms) == names
    got = {n: azure.compute.virtual_machines.get(RG, n) for n in names}
    assert [got[n].zones for n in names] == [["1"], ["2"], ["1"]]
    assert got[names[0]].tags["ray-node-kind"] == "worker"
    assert list(got[names[0]].identity.user_assigned_identities) == [config["msi"]["value"]]
    nic = azure.network.network_interfaces.get(RG, "ray-c-worker-ab12-x-nic-public0")
    ip = azure.network.public_ip_addresses.get(RG, "ray-c-worker-ab12-x-ip0")
    assert nic.ip_configurations[0].public_ip_address.id.lower() == ip.id.lower()
    assert out["publicIp"]["value"][0] == ip.ip_address
    assert out["privateIp"]["value"][0] == nic.ip_configurations[0].private_ip_address
    # private only: no public IPs, the private NICs instead
    deploy(
        deployments,
        "w2",
        template("azure-vm-template.json"),
        {
            **vm_params(config, 1, []),
            "vmName": "p",
            "provisionPublicIp": False,
        },
    )
    assert (
        azure.network.network_interfaces.get(RG, "p-nic0").ip_configurations[0].public_ip_address
        is None
    )
    assert all(not r.lower().endswith("/p-ip0") for r in server.resource_ids())


def test_failed_deployment_carries_the_inner_error(
    azure: Clients, server: AzureServer, deployments: Any
) -> None:
    config = deploy(
        deployments, "ray-config", template("azure-config-template.json"), config_params()
    ).properties.outputs
    server.set_capacity("Standard_D2s_v3", 0, zone="1")
    with pytest.raises(HttpResponseError) as caught:
        deploy(
            deployments, "w1", template("azure-vm-template.json"), vm_params(config, 2, ["1", "2"])
        )
    error = caught.value.error
    assert error is not None and error.code == "DeploymentFailed"
    assert [d.code for d in error.details] == ["ZonalAllocationFailed"]
    assert error.details[0].target.endswith("/virtualMachines/ray-c-worker-ab12-x0")
    got = deployments.get(RG, "w1")
    assert got.properties.provisioning_state == "Failed"
    # incremental: the VM made in zone 2 stays, the refused one stays Failed (as on Azure)
    views = {v.name: v for v in server.vms()}
    assert set(views) == {"ray-c-worker-ab12-x0", "ray-c-worker-ab12-x1"}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"nope": {"value": 1}}, "'nope' in the parameters file are not valid"),
        ({"vmCount": {"value": "two"}}, "Expected 'Int'"),
        ({"vmName": None}, "'vmName' at line"),
    ],
)
def test_bad_parameters_refused(
    azure: Clients, server: AzureServer, deployments: Any, change: dict[str, Any], says: str
) -> None:
    params = {
        k: {"value": v}
        for k, v in vm_params(
            {"msi": {"value": "m"}, "nsg": {"value": "n"}, "subnet": {"value": "s"}}, 1, []
        ).items()
    }
    params.update({k: v for k, v in change.items() if v is not None})
    for k in [k for k, v in change.items() if v is None]:
        params.pop(k)
    body = {
        "properties": {
            "mode": "Incremental",
            "template": template("azure-vm-template.json"),
            "parameters": params,
        }
    }
    with pytest.raises(HttpResponseError) as caught:
        deployments.begin_create_or_update(RG, "bad", body).result()
    assert caught.value.status_code == 400
    assert caught.value.error is not None and caught.value.error.code == "InvalidTemplate"
    assert says in caught.value.error.message
    assert server.vms() == []


def test_bad_template_refused(azure: Clients, server: AzureServer, deployments: Any) -> None:
    bad = {
        "$schema": "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#",
        "contentVersion": "1.0.0.0",
        "resources": [
            {
                "type": "Microsoft.Network/networkSecurityGroups",
                "apiVersion": "2024-10-01",
                "name": "[nosuch()]",
                "location": LOCATION,
            }
        ],
    }
    with pytest.raises(HttpResponseError) as caught:
        deploy(deployments, "bad", bad, {})
    assert caught.value.error is not None and caught.value.error.code == "InvalidTemplate"
    assert "'nosuch' is not valid" in caught.value.error.message
    with pytest.raises(HttpResponseError) as caught:
        deployments.get(RG, "bad")
    assert caught.value.status_code == 404
    complete = {"properties": {"mode": "Complete", "template": bad, "parameters": {}}}
    with pytest.raises(HttpResponseError, match="InvalidDeployment"):
        deployments.begin_create_or_update(RG, "c", complete).result()


def test_resource_skus_list_zones(azure: Clients, server: AzureServer) -> None:
    server.restrict_size("Standard_D2s_v3", zone="3")
    skus = [s for s in azure.compute.resource_skus.list() if s.name == "Standard_D2s_v3"]
    here = [s for s in skus if s.location_info[0].location == LOCATION]
    assert sorted(here[0].location_info[0].zones) == ["1", "2", "3"]
    assert here[0].restrictions[0].restriction_info.zones == ["3"]
