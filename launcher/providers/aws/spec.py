"""Config-time knowledge of the EC2 provider. Imports no AWS SDK."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem
from launcher.pricing import PriceTable, load_prices
from launcher.pricing.quotes import PriceRequest
from launcher.providers.aws.launch import is_spot, names_groups, needs_key
from launcher.providers.aws.names import (
    default_group_name,
    default_key_name,
    head_role_name,
    profile_name,
)
from launcher.providers.spec import (
    ControllerCredentials,
    CredentialFile,
    NodeOffer,
    PlannedResource,
    ProviderSpec,
    extra_keys,
    region_default_warning,
    string_list,
)
from launcher.providers.ssh_sources import is_world, ssh_source_problems

_KNOWN = {
    "type",
    "region",
    "availability_zone",
    "use_internal_ips",
    "cache_stopped_nodes",
    "security_group",
    "key_pair",
    "allow_ssh_from",
    "head_python",
}
# Ray's convention: `memory` is what remains for tasks once the object store takes its share.
_TASK_MEMORY_SHARE = 0.7


@dataclass(frozen=True)
class AwsProviderConfig(ProviderConfig):
    region: str
    availability_zones: tuple[str, ...]
    use_internal_ips: bool
    cache_stopped_nodes: bool
    security_group_name: str | None
    security_group_rules: tuple[Mapping[str, Any], ...]
    key_name: str | None
    allow_ssh_from: tuple[str, ...] = ()


def _node_types(merged: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    types = merged.get("available_node_types")
    if not isinstance(types, Mapping):
        return []
    return [
        (name, t["node_config"])
        for name, t in types.items()
        if isinstance(t, Mapping) and isinstance(t.get("node_config"), Mapping)
    ]


def _settings(config: ClusterConfig) -> AwsProviderConfig:
    provider = config.provider
    assert isinstance(provider, AwsProviderConfig)
    return provider


def group_name(config: ClusterConfig) -> str | None:
    """The launcher's own security group, or None when every node type names its groups."""
    if all(names_groups(t.node_config) for t in config.node_types.values()):
        return None
    return _settings(config).security_group_name or default_group_name(config.cluster_name)


def own_key_name(config: ClusterConfig) -> str | None:
    """The launcher's key pair name, or None when every node type names its own key."""
    if not any(needs_key(t.node_config) for t in config.node_types.values()):
        return None
    provider = _settings(config)
    return provider.key_name or default_key_name(config.cluster_name, provider.region)


def makes_head_role(config: ClusterConfig) -> bool:
    """Whether `up` makes the head's IAM role (the head's node_config names no profile)."""
    return "IamInstanceProfile" not in config.head_type.node_config


def passed_profiles(config: ClusterConfig) -> dict[str, str]:
    """Node type -> the instance profile its node_config names: the head launches such
    workers, so its role must be allowed to pass that profile's role (iam:PassRole)."""
    found: dict[str, str] = {}
    for name, node_type in config.node_types.items():
        given = node_type.node_config.get("IamInstanceProfile")
        profile = profile_name(given) if isinstance(given, Mapping) else None
        if profile is not None:
            found[name] = profile
    return found


class AwsSpec(ProviderSpec):
    type = "aws"
    implementation = "launcher.providers.aws.provider:AwsProvider"
    price_file = "prices.json"
    price_source = "launcher.pricing.aws"
    title = "aws"
    controller_credentials = ControllerCredentials(
        variables=(
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE",
            "AWS_ENDPOINT_URL",
        ),
        prefixes=("AWS_ENDPOINT_URL_",),
        files=(
            CredentialFile("AWS_SHARED_CREDENTIALS_FILE", (".aws/credentials",)),
            CredentialFile("AWS_CONFIG_FILE", (".aws/config",)),
            CredentialFile("AWS_CA_BUNDLE"),
        ),
    )
    install_extra = "aws"
    sdk_module = "boto3"

    def region_label(self, config: ClusterConfig) -> str:
        provider = config.provider
        return provider.region if isinstance(provider, AwsProviderConfig) else ""

    def prepare(self, raw: dict[str, Any]) -> list[Problem]:
        return region_default_warning(raw, "us-west-2")

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        problems: list[Problem] = []
        auth = merged.get("auth")
        own_key = isinstance(auth, Mapping) and isinstance(auth.get("ssh_private_key"), str)
        for name, node_config in _node_types(merged):
            base = ("available_node_types", name, "node_config")
            if "InstanceType" not in node_config and "LaunchTemplate" not in node_config:
                problems.append(
                    Problem(
                        base,
                        "no InstanceType",
                        "set InstanceType (such as m5.large) or a LaunchTemplate",
                        uses=((*base, "InstanceType"),),
                    )
                )
            if own_key and "KeyName" not in node_config and "LaunchTemplate" not in node_config:
                problems.append(
                    Problem(
                        base,
                        "auth.ssh_private_key is set but node_config has no KeyName",
                        "set KeyName to the EC2 key pair of that private key",
                        uses=(("auth", "ssh_private_key"),),
                    )
                )
        provider = merged.get("provider")
        if isinstance(provider, Mapping) and isinstance(provider.get("region"), str):
            region = provider["region"]
            zones = provider.get("availability_zone")
            for zone in string_list(zones) if isinstance(zones, str) else ():
                if not zone.startswith(region):
                    problems.append(
                        Problem(
                            ("provider", "availability_zone"),
                            f"zone {zone} is not in region {region}",
                            f"use zones of {region}, such as {region}a, or change provider.region",
                        )
                    )
        for name, node_config in _node_types(merged):
            if "SubnetIds" in node_config and "SubnetId" in node_config:
                problems.append(
                    Problem(
                        ("available_node_types", name, "node_config", "SubnetId"),
                        "both SubnetId and SubnetIds are set",
                        "keep one: SubnetIds lists subnets to try in order",
                    )
                )
        if isinstance(provider, Mapping):
            problems += ssh_source_problems(provider.get("allow_ssh_from"))
        return problems

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        group = section.get("security_group") or {}
        key_pair = section.get("key_pair") or {}
        return AwsProviderConfig(
            type="aws",
            extra=freeze(extra_keys(section, _KNOWN)),
            region=str(section["region"]),
            availability_zones=string_list(section.get("availability_zone", "")),
            use_internal_ips=bool(section.get("use_internal_ips", False)),
            cache_stopped_nodes=bool(section.get("cache_stopped_nodes", True)),
            security_group_name=group.get("GroupName"),
            security_group_rules=freeze(group.get("IpPermissions", [])),
            key_name=key_pair.get("key_name"),
            allow_ssh_from=string_list(section.get("allow_ssh_from", [])),
            head_python=section.get("head_python"),
        )

    def known_resources(self, node_config: Mapping[str, Any]) -> dict[str, int] | None:
        kind = node_config.get("InstanceType")
        info = load_prices().machine("aws", kind) if isinstance(kind, str) else None
        if info is None:
            return None
        found = {"CPU": info.vcpus, "memory": int(info.memory_gib * _TASK_MEMORY_SHARE * 2**30)}
        if info.gpus:
            found["GPU"] = info.gpus
        return found

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        provider = _settings(config)
        plan = []
        key = own_key_name(config)
        if key is None:
            plan.append(PlannedResource("key pair", "from node_config", "reuse"))
        else:
            plan.append(
                PlannedResource(
                    "key pair",
                    key,
                    "create if missing",
                    f"private key saved to ~/.launcher/keys/{key}.pem (mode 0600)",
                )
            )
        group = group_name(config)
        if group is None:
            plan.append(PlannedResource("security group", "from node_config", "reuse"))
        else:
            extra = len(provider.security_group_rules)
            plan.append(
                PlannedResource(
                    "security group",
                    group,
                    "create if missing",
                    f"{_ssh_sources(provider)}; all traffic between the "
                    "cluster's nodes" + (f"; {extra} extra inbound rule(s)" if extra else ""),
                )
            )
        plan.append(self._head_role(config))
        plan.append(self._subnets(config, provider))
        plan.append(self._images(config))
        return plan

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        provider = _settings(config)
        names: dict[str, str] = {}
        if own_key_name(config) is not None and not provider.key_name:
            names["key pair"] = default_key_name(config.cluster_name, provider.region)
        if group_name(config) is not None and not provider.security_group_name:
            names["security group"] = default_group_name(config.cluster_name)
        if makes_head_role(config):
            names["head IAM role"] = head_role_name(config.cluster_name)
            names["head instance profile"] = head_role_name(config.cluster_name)
        return names

    @staticmethod
    def _head_role(config: ClusterConfig) -> PlannedResource:
        if not makes_head_role(config):
            return PlannedResource("IAM instance profile", "from head node_config", "reuse")
        detail = f"the head may manage only instances tagged launcher-cluster={config.cluster_name}"
        passed = passed_profiles(config)
        if passed:
            named = ", ".join(f"{p} ({t})" for t, p in sorted(passed.items()))
            detail += (
                f"; it may pass the role of instance profile(s) {named} to the workers it "
                "launches (iam:PassRole, each role resolved at `up`)"
            )
        return PlannedResource(
            "IAM role + instance profile",
            head_role_name(config.cluster_name),
            "create if missing",
            detail,
        )

    @staticmethod
    def _subnets(config: ClusterConfig, provider: AwsProviderConfig) -> PlannedResource:
        given = sorted(
            {
                s
                for t in config.node_types.values()
                for s in string_list(t.node_config.get("SubnetIds", []))
                + string_list([t.node_config["SubnetId"]] if "SubnetId" in t.node_config else [])
            }
        )
        if given:
            return PlannedResource("subnets", ", ".join(given), "use")
        zones = ", ".join(provider.availability_zones) or f"all zones of {provider.region}"
        return PlannedResource("subnets", f"default VPC subnets in {zones}", "use")

    @staticmethod
    def _images(config: ClusterConfig) -> PlannedResource:
        images = sorted(
            {str(t.node_config.get("ImageId", "default")) for t in config.node_types.values()}
        )
        notes = []
        if "latest_dlami" in images:
            notes.append("latest_dlami is resolved at `up` to the region's Deep Learning AMI")
        if "default" in images:
            notes.append(
                "default: the newest Canonical Ubuntu 24.04 image of the region, looked up at `up`"
            )
        return PlannedResource("images", ", ".join(images), "use", "; ".join(notes))

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        kind = node_type.node_config.get("InstanceType")
        spot = is_spot(node_type.node_config)
        if not isinstance(kind, str):
            return NodeOffer("instance type from launch template", spot, None)
        info = prices.machine("aws", kind)
        return NodeOffer(kind, spot, info.price if info else None)

    def price_request(self, config: ClusterConfig, prices: PriceTable) -> PriceRequest | None:
        """Every node type's instance type in the cluster's region, at its zones' prices."""
        provider = _settings(config)
        kinds = sorted(
            {
                kind
                for t in config.node_types.values()
                if isinstance(kind := t.node_config.get("InstanceType"), str)
            }
        )
        known = {k: info for k in kinds if (info := prices.machine("aws", k)) is not None}
        return PriceRequest(
            "aws", provider.region, provider.availability_zones, tuple(kinds), known=known
        )


def _ssh_sources(provider: AwsProviderConfig) -> str:
    sources = provider.allow_ssh_from
    if any(is_world(s) for s in sources):
        return f"SSH from every address on the internet ({', '.join(sources)})"
    if sources:
        return f"SSH from {', '.join(sources)} only"
    if provider.use_internal_ips:
        return "SSH from the VPC's address range only"
    return "SSH from your own public address only"
