"""Self-test of fakes/azure: the real Azure SDK for Python (azure-identity, azure-mgmt-*)
against the fake, as the Azure provider will use it; and one real SSH host (hosts.py)."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
)
from azure.mgmt.compute import models as cm
from azure.mgmt.network import models as nm

from fakes.azure.server import AzureServer, Clients

LOCATION = "eastus"
SUBNET = "127.19.0.0/16"
CONTRIBUTOR = "b24988ac-6180-42a0-ab88-20f7382dd24c"
POLL = 0.05  # the pollers' interval (the fake sends Retry-After: 0 here)

# Every address this process connects to while these tests run (the SDK's sockets and the
# fake's own alike).
_connected: list[Any] = []
_recording = threading.Event()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect" and _recording.is_set():
        _connected.append(args[1])


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def server() -> Iterator[AzureServer]:
    _recording.set()
    try:
        with AzureServer(retry_after=0, lro_s=0.05) as server:
            yield server
    finally:
        _recording.clear()
    inet = [a for a in _connected if isinstance(a, tuple)]
    assert inet, "the audit hook saw no connection at all"
    outside = [a for a in inet if not ipaddress.ip_address(a[0]).is_loopback]
    assert outside == [], f"connections left this machine: {outside}"


@pytest.fixture
def azure(server: AzureServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clients]:
    """Clients with DefaultAzureCredential from the fake's environment, as a launcher runs."""
    from azure.identity import DefaultAzureCredential

    server.reset()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    credential = DefaultAzureCredential(disable_instance_discovery=True)
    yield server.clients(credential, polling_interval=POLL)
    assert server.errors == []


def network(c: Clients, rg: str, public_ip: bool = True, nic: str = "nic1") -> nm.NetworkInterface:
    c.resource.resource_groups.create_or_update(rg, {"location": LOCATION, "tags": {"k": "v"}})
    vnet = c.network.virtual_networks.begin_create_or_update(
        rg,
        "vnet",
        nm.VirtualNetwork(
            location=LOCATION,
            address_space=nm.AddressSpace(address_prefixes=[SUBNET]),
            subnets=[nm.Subnet(name="default", address_prefix=SUBNET)],
        ),
    ).result()
    nsg = c.network.network_security_groups.begin_create_or_update(
        rg,
        "nsg",
        nm.NetworkSecurityGroup(
            location=LOCATION,
            security_rules=[
                nm.SecurityRule(
                    name="ssh",
                    protocol="Tcp",
                    access="Allow",
                    direction="Inbound",
                    priority=100,
                    source_address_prefix="*",
                    source_port_range="*",
                    destination_address_prefix="*",
                    destination_port_range="22",
                )
            ],
        ),
    ).result()
    config = nm.NetworkInterfaceIPConfiguration(
        name="ipconfig1", subnet=nm.Subnet(id=vnet.subnets[0].id)
    )
    if public_ip:
        pip = c.network.public_ip_addresses.begin_create_or_update(
            rg,
            f"{nic}-ip",
            nm.PublicIPAddress(
                location=LOCATION,
                sku=nm.PublicIPAddressSku(name="Standard"),
                public_ip_allocation_method="Static",
            ),
        ).result()
        config.public_ip_address = nm.PublicIPAddress(id=pip.id, delete_option="Delete")
    return c.network.network_interfaces.begin_create_or_update(
        rg,
        nic,
        nm.NetworkInterface(
            location=LOCATION,
            network_security_group=nm.NetworkSecurityGroup(id=nsg.id),
            ip_configurations=[config],
        ),
    ).result()


def vm_model(nic_id: str, size: str = "Standard_D2s_v3", **extra: Any) -> cm.VirtualMachine:
    return cm.VirtualMachine(
        location=LOCATION,
        tags={"ray-cluster-name": "c1"},
        hardware_profile=cm.HardwareProfile(vm_size=size),
        storage_profile=cm.StorageProfile(
            image_reference=cm.ImageReference(
                publisher="Canonical", offer="ubuntu-24_04-lts", sku="server", version="latest"
            ),
            os_disk=cm.OSDisk(create_option="FromImage", delete_option="Delete"),
        ),
        os_profile=cm.OSProfile(
            computer_name="node",
            admin_username="ubuntu",
            custom_data="IyEvYmluL3NoCmVjaG8gaGkK",
            linux_configuration=cm.LinuxConfiguration(
                disable_password_authentication=True,
                ssh=cm.SshConfiguration(
                    public_keys=[
                        cm.SshPublicKey(
                            path="/home/ubuntu/.ssh/authorized_keys",
                            key_data=extra.pop("key", "ssh-ed25519 AAAAC3Nza test"),
                        )
                    ]
                ),
            ),
        ),
        network_profile=cm.NetworkProfile(
            network_interfaces=[
                cm.NetworkInterfaceReference(id=nic_id, primary=True, delete_option="Delete")
            ]
        ),
        **extra,
    )


def statuses(c: Clients, rg: str, name: str) -> list[str]:
    vm = c.compute.virtual_machines.get(rg, name, expand="instanceView")
    return [s.code for s in vm.instance_view.statuses]


def test_lifecycle_with_the_sdk(azure: Clients, server: AzureServer) -> None:
    c = azure
    nic = network(c, "rg1")
    assert nic.ip_configurations[0].private_ip_address == "127.19.0.4"  # .0-.3 are Azure's
    pip_id = nic.ip_configurations[0].public_ip_address.id
    pip = c.network.public_ip_addresses.get("rg1", "nic1-ip")
    assert ipaddress.ip_address(pip.ip_address) in ipaddress.ip_network(server.public_pool)
    poller = c.compute.virtual_machines.begin_create_or_update("rg1", "vm1", vm_model(nic.id))
    vm = poller.result()
    assert poller.status() == "Succeeded" and poller.done()
    assert vm.provisioning_state == "Succeeded" and vm.vm_id
    assert vm.hardware_profile.vm_size == "Standard_D2s_v3"
    assert vm.storage_profile.os_disk.name.startswith("vm1_OsDisk_1_")
    assert vm.os_profile.custom_data is None  # ARM does not answer it
    assert server.vm("vm1").custom_data == b"#!/bin/sh\necho hi\n"
    # names are compared without case; ids keep the casing of creation
    assert c.compute.virtual_machines.get("RG1", "VM1").id.endswith(
        "/resourceGroups/rg1/providers/Microsoft.Compute/virtualMachines/vm1"
    )
    listed = list(c.compute.virtual_machines.list("rg1", expand="instanceView"))
    assert [v.name for v in listed] == ["vm1"]
    assert "PowerState/running" in [s.code for s in listed[0].instance_view.statuses]
    assert [v.name for v in c.compute.virtual_machines.list_all()] == ["vm1"]
    assert c.network.network_interfaces.get("rg1", "nic1").virtual_machine.id == vm.id

    c.compute.virtual_machines.begin_deallocate("rg1", "vm1").result()
    assert "PowerState/deallocated" in statuses(c, "rg1", "vm1")
    c.compute.virtual_machines.begin_start("rg1", "vm1").result()
    assert "PowerState/running" in statuses(c, "rg1", "vm1")
    c.compute.virtual_machines.begin_power_off("rg1", "vm1").result()
    assert "PowerState/stopped" in statuses(c, "rg1", "vm1")
    c.compute.virtual_machines.begin_start("rg1", "vm1").result()
    updated = c.compute.virtual_machines.begin_update(
        "rg1", "vm1", cm.VirtualMachineUpdate(tags={"ray-cluster-name": "c1", "x": "y"})
    ).result()
    assert updated.tags == {"ray-cluster-name": "c1", "x": "y"}
    tagged = list(
        c.resource.resources.list_by_resource_group(
            "rg1", filter="tagName eq 'x' and tagValue eq 'y'"
        )
    )
    assert [(r.name, r.type) for r in tagged] == [("vm1", "Microsoft.Compute/virtualMachines")]
    kinds = {r.type for r in c.resource.resources.list_by_resource_group("rg1")}
    assert "Microsoft.Compute/disks" in kinds and "Microsoft.Network/networkInterfaces" in kinds

    delete = c.compute.virtual_machines.begin_delete("rg1", "vm1", force_deletion=True)
    delete.result()
    assert delete.status() == "Succeeded"
    left = {i.rpartition("/")[2] for i in server.resource_ids()}
    assert left == {"vnet", "nsg"}  # the disk, NIC and public IP went with the VM (Delete)
    assert server.resource(pip_id) is None
    lros = [
        x
        for x in server.calls()
        if x.operation.endswith((".create", ".delete", ".deallocate", ".start"))
    ]
    assert {x.status for x in lros} <= {201, 202}
    assert all(x.principal == server.sp.object_id for x in server.calls("virtualMachines.*"))


def test_arm_errors(azure: Clients, server: AzureServer) -> None:
    c = azure
    with pytest.raises(ResourceNotFoundError) as missing:
        c.compute.virtual_machines.get("nope", "vm")
    assert missing.value.error.code == "ResourceGroupNotFound"
    nic = network(c, "rg1", public_ip=False)
    with pytest.raises(ResourceNotFoundError) as missing:
        c.compute.virtual_machines.get("rg1", "vm")
    assert missing.value.error.code == "ResourceNotFound"
    # Azure's reserved admin user names, in any case, as its Compute API answers them.
    for reserved in ("root", "Admin", "guest"):
        model = vm_model(nic.id)
        model.os_profile.admin_username = reserved
        with pytest.raises(HttpResponseError) as refused:
            c.compute.virtual_machines.begin_create_or_update("rg1", "vm3", model)
        assert refused.value.status_code == 400, reserved
        assert refused.value.error.code == "InvalidParameter"
        assert refused.value.error.message == "The Admin Username specified is not allowed."
        assert refused.value.error.target == "adminUsername"
    assert server.vm("vm3") is None
    c.compute.virtual_machines.begin_create_or_update("rg1", "vm1", vm_model(nic.id)).result()
    with pytest.raises(HttpResponseError) as in_use:
        c.network.network_interfaces.begin_delete("rg1", "nic1")
    assert in_use.value.error.code == "NicInUse"
    with pytest.raises(HttpResponseError) as in_use:
        c.network.virtual_networks.begin_delete("rg1", "vnet")
    assert in_use.value.error.code == "InUseSubnetCannotBeDeleted"
    with pytest.raises(HttpResponseError) as in_use:
        c.network.network_security_groups.begin_delete("rg1", "nsg")
    assert in_use.value.error.code == "InUseNetworkSecurityGroupCannotBeDeleted"
    with pytest.raises(HttpResponseError) as bad:
        c.compute.virtual_machines.begin_create_or_update(
            "rg1", "vm2", vm_model(nic.id, size="Standard_Nope")
        )
    assert bad.value.status_code == 400 and bad.value.error.code == "InvalidParameter"
    # raw: no token, no api-version
    url = f"{server.url}/subscriptions/{server.subscription}/resourcegroups/rg1"
    raw = requests.get(
        url, params={"api-version": "2024-01-01"}, verify=server.ca_bundle, timeout=10
    )
    assert raw.status_code == 401 and raw.json()["error"]["code"] == "AuthenticationFailed"
    assert raw.headers["WWW-Authenticate"].startswith("Bearer ") and raw.headers["x-ms-request-id"]
    token = c.credential.get_token(server.credential_scope).token
    raw = requests.get(
        url, headers={"Authorization": f"Bearer {token}"}, verify=server.ca_bundle, timeout=10
    )
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "MissingApiVersionParameter"


def test_wrong_secret(server: AzureServer) -> None:
    from azure.identity import ClientSecretCredential

    server.reset()
    credential = ClientSecretCredential(
        server.tenant,
        server.client_id,
        "wrong",
        authority=server.url,
        disable_instance_discovery=True,
        connection_verify=str(server.ca_bundle),
    )
    with pytest.raises(ClientAuthenticationError) as refused:
        credential.get_token(server.credential_scope)
    assert "AADSTS7000215" in str(refused.value)


def test_capacity_quota_and_throttling(azure: Clients, server: AzureServer) -> None:
    c = azure
    nic = network(c, "rg1", public_ip=False)
    server.restrict_size("Standard_D2s_v3", zone="2")
    with pytest.raises(HttpResponseError) as sku:
        c.compute.virtual_machines.begin_create_or_update(
            "rg1", "vm1", vm_model(nic.id, zones=["2"])
        )
    assert sku.value.status_code == 409 and sku.value.error.code == "SkuNotAvailable"

    server.set_quota("standardDSv3Family", 1)
    with pytest.raises(HttpResponseError) as quota:
        c.compute.virtual_machines.begin_create_or_update("rg1", "vm1", vm_model(nic.id))
    assert quota.value.status_code == 409 and quota.value.error.code == "OperationNotAllowed"
    assert "standardDSv3Family Cores quota" in quota.value.error.message
    server.set_quota("standardDSv3Family", None)

    server.set_capacity("Standard_D2s_v3", 0, zone="1")
    poller = c.compute.virtual_machines.begin_create_or_update(
        "rg1", "vm1", vm_model(nic.id, zones=["1"])
    )
    with pytest.raises(HttpResponseError) as failed:
        poller.result()
    assert failed.value.error.code == "ZonalAllocationFailed"
    assert poller.status() == "Failed"
    assert c.compute.virtual_machines.get("rg1", "vm1").provisioning_state == "Failed"  # stays
    c.compute.virtual_machines.begin_delete("rg1", "vm1").result()
    server.set_capacity("Standard_D2s_v3", None, zone="1")
    nic = network(c, "rg1", public_ip=False, nic="nic2")  # nic1 went with the VM (Delete)

    c.compute.virtual_machines.begin_create_or_update("rg1", "vm1", vm_model(nic.id)).result()
    server.clear_calls()
    server.throttle(2, "virtualMachines.get", retry_after=1)
    assert c.compute.virtual_machines.get("rg1", "vm1").name == "vm1"
    assert [x.status for x in server.calls("virtualMachines.get")] == [429, 429, 200]
    assert server.calls("virtualMachines.get")[0].error == "TooManyRequests"

    server.faults.fail_operation("virtualMachines.deallocate", "InternalExecutionError", times=1)
    with pytest.raises(HttpResponseError) as op_failed:
        c.compute.virtual_machines.begin_deallocate("rg1", "vm1").result()
    assert op_failed.value.error.code == "InternalExecutionError"
    assert "PowerState/running" in statuses(c, "rg1", "vm1")


def test_identity_role_assignment_and_imds_token(
    azure: Clients, server: AzureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.identity import ManagedIdentityCredential
    from azure.mgmt.authorization.models import RoleAssignmentCreateParameters

    c = azure
    nic = network(c, "rg1", public_ip=False)
    c.resource.resource_groups.create_or_update("other", {"location": LOCATION})
    identity = c.msi.user_assigned_identities.create_or_update(
        "rg1", "node-identity", {"location": LOCATION}
    )
    assert identity.principal_id and identity.client_id and identity.tenant_id == server.tenant
    scope = f"/subscriptions/{server.subscription}/resourceGroups/rg1"
    role = f"/subscriptions/{server.subscription}/providers/Microsoft.Authorization/roleDefinitions/{CONTRIBUTOR}"
    assert c.authorization.role_definitions.get(scope, CONTRIBUTOR).role_name == "Contributor"
    assignment = c.authorization.role_assignments.create(
        scope,
        "4b9a7b5e-3f1c-4d51-9a49-0c0e0f6d3a11",
        RoleAssignmentCreateParameters(
            role_definition_id=role,
            principal_id=identity.principal_id,
            principal_type="ServicePrincipal",
        ),
    )
    assert assignment.principal_id == identity.principal_id
    listed = list(
        c.authorization.role_assignments.list_for_scope(
            scope, filter=f"principalId eq '{identity.principal_id}'"
        )
    )
    assert [a.name for a in listed] == ["4b9a7b5e-3f1c-4d51-9a49-0c0e0f6d3a11"]

    vm = c.compute.virtual_machines.begin_create_or_update(
        "rg1",
        "vm1",
        vm_model(
            nic.id,
            identity=cm.VirtualMachineIdentity(
                type="UserAssigned",
                user_assigned_identities={identity.id: cm.UserAssignedIdentitiesValue()},
            ),
        ),
    ).result()
    assert vm.identity.user_assigned_identities[identity.id].client_id == identity.client_id
    env = server.host_env("vm1")
    assert env["AZURE_CLIENT_ID"] == identity.client_id
    monkeypatch.setenv(
        "AZURE_POD_IDENTITY_AUTHORITY_HOST", env["AZURE_POD_IDENTITY_AUTHORITY_HOST"]
    )
    on_vm = server.clients(
        ManagedIdentityCredential(client_id=identity.client_id), polling_interval=POLL
    )
    assert on_vm.compute.virtual_machines.get("rg1", "vm1").name == "vm1"  # inside its scope
    with pytest.raises(HttpResponseError) as refused:
        list(on_vm.compute.virtual_machines.list("other"))
    assert refused.value.status_code == 403 and refused.value.error.code == "AuthorizationFailed"
    with pytest.raises(HttpResponseError) as refused:  # Contributor may not assign roles
        on_vm.authorization.role_assignments.create(
            scope,
            "5b9a7b5e-3f1c-4d51-9a49-0c0e0f6d3a11",
            RoleAssignmentCreateParameters(
                role_definition_id=role, principal_id=identity.principal_id
            ),
        )
    assert refused.value.error.code == "AuthorizationFailed"
    origins = {
        x.origin for x in server.calls("virtualMachines.*") if x.principal == identity.principal_id
    }
    assert origins == {"vm1"}
    assert [x.status for x in server.calls("imds.token")] == [200]

    server.principal_delay = 60
    late = c.msi.user_assigned_identities.create_or_update("rg1", "late", {"location": LOCATION})
    with pytest.raises(HttpResponseError) as not_yet:
        c.authorization.role_assignments.create(
            scope,
            "6b9a7b5e-3f1c-4d51-9a49-0c0e0f6d3a11",
            RoleAssignmentCreateParameters(role_definition_id=role, principal_id=late.principal_id),
        )
    assert not_yet.value.status_code == 400 and not_yet.value.error.code == "PrincipalNotFound"
    server.principal_delay = 0


def test_eviction_and_scheduled_events(azure: Clients, server: AzureServer) -> None:
    c = azure
    nic = network(c, "rg1", public_ip=False)
    c.compute.virtual_machines.begin_create_or_update(
        "rg1",
        "spot",
        vm_model(
            nic.id,
            priority="Spot",
            eviction_policy="Deallocate",
            billing_profile=cm.BillingProfile(max_price=-1),
        ),
    ).result()
    imds = server.host_env("spot")["AZURE_POD_IDENTITY_AUTHORITY_HOST"] + "/metadata"
    headers = {"Metadata": "true"}
    params = {"api-version": "2020-07-01"}
    empty = requests.get(
        f"{imds}/scheduledevents", headers=headers, params=params, timeout=10
    ).json()
    assert empty["Events"] == []
    assert requests.get(f"{imds}/scheduledevents", params=params, timeout=10).status_code == 400
    instance = requests.get(
        f"{imds}/instance", headers=headers, params={"api-version": "2021-02-01"}, timeout=10
    ).json()
    assert instance["compute"]["name"] == "spot" and instance["compute"]["priority"] == "Spot"
    assert (
        instance["network"]["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"]
        == "127.19.0.4"
    )

    server.evict("spot", notice_s=60)
    doc = requests.get(f"{imds}/scheduledevents", headers=headers, params=params, timeout=10).json()
    (event,) = doc["Events"]
    assert event["EventType"] == "Preempt" and event["EventStatus"] == "Scheduled"
    assert event["Resources"] == ["spot"] and event["NotBefore"].endswith("GMT")
    assert doc["DocumentIncarnation"] > empty["DocumentIncarnation"]
    ack = requests.post(
        f"{imds}/scheduledevents",
        headers=headers,
        params=params,
        json={"StartRequests": [{"EventId": event["EventId"]}]},
        timeout=10,
    )
    assert ack.status_code == 200
    assert server.wait_until(lambda: server.vm("spot").power == "deallocated", 30)  # type: ignore[union-attr]
    assert "PowerState/deallocated" in statuses(c, "rg1", "spot")

    c.compute.virtual_machines.begin_start("rg1", "spot").result()
    c.compute.virtual_machines.simulate_eviction("rg1", "spot")  # 204; Preempt event with notice
    assert server.vm("spot").events[0]["EventType"] == "Preempt"  # type: ignore[union-attr]


def test_resource_group_delete_takes_everything(azure: Clients, server: AzureServer) -> None:
    c = azure
    nic = network(c, "rg1")
    c.compute.virtual_machines.begin_create_or_update("rg1", "vm1", vm_model(nic.id)).result()
    c.msi.user_assigned_identities.create_or_update("rg1", "id1", {"location": LOCATION})
    poller = c.resource.resource_groups.begin_delete("rg1")
    poller.result()
    assert poller.status() == "Succeeded"
    assert not c.resource.resource_groups.check_existence("rg1")
    assert server.resource_ids() == []


def test_hosts_ssh_at_private_and_public_ip(
    server: AzureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fakes.azure.hosts import AzureHosts
    from fakes.hosts.ssh import isolation_unavailable, make_key

    if isolation_unavailable():
        pytest.skip(str(isolation_unavailable()))
    server.reset()
    key = make_key(tmp_path / "key")
    public = Path(f"{key}.pub").read_text().strip()
    c = server.clients(polling_interval=POLL)
    nic = network(c, "rg1")
    with AzureHosts(server) as hosts:
        vm = c.compute.virtual_machines.begin_create_or_update(
            "rg1", "vm1", vm_model(nic.id, key=public)
        ).result()
        assert vm.provisioning_state == "Succeeded"
        assert "PowerState/running" in statuses(c, "rg1", "vm1")  # only once its host is up
        host = hosts.running()["vm1"]
        view = server.vm("vm1")
        assert view is not None and host.ip == view.private_ip
        for ip in (view.private_ip, view.public_ips[0]):
            out = subprocess.run(
                [
                    "ssh",
                    "-i",
                    str(key),
                    "-o",
                    "StrictHostKeyChecking=no",
                    "-o",
                    "UserKnownHostsFile=/dev/null",
                    "-o",
                    "BatchMode=yes",
                    f"root@{ip}",
                    "echo $AZURE_POD_IDENTITY_AUTHORITY_HOST",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.strip()
            assert out == server.host_env("vm1")["AZURE_POD_IDENTITY_AUTHORITY_HOST"]
        c.compute.virtual_machines.begin_deallocate("rg1", "vm1").result()
        assert not host.running  # deallocated only once the machine is off
