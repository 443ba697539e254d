"""The provider types the launcher knows, by the name used in `provider.type`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from launcher.providers.aws.spec import AwsSpec
from launcher.providers.azure.spec import AzureSpec
from launcher.providers.gcp.spec import GcpSpec
from launcher.providers.kubernetes.spec import KubernetesSpec
from launcher.providers.localhost.spec import FakeMultinodeSpec, LocalhostSpec
from launcher.providers.onprem.spec import OnPremSpec
from launcher.providers.spec import ProviderSpec

SPECS: Mapping[str, ProviderSpec] = MappingProxyType(
    {
        spec.type: spec
        for spec in (
            LocalhostSpec(),
            FakeMultinodeSpec(),
            OnPremSpec(),
            AwsSpec(),
            GcpSpec(),
            KubernetesSpec(),
            AzureSpec(),
        )
    }
)


def provider_spec(provider_type: str) -> ProviderSpec | None:
    return SPECS.get(provider_type)
