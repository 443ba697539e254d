"""Every provider type in the registry that can run clusters (its spec names an
implementation) has its contract test: a class of this folder built on
launcher.testing.contract.ProviderContract naming it. A type registered for `validate` and
`plan` only has no seam to test yet, and `up` refuses it in one line."""

from __future__ import annotations

import importlib
from pathlib import Path

from launcher.providers.registry import SPECS
from launcher.testing.contract import ProviderContract


def test_every_registered_provider_type_has_a_contract_class() -> None:
    tested = set()
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        module = importlib.import_module(f"tests.contract.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, ProviderContract):
                tested.add(value.provider_type)
    runs = {name for name, spec in SPECS.items() if spec.implementation}
    missing = runs - tested
    assert not missing, f"provider types without a contract class here: {sorted(missing)}"


def test_azure_without_its_provider_yet_is_refused_in_one_line() -> None:
    """Azure validates and plans; until its NodeProvider lands, `up` refuses it plainly."""
    from launcher.config.loader import parse_config
    from launcher.errors import UsageError
    from launcher.providers.factory import make_provider

    if SPECS["azure"].implementation:
        return  # it runs clusters now: its contract class is required above
    config = parse_config(
        "cluster_name: c\nprovider: {type: azure, location: westus2, resource_group: rg}\n",
        "inline",
    )
    try:
        make_provider(config)
    except UsageError as exc:
        assert "cannot run clusters yet" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("make_provider did not refuse azure")
