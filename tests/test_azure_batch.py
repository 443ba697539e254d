"""launcher/providers/azure/batch.py: the template of one launch batch, its output, and the
refusals read from a failed deployment (pure; the wire fake evaluates the template in
tests/test_azure_provider.py)."""

from __future__ import annotations

from types import SimpleNamespace

from fakes.azure.templates import Scope, evaluate, plan
from launcher.providers.azure import batch
from launcher.providers.azure.batch import NodeBodies

SUB, GROUP = "sub-1", "rg-1"


class _Failed(Exception):
    """An SDK error as azure-core raises it: ARM's error model in `.error`."""

    def __init__(self, error: object) -> None:
        super().__init__("failed")
        self.error = error


def _node(name: str, public: bool) -> NodeBodies:
    nic_id = batch.resource_id(SUB, GROUP, batch.NIC_TYPE, f"{name}-nic")
    ip_id = batch.resource_id(SUB, GROUP, batch.PUBLIC_IP_TYPE, f"{name}-ip")
    return NodeBodies(
        name,
        vm={
            "location": "eastus",
            "tags": {"user": "[not an expression]"},
            "properties": {
                "osProfile": {"customData": "[x]"},
                "networkProfile": {"networkInterfaces": [{"id": nic_id}]},
            },
        },
        nic={"location": "eastus", "properties": {"ipConfigurations": [{"name": "c"}]}},
        public_ip={"location": "eastus", "properties": {"id": ip_id}} if public else None,
    )


def test_each_node_is_its_resources_in_dependency_order_with_user_text_escaped() -> None:
    template = batch.template(SUB, GROUP, [_node("vm-a", True), _node("vm-b", False)])
    kinds = [(r["type"], r["name"]) for r in template["resources"]]
    assert kinds == [
        (batch.PUBLIC_IP_TYPE, "vm-a-ip"),
        (batch.NIC_TYPE, "vm-a-nic"),
        (batch.VM_TYPE, "vm-a"),
        (batch.NIC_TYPE, "vm-b-nic"),
        (batch.VM_TYPE, "vm-b"),
    ]
    vm_a = template["resources"][2]
    assert vm_a["dependsOn"] == [batch.resource_id(SUB, GROUP, batch.NIC_TYPE, "vm-a-nic")]
    assert template["resources"][1]["dependsOn"] == [
        batch.resource_id(SUB, GROUP, batch.PUBLIC_IP_TYPE, "vm-a-ip")
    ]
    # ARM's own evaluation (the fake's) gives back exactly what the user wrote.
    scope = Scope(SUB, {"id": f"/subscriptions/{SUB}/resourceGroups/{GROUP}", "name": GROUP}, {})
    (made,) = [i for i in plan(template, scope) if i.name == "vm-a"]
    body = made.body(scope)
    assert body["tags"] == {"user": "[not an expression]"}
    assert body["properties"]["osProfile"]["customData"] == "[x]"
    out = template["outputs"][batch.ADDRESSES]["value"]
    assert out["vm-b"]["public"] == "" and "privateIPAddress" in out["vm-b"]["private"]
    assert evaluate("[[kept]", scope) == "[kept]"


def test_the_output_gives_each_vm_its_addresses() -> None:
    answer = {
        "properties": {
            "outputs": {
                batch.ADDRESSES: {
                    "type": "Object",
                    "value": {
                        "vm-a": {"private": "10.0.0.4", "public": "20.1.2.3"},
                        "vm-b": {"private": "10.0.0.5", "public": ""},
                    },
                }
            }
        }
    }
    assert batch.addresses_of(answer) == {
        "vm-a": ("10.0.0.4", "20.1.2.3"),
        "vm-b": ("10.0.0.5", None),
    }
    model = SimpleNamespace(properties=SimpleNamespace(outputs=answer["properties"]["outputs"]))
    assert batch.addresses_of(model) == batch.addresses_of(answer)
    assert batch.addresses_of({"properties": {}}) == {}


def test_refusals_name_the_resource_of_the_enclosing_error() -> None:
    """ARM's DeploymentFailed holds a ResourceDeploymentFailure per resource (naming it),
    whose details hold the resource provider's own error."""
    vm = batch.resource_id(SUB, GROUP, batch.VM_TYPE, "vm-a")
    inner = SimpleNamespace(code="ZonalAllocationFailed", message="no  room", details=[])
    per_vm = SimpleNamespace(
        code="ResourceDeploymentFailure", message="failed", target=vm, details=[inner]
    )
    error = SimpleNamespace(code="DeploymentFailed", message="x", details=[per_vm])
    (found,) = batch.refusals(_Failed(error))
    assert (found.code, found.message, found.resource_name) == (
        "ZonalAllocationFailed",
        "no room",
        "vm-a",
    )
    flat = SimpleNamespace(code="QuotaExceeded", message="q", details=[], target="")
    (only,) = batch.refusals(_Failed(flat))
    assert only.code == "QuotaExceeded" and only.resource_name == ""
    assert batch.refusals(ValueError("no error model")) == []


def test_deployment_names_fit_arm_and_differ_per_zone_and_part() -> None:
    long = "c" * 200
    name = batch.deployment_name(long, "req", "1")
    assert len(name) <= 64
    assert name == batch.deployment_name(long, "req", "1")
    others = {batch.deployment_name(long, "req", "2"), batch.deployment_name(long, "req", "1", 1)}
    assert name not in others and len(others) == 2
