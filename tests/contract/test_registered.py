"""Every provider type in the registry has its contract test: a class of this folder built
on launcher.testing.contract.ProviderContract naming it."""

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
    missing = set(SPECS) - tested
    assert not missing, f"provider types without a contract class here: {sorted(missing)}"
