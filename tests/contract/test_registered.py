"""Every provider type in the registry that can run clusters (its spec names an
implementation) has its contract test: a class of this folder built on
launcher.testing.contract.ProviderContract naming it. A type registered for `validate` and
`plan` only (none is, now) has no seam to test yet, and `up` refuses it in one line."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

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


def test_a_type_registered_without_an_implementation_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A type registered for `validate` and `plan` only (as azure was before its provider
    landed): `up` and the other verbs refuse it plainly, naming the types that run."""
    from launcher.config.loader import parse_config
    from launcher.errors import UsageError
    from launcher.providers import factory
    from launcher.providers.azure.spec import AzureSpec

    class PlanOnly(AzureSpec):
        implementation = ""

    monkeypatch.setattr(factory, "SPECS", {**SPECS, "azure": PlanOnly()})
    config = parse_config(
        "cluster_name: c\nprovider: {type: azure, location: westus2, resource_group: rg}\n",
        "inline",
    )
    with pytest.raises(UsageError) as refused:
        factory.make_provider(config)
    text = str(refused.value)
    assert "cannot run clusters yet" in text and "\n" not in text
    assert "`gcp`" in text and "`azure`" not in text
