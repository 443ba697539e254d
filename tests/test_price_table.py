"""The price table covers every type the example configs name, and says when and where from.

Examples: ours (examples/clusters/) and Ray's AWS, GCP and Azure ones (../shared/ray-example-configs,
legacy/ included). A type missing from the table would make `plan` print "unknown" for it.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.pricing import load_prices
from tests.conftest import RAY_EXAMPLES, REPO

OURS = REPO / "examples" / "clusters"


def _node_configs(config: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for node_type in (config.get("available_node_types") or {}).values():
        if isinstance(node_type, Mapping) and isinstance(node_type.get("node_config"), Mapping):
            yield node_type["node_config"]
    for legacy in ("head_node", "worker_nodes"):
        if isinstance(config.get(legacy), Mapping):
            yield config[legacy]


def _basename(value: str) -> str:
    return value.rsplit("/", 1)[-1]  # machineType may be a full URL


def _types_in(path: Path) -> Iterator[tuple[str, str, str]]:
    """(provider, kind, name) for each instance, machine and accelerator type in one file."""
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, Mapping):
        return
    for node_config in _node_configs(config):
        if isinstance(node_config.get("InstanceType"), str):
            yield "aws", "machine", node_config["InstanceType"]
        azure = node_config.get("azure_arm_parameters")
        if isinstance(azure, Mapping) and isinstance(azure.get("vmSize"), str):
            yield "azure", "machine", azure["vmSize"]
        if isinstance(node_config.get("machineType"), str):
            yield "gcp", "machine", _basename(node_config["machineType"])
        accelerators = node_config.get("guestAccelerators") or []
        if isinstance(accelerators, Mapping):  # older examples give one mapping, not a list
            accelerators = [accelerators]
        for accelerator in accelerators:
            if isinstance(accelerator, Mapping) and accelerator.get("acceleratorType"):
                yield "gcp", "accelerator", _basename(str(accelerator["acceleratorType"]))


def _unpriced(files: list[Path]) -> list[str]:
    """What is wrong with the table for the types these files name (nothing: empty)."""
    prices = load_prices()
    seen: dict[tuple[str, str, str], set[str]] = {}
    for path in files:
        for found in _types_in(path):
            seen.setdefault(found, set()).add(str(path.relative_to(REPO.parent)))
    assert seen, f"no instance, machine or accelerator types found in {files}"
    problems = []
    for (provider, kind, name), paths in sorted(seen.items()):
        if kind == "machine":
            info = prices.machine(provider, name)
            price = info.price if info else None
        else:
            price = prices.accelerator(provider, name)
        where = f"{provider} {name} (in {', '.join(sorted(paths))})"
        if price is None:
            problems.append(f"{where}: not in the table")
        elif not price.on_demand > 0:
            problems.append(f"{where}: on-demand price {price.on_demand}")
        elif price.spot is None or not 0 < price.spot < price.on_demand:
            problems.append(f"{where}: spot {price.spot} vs on-demand {price.on_demand}")
    return problems


def test_our_examples_are_priced() -> None:
    problems = _unpriced(sorted(OURS.glob("*.yaml")))
    assert not problems, "\n".join(problems)


def test_rays_aws_and_gcp_examples_are_priced() -> None:
    if not RAY_EXAMPLES.is_dir():
        pytest.skip(f"Ray's example configs are not at {RAY_EXAMPLES}")
    files = sorted((RAY_EXAMPLES / "aws").rglob("*.yaml"))
    files += sorted((RAY_EXAMPLES / "gcp").rglob("*.yaml"))
    # The walk reaches what we know is there (legacy/ and the older one-mapping accelerators).
    found = {t for path in files for t in _types_in(path)}
    assert {
        ("aws", "machine", "c5a.large"),
        ("aws", "machine", "p3dn.24xlarge"),
        ("gcp", "machine", "custom-6-16384"),
        ("gcp", "accelerator", "nvidia-tesla-k80"),
        ("gcp", "accelerator", "nvidia-tesla-t4"),
    } <= found
    problems = _unpriced(files)
    assert not problems, "\n".join(problems)


def test_rays_azure_examples_are_priced() -> None:
    if not RAY_EXAMPLES.is_dir():
        pytest.skip(f"Ray's example configs are not at {RAY_EXAMPLES}")
    files = sorted((RAY_EXAMPLES / "azure").rglob("*.yaml"))
    found = {t for path in files for t in _types_in(path)}
    assert {
        ("azure", "machine", "Standard_D2s_v3"),
        ("azure", "machine", "Standard_NC6s_v3"),
    } <= found
    problems = _unpriced(files)
    assert not problems, "\n".join(problems)


def test_machine_rows_are_consistent() -> None:
    prices = load_prices()
    for provider, machines in prices.machines.items():
        for name, info in machines.items():
            assert info.vcpus > 0 and info.memory_gib > 0, (provider, name)
            assert (info.gpus > 0) == (info.gpu_model is not None), (provider, name)
            assert info.price.on_demand > 0, (provider, name)
            assert info.price.spot is not None and 0 < info.price.spot < info.price.on_demand


def test_table_is_dated_and_sourced() -> None:
    prices = load_prices()
    assert datetime.date.fromisoformat(prices.as_of)
    assert prices.source.strip()
    assert "aws.amazon.com" in prices.source and "cloud.google.com" in prices.source
    assert "azure.microsoft.com" in prices.source
    assert prices.reference_regions == {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"}


def test_unknown_types_are_none_not_zero() -> None:
    prices = load_prices()
    assert prices.machine("aws", "x99.nonexistent") is None
    assert prices.machine("gcp", "n9-imaginary-4") is None
    assert prices.machine("nowhere", "m5.large") is None
    assert prices.machine("azure", "Standard_Imaginary_v9") is None
    assert prices.accelerator("gcp", "nvidia-imaginary-1") is None


def test_each_provider_keeps_its_own_tables_date() -> None:
    # A provider's older table (Azure's) must not make `plan` date another's prices by it.
    from launcher.providers.registry import SPECS

    prices = load_prices()
    for name, spec in SPECS.items():
        rows = spec.price_rows()
        if rows is not None:
            assert prices.dated(name) == rows["as_of"]
    assert prices.as_of == min(prices.dates.values())
