"""The config half of `provider: type: azure`: Ray's Azure examples
(../shared/ray-example-configs/azure/) validate and plan unchanged, the older form converts,
bad values are refused in one line naming the path and the fix, and plan's names and prices
are the spec's."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.loader import load_config
from launcher.pricing import load_prices
from launcher.providers.azure import names
from launcher.providers.azure.model import AzureProviderConfig
from launcher.providers.registry import SPECS
from tests.conftest import RAY_EXAMPLES, run_cli

AZURE = RAY_EXAMPLES / "azure"
EXAMPLES = sorted(AZURE.glob("*.yaml")) + sorted((AZURE / "legacy").glob("*.yaml"))
SPEC = SPECS["azure"]

GOOD: dict[str, Any] = {
    "cluster_name": "az-test",
    "max_workers": 2,
    "provider": {"type": "azure", "location": "eastus", "resource_group": "rg-test"},
    "available_node_types": {
        "head": {
            "resources": {},
            "node_config": {
                "azure_arm_parameters": {
                    "vmSize": "Standard_D4s_v5",
                    "imagePublisher": "Canonical",
                    "imageOffer": "ubuntu-24_04-lts",
                    "imageSku": "server",
                }
            },
        },
        "spot": {
            "min_workers": 0,
            "max_workers": 2,
            "resources": {},
            "node_config": {
                "azure_arm_parameters": {
                    "vmSize": "Standard_NC6s_v3",
                    "imagePublisher": "microsoft-dsvm",
                    "imageOffer": "ubuntu-2204",
                    "imageSku": "2204-gen2",
                    "priority": "Spot",
                    "billingProfile": {"maxPrice": 0.5},
                }
            },
        },
    },
    "head_node_type": "head",
}


@pytest.fixture
def home_with_keys(fake_home: Path) -> Path:
    """Ray's examples name ~/.ssh/id_rsa and mount ~/.ssh/id_rsa.pub: give them here."""
    (fake_home / ".ssh" / "id_rsa").write_text("not a real key\n")
    (fake_home / ".ssh" / "id_rsa.pub").write_text("ssh-rsa AAAA test\n")
    return fake_home


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(GOOD))
    change(data)
    return data


def _arm(data: dict[str, Any], node_type: str = "spot") -> dict[str, Any]:
    params: dict[str, Any] = data["available_node_types"][node_type]["node_config"][
        "azure_arm_parameters"
    ]
    return params


def test_rays_azure_examples_are_all_here(ray_examples: Path) -> None:
    assert {p.name for p in EXAMPLES} >= {
        "defaults.yaml",
        "example-full.yaml",
        "example-minimal.yaml",
        "example-gpu-docker.yaml",
        "example-availability-zones.yaml",
    }
    assert (ray_examples / "azure" / "legacy" / "example-full.yaml") in EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_ray_example_validates_and_plans(path: Path, home_with_keys: Path) -> None:
    result = run_cli("validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.exception is None and "valid" in result.stdout
    plan = run_cli("plan", str(path))
    assert plan.exit_code == 0, plan.stderr
    assert "Head node" in plan.stdout and "resource group" in plan.stdout
    as_json = run_cli("plan", "--json", str(path))
    assert as_json.exit_code == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["nodes"][0]["role"] == "head"
    for node in data["nodes"]:  # every size priced, and CPU known from the table
        assert node["price_on_demand"] and node["price_on_demand"] > 0, node
        assert node["resources"]["CPU"] > 0
    assert data["cost_per_hour"], data


def test_the_legacy_example_converts_to_node_types(home_with_keys: Path) -> None:
    result = run_cli("plan", "--json", str(AZURE / "legacy" / "example-full.yaml"))
    assert result.exit_code == 0, result.stderr
    head, worker = json.loads(result.stdout)["nodes"]
    assert head["machine"] == worker["machine"] == "Standard_D2s_v3"
    assert head["market"] == "on-demand" and worker["market"] == "spot"
    assert worker["max_count"] == 2 and worker["count_at_start"] == 0
    config = load_config(AZURE / "legacy" / "example-full.yaml")
    worker_type = next(t for n, t in config.node_types.items() if n != config.head_node_type)
    assert worker_type.node_config["azure_arm_parameters"]["imageVersion"] == "20.02.01"


def test_zones_as_ray_writes_them(home_with_keys: Path) -> None:
    config = load_config(AZURE / "example-availability-zones.yaml")
    provider = config.provider
    assert isinstance(provider, AzureProviderConfig)
    assert provider.availability_zone == "1,2,3" and provider.cache_stopped_nodes is False
    assert SPEC.region_label(config) == "westus2"


def test_plans_names_are_derived_names(tmp_path: Path, home_with_keys: Path) -> None:
    for data in (
        GOOD,
        _with(lambda d: d["provider"].update(unique_id="RAY1", msi_name="my-msi")),
        _with(lambda d: d.update(cluster_name="ML.prod_x")),
    ):
        config = load_config(_write(tmp_path, data))
        derived = SPEC.derived_names(config)
        assert derived
        result = run_cli("plan", "--json", str(_write(tmp_path, data)))
        assert result.exit_code == 0, result.stderr
        shown = " ".join(
            f"{r['name']} {r['detail']}" for r in json.loads(result.stdout)["resources"]
        )
        for kind, name in derived.items():
            assert name in shown, (kind, name)
    made = SPEC.derived_names(load_config(_write(tmp_path, GOOD)))
    assert made == names.derived_names("az-test")
    mine = load_config(
        _write(tmp_path, _with(lambda d: d["provider"].update(unique_id="RAY1", msi_name="m-i")))
    )
    named = SPEC.derived_names(mine)
    assert "head managed identity" not in named and named["virtual network"].endswith("RAY1")
    keyed = load_config(AZURE / "example-minimal.yaml")  # auth names ~/.ssh/id_rsa
    assert "SSH key file" not in SPEC.derived_names(keyed)


def test_identity_is_scoped_to_the_resource_group(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, GOOD))
    (identity,) = [r for r in SPEC.bootstrap_plan(config) if r.kind == "managed identity"]
    assert identity.name == names.identity("az-test")
    assert "Contributor on resource group rg-test only" in identity.detail
    ssh = next(r for r in SPEC.bootstrap_plan(config) if r.kind == "network security group")
    assert "your own public address" in ssh.detail
    opened = load_config(
        _write(tmp_path, _with(lambda d: d["provider"].update(allow_ssh_from=["203.0.113.0/24"])))
    )
    ssh = next(r for r in SPEC.bootstrap_plan(opened) if r.kind == "network security group")
    assert "203.0.113.0/24 only" in ssh.detail


def test_every_size_in_rays_examples_is_priced() -> None:
    prices = load_prices()
    sizes = set()
    for path in EXAMPLES:
        text = yaml.safe_load(path.read_text())
        configs = [
            t.get("node_config", {}) for t in (text.get("available_node_types") or {}).values()
        ]
        configs += [text[k] for k in ("head_node", "worker_nodes") if k in text]
        sizes |= {c["azure_arm_parameters"]["vmSize"] for c in configs if c}
    assert sizes >= {"Standard_D2s_v3", "Standard_NC6s_v3"}
    for size in sizes:
        info = prices.machine("azure", size)
        assert info is not None, size
        assert info.price.on_demand > 0 and info.price.spot is not None
        assert 0 < info.price.spot < info.price.on_demand
    assert prices.machine("azure", "Standard_NC6s_v3").gpus == 1  # type: ignore[union-attr]
    rows = SPEC.price_rows()
    assert rows is not None and "westus2" in rows["regions"]
    assert rows["reference_region"] == "eastus"
    assert "prices.azure.com" in rows["source"] and "azure.microsoft.com" in rows["source"]


def test_a_spot_type_with_max_price_shows_the_cap(tmp_path: Path) -> None:
    result = run_cli("plan", "--json", str(_write(tmp_path, GOOD)))
    assert result.exit_code == 0, result.stderr
    head, spot = json.loads(result.stdout)["nodes"]
    assert head["market"] == "on-demand" and spot["market"] == "spot"
    assert spot["resources"]["GPU"] == 1 and spot["resources"]["CPU"] == 6
    listed = load_prices().machine("azure", "Standard_NC6s_v3")
    assert listed is not None and listed.price.spot is not None
    assert spot["price_spot"] == min(0.5, listed.price.spot)
    capped = _with(lambda d: _arm(d)["billingProfile"].update(maxPrice=0.25))
    result = run_cli("plan", "--json", str(_write(tmp_path, capped)))
    spot = json.loads(result.stdout)["nodes"][1]
    assert spot["price_spot"] == 0.25 and spot["price_on_demand"] == listed.price.on_demand
    assert "max price $0.25/h" in run_cli("plan", str(_write(tmp_path, capped))).stdout
    uncapped = _with(lambda d: _arm(d)["billingProfile"].update(maxPrice=-1))
    spot = json.loads(run_cli("plan", "--json", str(_write(tmp_path, uncapped))).stdout)["nodes"][1]
    assert spot["price_spot"] == listed.price.spot


def test_lowercase_priority_is_read_in_azures_case(tmp_path: Path) -> None:
    data = _with(lambda d: _arm(d).update(priority="spot", evictionPolicy="deallocate"))
    result = run_cli("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 0, result.stderr
    assert "'spot' read as 'Spot'" in result.stderr
    config = load_config(_write(tmp_path, data))
    assert config.node_types["spot"].node_config["azure_arm_parameters"]["priority"] == "Spot"


def test_unknown_arm_parameter_is_a_warning_naming_it(tmp_path: Path) -> None:
    data = _with(lambda d: _arm(d).update(myOwnThing=1, vmName="x"))
    result = run_cli("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 0, result.stderr
    assert "azure_arm_parameters.myOwnThing" in result.stderr and "warning" in result.stderr
    assert "azure_arm_parameters.vmName" in result.stderr


def _set_provider(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["provider"].update(values)


def _set_arm(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: _arm(d).update(values)


def _custom_image(image: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        for key in ("imagePublisher", "imageOffer", "imageSku"):
            del _arm(data)[key]
        _arm(data)["imageId"] = image

    return change


BAD: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("location", _set_provider(location="West US 2"), "provider.location", "westus2"),
    ("location path", _set_provider(location="../eastus"), "provider.location", "short name"),
    ("no location", lambda d: d["provider"].update(location=""), "provider.location", ""),
    ("zone", _set_provider(availability_zone="eastus-1"), "provider.availability_zone", "1,2,3"),
    ("group", _set_provider(resource_group="../../x"), "provider.resource_group", "letters"),
    ("group end", _set_provider(resource_group="rg."), "provider.resource_group", "not ending"),
    ("unique", _set_provider(unique_id="a/b"), "provider.unique_id", "RAY1"),
    ("msi", _set_provider(msi_name="x/../y"), "provider.msi_name", "3-128"),
    ("sub", _set_provider(subscription_id="mine"), "provider.subscription_id", "GUID"),
    ("mask", _set_provider(subnet_mask="10.0.0.0/33"), "provider.subnet_mask", "10.0.0.0/16"),
    ("mask bits", _set_provider(subnet_mask="10.0.0.1/16"), "provider.subnet_mask", "10.0.0.0/16"),
    ("mask v6", _set_provider(subnet_mask="fd00::/64"), "provider.subnet_mask", "IPv4"),
    ("ssh", _set_provider(allow_ssh_from=["10.0.0.1/8"]), "allow_ssh_from", "10.0.0.0/8"),
    ("size", _set_arm(vmSize="d2s_v3"), "azure_arm_parameters.vmSize", "Standard_D2s_v3"),
    ("size path", _set_arm(vmSize="Standard_D2/../x"), "vmSize", "Standard_D2s_v3"),
    ("no size", lambda d: _arm(d).pop("vmSize"), "azure_arm_parameters", "vmSize"),
    ("priority", _set_arm(priority="Cheap"), "azure_arm_parameters.priority", "Spot"),
    ("eviction", _set_arm(evictionPolicy="Stop"), "evictionPolicy", "Deallocate"),
    (
        "max price",
        lambda d: _arm(d).update(priority="Regular"),
        "billingProfile.maxPrice",
        "priority: Spot",
    ),
    ("max zero", _set_arm(billingProfile={"maxPrice": 0}), "maxPrice", "-1"),
    ("max low", _set_arm(billingProfile={"maxPrice": -5}), "maxPrice", "-1"),
    ("max text", _set_arm(billingProfile={"maxPrice": "cheap"}), "maxPrice", "number"),
    ("node zone", _set_arm(availability_zone="a"), "azure_arm_parameters.availability_zone", "1"),
    ("subnet", _set_arm(subnet="../../subnets/x"), "azure_arm_parameters.subnet", "resource id"),
    (
        "subnet dots",
        _set_arm(
            subnet="/subscriptions/s/resourceGroups/../providers/Microsoft.Network/"
            "virtualNetworks/v/subnets/x"
        ),
        "azure_arm_parameters.subnet",
        "resource id",
    ),
    ("nsg", _set_arm(networkSecurityGroup="my-nsg"), "networkSecurityGroup", "resource id"),
    ("image", _custom_image("my-image"), "azure_arm_parameters.imageId", "resource id"),
    ("no image", lambda d: _arm(d).pop("imageSku"), "azure_arm_parameters", "imageSku"),
    ("image and id", _set_arm(imageId="/subscriptions/s"), "imageId", "keep one"),
    ("disk", _set_arm(osDiskSizeGB=0), "osDiskSizeGB", "1"),
    ("tier", _set_arm(osDiskTier="Fast"), "osDiskTier", "Premium_LRS"),
    ("no params", lambda d: d["available_node_types"]["spot"].update(node_config={}), "", "vmSize"),
    ("root", lambda d: d.update(auth={"ssh_user": "root"}), "auth.ssh_user", "azureuser"),
    ("admin", lambda d: d.update(auth={"ssh_user": "Admin"}), "auth.ssh_user", "azureuser"),
    ("guest", lambda d: d.update(auth={"ssh_user": "guest"}), "auth.ssh_user", "azureuser"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_values_are_refused_naming_the_path_and_the_fix(
    case: tuple[str, Callable[[dict[str, Any]], None], str, str], tmp_path: Path
) -> None:
    _, change, path, fix = case
    result = run_cli("validate", str(_write(tmp_path, _with(change))))
    assert result.exit_code != 0, result.stdout
    assert result.exception is None
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert errors, result.stderr
    assert any(path in line and fix in line for line in errors), result.stderr


def test_the_good_config_is_good(tmp_path: Path) -> None:
    result = run_cli("validate", str(_write(tmp_path, GOOD)))
    assert result.exit_code == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr


def test_custom_image_and_own_subnet_are_accepted(tmp_path: Path) -> None:
    sub = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/net-rg/providers"
    data = _with(
        lambda d: _arm(d, "head").update(
            imageId=f"{sub}/Microsoft.Compute/galleries/g/images/ray/versions/1.0.0",
            subnet=f"{sub}/Microsoft.Network/virtualNetworks/v/subnets/s",
            networkSecurityGroup=f"{sub}/Microsoft.Network/networkSecurityGroups/n",
        )
    )
    for key in ("imagePublisher", "imageOffer", "imageSku"):
        del _arm(data, "head")[key]
    result = run_cli("plan", str(_write(tmp_path, data)))
    assert result.exit_code == 0, result.stderr
    assert "galleries/g/images/ray/versions/1.0.0" in result.stdout
    assert "virtualNetworks/v/subnets/s" in result.stdout


def test_missing_resource_group_is_defaulted_with_a_warning(tmp_path: Path) -> None:
    data = _with(lambda d: d["provider"].pop("resource_group"))
    result = run_cli("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 0, result.stderr
    assert "no resource_group set; using ray-cluster" in result.stderr


def test_spec_imports_no_azure_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, launcher.providers.azure.spec, launcher.providers.registry;"
        "print([m for m in sys.modules if m.startswith('azure')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
