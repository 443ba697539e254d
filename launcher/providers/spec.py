"""What the config layer and `plan` need to know about a provider, without importing its SDK.

Each provider type has one `ProviderSpec`: its schema and defaults, the checks a schema
cannot express, its typed `provider` section, and a description of what `up` would
create and what a node costs. Shared code asks the spec; it never asks "is this AWS?".
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem, Severity
from launcher.pricing import HourlyPrice, PriceTable
from launcher.pricing.quotes import PriceRequest


@dataclass(frozen=True)
class PlannedResource:
    """A cloud or local resource that `up` creates, reuses or uses."""

    kind: str
    name: str
    action: str  # "create if missing", "reuse", "use"
    detail: str = ""


@dataclass(frozen=True)
class NodeOffer:
    """What one node of a type is, for display and cost: `m5.large`, spot, $0.035/h."""

    description: str
    spot: bool
    price: HourlyPrice | None
    billed: bool = True  # False for machines the user already owns (localhost, on-prem)


@dataclass(frozen=True)
class CredentialFile:
    """A file of credentials a controller gets (launcher/runs/controller.py): the one
    `variable` names on this machine if set, else the first of `defaults` (paths under the
    user's home) that exists. On the controller `variable` names its copy."""

    variable: str
    defaults: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerCredentials:
    """What a provider's calls need from this machine's environment, handed to a run's
    controller so the supervisor there can launch a head: the environment variables by
    name (`variables`, and any starting with one of `prefixes`) that are set, and files."""

    variables: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    files: tuple[CredentialFile, ...] = ()


class ProviderSpec:
    """Base spec; providers override what applies to them.

    A provider is one package under launcher/providers/ holding its spec (`spec.py`), its
    NodeProvider (`implementation`), and beside them the files the spec reads from its own
    package: `schema.json` (the `provider` and `node_config` sections), `defaults.yaml`
    (merged under the user's config) and, where it has a price table, `price_file`.
    """

    type: str = ""
    title: str = ""
    # Where the NodeProvider lives, `module:Class`; imported only when a cluster is used.
    implementation: str = ""
    install_extra: str | None = None
    sdk_module: str | None = None
    # The dated price table in the spec's package (`prices.json`), None where nodes have
    # no list price (this machine, on-prem, Kubernetes).
    price_file: str | None = None
    # The module of launcher.pricing that reads the cloud's published prices (its
    # `SOURCE`), None where the cloud publishes none; see launcher/pricing/live.py.
    price_source: str | None = None
    # What a controller of this provider's recovering runs is given; None: such a cluster
    # cannot be supervised from another machine (its nodes are this machine's processes).
    controller_credentials: ControllerCredentials | None = None

    @property
    def package(self) -> str:
        """The provider's package (where its schema, defaults and prices are)."""
        return type(self).__module__.rpartition(".")[0]

    @property
    def schema_name(self) -> str:
        """The name `launcher.config.schema.load_schema` reads the provider's schema by."""
        return f"{self.package}:schema.json"

    def defaults(self) -> dict[str, Any]:
        """A fresh copy of the provider's defaults (its package's `defaults.yaml`)."""
        return copy.deepcopy(dict(_package_yaml(self.package, "defaults.yaml")))

    def price_rows(self) -> Mapping[str, Any] | None:
        """The provider's price table as written in its package (`price_file`), if any."""
        if self.price_file is None:
            return None
        return _package_json(self.package, self.price_file)

    def region_label(self, config: ClusterConfig) -> str:
        """Where the cluster runs, for records and `list` (a region, a namespace, a host)."""
        return ""

    def prepare(self, raw: dict[str, Any]) -> list[Problem]:
        """Adjust the user's config before legacy conversion and defaults; may edit `raw`."""
        return []

    def complete(self, merged: dict[str, Any]) -> list[Problem]:
        """Fill provider-specific defaults after the generic merge; may edit `merged`."""
        return []

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        """Checks no schema expresses. Must tolerate malformed input: schema errors are
        reported separately, and every problem should be reported at once."""
        return []

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        raise NotImplementedError

    def known_resources(self, node_config: Mapping[str, Any]) -> dict[str, int] | None:
        """Ray resources of a node from its node_config, when the machine size is known."""
        return None

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        return []

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        """Every name `up` gives a cloud or machine resource that is derived from the
        cluster name, by kind (`{"head IAM role": "launcher-head-x"}`): the exact names the
        provider uses. Each must be unique per exact cluster name and valid for the cloud's
        rules (see launcher/naming.py); the contract kit checks both."""
        return {}

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        return NodeOffer(description=node_type.name, spot=False, price=None, billed=False)

    def price_request(self, config: ClusterConfig, prices: PriceTable) -> PriceRequest | None:
        """The live prices the cluster's nodes need (`price_source`), None for none."""
        return None


@cache
def _package_yaml(package: str, name: str) -> Mapping[str, Any]:
    data: Mapping[str, Any] = yaml.safe_load(resources.files(package).joinpath(name).read_text())
    return data


@cache
def _package_json(package: str, name: str) -> Mapping[str, Any]:
    data: Mapping[str, Any] = json.loads(resources.files(package).joinpath(name).read_text())
    return data


def string_list(value: object) -> tuple[str, ...]:
    """A tuple of strings from a validated list, or from a comma-separated string."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return ()


def extra_keys(section: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k not in known}


def region_default_warning(raw: Mapping[str, Any], default: str) -> list[Problem]:
    """Ray fills in a region silently; we say so, since it decides where money is spent."""
    provider = raw.get("provider")
    if isinstance(provider, Mapping) and "region" not in provider:
        return [
            Problem(
                ("provider",),
                f"no region set; using {default}",
                f"set provider.region (for example `region: {default}`)",
                severity=Severity.WARNING,
            )
        ]
    return []
