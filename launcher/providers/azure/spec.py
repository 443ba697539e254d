"""Config-time knowledge of the Azure provider. Imports no Azure SDK."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem, Severity, YamlPath, did_you_mean
from launcher.pricing import HourlyPrice, MachineInfo, PriceTable, load_prices, static_label
from launcher.pricing.quotes import PriceRequest
from launcher.providers.azure import names
from launcher.providers.azure.model import (
    DEFAULT_SUBNET,
    LAUNCHER_SET_PARAMETERS,
    AzureProviderConfig,
    custom_image,
    image_reference,
    is_spot,
    max_price,
    own_security_group,
    own_subnet,
    vm_size,
)
from launcher.providers.spec import (
    ControllerCredentials,
    CredentialFile,
    NodeOffer,
    PlannedResource,
    ProviderSpec,
    extra_keys,
    string_list,
)
from launcher.providers.ssh_sources import is_world, ssh_source_problems

_KNOWN = {
    "type",
    "location",
    "resource_group",
    "subscription_id",
    "availability_zone",
    "cache_stopped_nodes",
    "use_internal_ips",
    "use_external_head_ip",
    "msi_name",
    "msi_resource_group",
    "unique_id",
    "subnet_mask",
    "allow_ssh_from",
    "head_python",
}
# The names Azure refuses as a VM's adminUsername (auth.ssh_user here), as its Compute API
# reference lists them ("Disallowed values"), compared without case.
RESERVED_ADMIN_USERS = frozenset(
    {
        *("administrator", "admin", "admin1", "admin2", "adm", "actuser", "aspnet", "backup"),
        *("console", "david", "guest", "john", "owner", "root", "server", "sql", "support"),
        *("support_388945a0", "sys", "test", "test1", "test2", "test3", "user", "user1"),
        *("user2", "user3", "user4", "user5", "1", "123", "a"),
    }
)
_TASK_MEMORY_SHARE = 0.7  # Ray's: what remains for tasks once the object store takes its share
_DEFAULT_LOCATION = "westus2"
_DEFAULT_GROUP = "ray-cluster"

# What Azure names look like. They go into API paths, so nothing else may get there.
_LOCATION = re.compile(r"^[a-z][a-z0-9]*$")
_ZONE = re.compile(r"^[0-9]{1,2}$")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_UNIQUE_ID = re.compile(r"^[A-Za-z0-9_-]{1,24}$")
_SIZE = re.compile(r"^(?:Standard|Basic)_[A-Za-z0-9_-]+$", re.IGNORECASE)
_SEGMENT = r"[A-Za-z0-9_()-][A-Za-z0-9_.()-]*"
_GROUP_PATH = rf"/subscriptions/{_SEGMENT}/resourceGroups/{_SEGMENT}/providers"
_SUBNET_ID = re.compile(
    rf"^{_GROUP_PATH}/Microsoft\.Network/virtualNetworks/{_SEGMENT}/subnets/{_SEGMENT}$",
    re.IGNORECASE,
)
_NSG_ID = re.compile(
    rf"^{_GROUP_PATH}/Microsoft\.Network/networkSecurityGroups/{_SEGMENT}$", re.IGNORECASE
)
_IMAGE_ID = re.compile(
    rf"^(?:{_GROUP_PATH}/Microsoft\.Compute/(?:images|galleries)"
    rf"|/(?:CommunityGalleries|SharedGalleries)/{_SEGMENT})(?:/{_SEGMENT})*$",
    re.IGNORECASE,
)
_CASED = {
    "priority": ("Regular", "Low", "Spot"),
    "evictionPolicy": ("Deallocate", "Delete"),
}


def _provider_section(merged: Mapping[str, Any]) -> Mapping[str, Any]:
    provider = merged.get("provider")
    return provider if isinstance(provider, Mapping) else {}


def _node_types(merged: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    types = merged.get("available_node_types")
    if not isinstance(types, Mapping):
        return []
    return [
        (str(name), t["node_config"])
        for name, t in types.items()
        if isinstance(t, Mapping) and isinstance(t.get("node_config"), Mapping)
    ]


def _zone_problems(value: object, path: YamlPath) -> list[Problem]:
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        return []  # the schema reports a wrong type
    text = str(value).strip()
    if text.lower() in {"", "auto", "none"}:
        return []
    return [
        Problem(
            path,
            f"{zone!r} is not an Azure availability zone",
            "write zones as Azure numbers them, such as 1 or 1,2,3, or auto or none",
        )
        for zone in (z.strip() for z in text.split(","))
        if not _ZONE.match(zone)
    ]


def _check_admin_user(merged: Mapping[str, Any]) -> list[Problem]:
    """auth.ssh_user is each VM's adminUsername: Azure refuses its reserved names."""
    auth = merged.get("auth")
    user = auth.get("ssh_user") if isinstance(auth, Mapping) else None
    if not isinstance(user, str) or user.lower() not in RESERVED_ADMIN_USERS:
        return []
    return [
        Problem(
            ("auth", "ssh_user"),
            f"Azure refuses {user!r} as a VM's admin user (one of its reserved names)",
            "use another name, such as `ssh_user: azureuser`; it gets passwordless sudo",
        )
    ]


def _check_provider(provider: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    location = provider.get("location")
    if isinstance(location, str) and location and not _LOCATION.match(location):
        short = re.sub(r"[^a-z0-9]+", "", location.lower())
        problems.append(
            Problem(
                ("provider", "location"),
                f"{location!r} is not an Azure location name",
                f"write it as Azure's short name, such as {short or 'westus2'} "
                "(`az account list-locations -o table`)",
            )
        )
    problems += _zone_problems(provider.get("availability_zone"), ("provider", "availability_zone"))
    for key in ("resource_group", "msi_resource_group"):
        group = provider.get(key)
        if isinstance(group, str) and group and not names.AZURE_GROUP.valid(group):
            problems.append(
                Problem(
                    ("provider", key),
                    f"{group!r} is not a valid resource group name",
                    "use 1-90 letters, digits, `_`, `-`, `.`, `(` or `)`, not ending in `.`",
                )
            )
    msi = provider.get("msi_name")
    if isinstance(msi, str) and msi and not (len(msi) >= 3 and names.AZURE_IDENTITY.valid(msi)):
        problems.append(
            Problem(
                ("provider", "msi_name"),
                f"{msi!r} is not a valid managed identity name",
                "use 3-128 letters, digits, `-` or `_`, beginning with a letter or digit",
            )
        )
    unique = provider.get("unique_id")
    if (
        isinstance(unique, str | int)
        and not isinstance(unique, bool)
        and not _UNIQUE_ID.match(str(unique))
    ):
        problems.append(
            Problem(
                ("provider", "unique_id"),
                f"{unique!r} cannot be part of Azure resource names",
                "use 1-24 letters, digits, `-` or `_`, such as RAY1",
            )
        )
    subscription = provider.get("subscription_id")
    if isinstance(subscription, str) and subscription and not _GUID.match(subscription):
        problems.append(
            Problem(
                ("provider", "subscription_id"),
                f"{subscription!r} is not a subscription id",
                "write the subscription's GUID, as `az account list -o table` shows it",
            )
        )
    mask = provider.get("subnet_mask")
    if isinstance(mask, str):
        problems += _subnet_mask_problems(mask)
    problems += ssh_source_problems(provider.get("allow_ssh_from"))
    return problems


def _subnet_mask_problems(mask: str) -> list[Problem]:
    path = ("provider", "subnet_mask")
    try:
        network = ipaddress.ip_network(mask.strip(), strict=False)
    except ValueError:
        return [
            Problem(
                path, f"{mask!r} is not an address range (CIDR)", "write one such as 10.0.0.0/16"
            )
        ]
    if network.version != 4 or not 8 <= network.prefixlen <= 29:
        return [
            Problem(
                path,
                f"{mask} is not an IPv4 range of /8 to /29",
                "write an IPv4 range such as 10.0.0.0/16",
            )
        ]
    if str(network) != mask.strip():
        return [Problem(path, f"{mask} has host bits set", f"write the range as {network}")]
    return []


def _check_node_config(name: str, node_config: Mapping[str, Any], known: set[str]) -> list[Problem]:
    base: YamlPath = ("available_node_types", name, "node_config")
    arm_path: YamlPath = (*base, "azure_arm_parameters")
    params = node_config.get("azure_arm_parameters")
    if params is None:
        return [
            Problem(
                base,
                "no azure_arm_parameters",
                "set azure_arm_parameters with a vmSize and an image, such as "
                "`vmSize: Standard_D2s_v3`",
            )
        ]
    if not isinstance(params, Mapping):
        return []  # the schema reports it
    problems: list[Problem] = []
    size = params.get("vmSize")
    if size is None:
        problems.append(
            Problem(arm_path, "no vmSize", "set vmSize, such as `vmSize: Standard_D2s_v3`")
        )
    elif isinstance(size, str) and size and not _SIZE.match(size):
        problems.append(
            Problem(
                (*arm_path, "vmSize"),
                f"{size!r} is not an Azure VM size",
                "write a size as Azure names it, such as Standard_D2s_v3",
            )
        )
    problems += _image_problems(params, arm_path, node_config)
    problems += _zone_problems(params.get("availability_zone"), (*arm_path, "availability_zone"))
    for key, pattern, example in (
        (
            "subnet",
            _SUBNET_ID,
            "/subscriptions/SUB/resourceGroups/GROUP/providers/"
            "Microsoft.Network/virtualNetworks/VNET/subnets/NAME",
        ),
        (
            "networkSecurityGroup",
            _NSG_ID,
            "/subscriptions/SUB/resourceGroups/GROUP/providers/"
            "Microsoft.Network/networkSecurityGroups/NAME",
        ),
    ):
        value = params.get(key)
        if isinstance(value, str) and value and not _resource_id_ok(value, pattern):
            problems.append(
                Problem(
                    (*arm_path, key),
                    f"{value!r} is not a {key} resource id",
                    f"write its resource id, {example}",
                )
            )
    problems += _spot_problems(params, arm_path, node_config)
    for key in params:
        if key in known:
            continue
        if key in LAUNCHER_SET_PARAMETERS:
            problems.append(
                Problem(
                    (*arm_path, str(key)),
                    "the launcher sets this itself; the value here is not used",
                    LAUNCHER_SET_PARAMETERS[key],
                    severity=Severity.WARNING,
                )
            )
            continue
        guess = did_you_mean(str(key), sorted(known))
        problems.append(
            Problem(
                (*arm_path, str(key)),
                f"{key} is not a parameter the launcher knows; passed on as is",
                f"did you mean `{guess}`?" if guess else "check the spelling",
                severity=Severity.WARNING,
            )
        )
    return problems


def _resource_id_ok(value: str, pattern: re.Pattern[str]) -> bool:
    segments = value.split("/")[1:]
    return bool(pattern.match(value)) and not any(s in {"", ".", ".."} for s in segments)


def _image_problems(
    params: Mapping[str, Any], arm_path: YamlPath, node_config: Mapping[str, Any]
) -> list[Problem]:
    image_id = params.get("imageId")
    marketplace = [k for k in ("imagePublisher", "imageOffer", "imageSku") if k in params]
    if image_id is not None and marketplace:
        return [
            Problem(
                (*arm_path, "imageId"),
                f"both imageId and {', '.join(marketplace)} are set",
                "keep one: imageId for a custom image, or imagePublisher/imageOffer/imageSku",
            )
        ]
    if isinstance(image_id, str) and image_id:
        if _resource_id_ok(image_id, _IMAGE_ID):
            return []
        return [
            Problem(
                (*arm_path, "imageId"),
                f"{image_id!r} is not an image resource id",
                "write it as /subscriptions/SUB/resourceGroups/GROUP/providers/"
                "Microsoft.Compute/images/NAME (or a gallery image's id)",
            )
        ]
    if image_id is None and image_reference(node_config) is None:
        missing = [k for k in ("imagePublisher", "imageOffer", "imageSku") if k not in params]
        if missing:
            return [
                Problem(
                    arm_path,
                    f"no image: {', '.join(missing)} not set",
                    "set imagePublisher, imageOffer and imageSku (such as microsoft-dsvm, "
                    "ubuntu-2204, 2204-gen2), or imageId",
                )
            ]
    return []


def _spot_problems(
    params: Mapping[str, Any], arm_path: YamlPath, node_config: Mapping[str, Any]
) -> list[Problem]:
    problems: list[Problem] = []
    spot = is_spot(node_config) or str(params.get("priority", "")).lower() == "low"
    cap = max_price(node_config)
    profile = params.get("billingProfile")
    if isinstance(profile, Mapping) and "maxPrice" in profile and not spot:
        problems.append(
            Problem(
                (*arm_path, "billingProfile", "maxPrice"),
                "maxPrice is set but priority is not Spot",
                "set `priority: Spot`, or remove billingProfile",
            )
        )
    elif cap is not None and cap != -1 and cap <= 0:
        problems.append(
            Problem(
                (*arm_path, "billingProfile", "maxPrice"),
                f"maxPrice {cap:g} is neither -1 nor a price",
                "write -1 (pay up to the on-demand price) or a price above 0 in $/h, such as 0.05",
            )
        )
    if "evictionPolicy" in params and not spot:
        problems.append(
            Problem(
                (*arm_path, "evictionPolicy"),
                "evictionPolicy is set but priority is not Spot",
                "set `priority: Spot`, or remove evictionPolicy",
            )
        )
    return problems


def _settings(config: ClusterConfig) -> AzureProviderConfig:
    provider = config.provider
    assert isinstance(provider, AzureProviderConfig)
    return provider


def _machine(prices: PriceTable, size: str) -> MachineInfo | None:
    """The table's row for a size; Azure compares size names without case."""
    found = prices.machine("azure", size)
    if found is not None:
        return found
    folded = size.casefold()
    rows = prices.machines.get("azure", {})
    return next((info for name, info in rows.items() if name.casefold() == folded), None)


def _default_warning(raw: Mapping[str, Any], key: str, default: str) -> list[Problem]:
    provider = raw.get("provider")
    if isinstance(provider, Mapping) and key not in provider:
        return [
            Problem(
                ("provider",),
                f"no {key} set; using {default}",
                f"set provider.{key} (for example `{key}: {default}`)",
                severity=Severity.WARNING,
            )
        ]
    return []


class AzureSpec(ProviderSpec):
    type = "azure"
    title = "azure"
    implementation = "launcher.providers.azure.provider:AzureProvider"
    install_extra = "azure"
    sdk_module = "azure.mgmt.compute"
    price_file = "prices.json"
    price_source = "launcher.pricing.azure"
    # azure-identity's EnvironmentCredential (a service principal by secret or certificate,
    # or a user by password), the subscription, and another cloud's endpoints.
    controller_credentials = ControllerCredentials(
        variables=(
            "AZURE_TENANT_ID",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_CLIENT_CERTIFICATE_PASSWORD",
            "AZURE_CLIENT_SEND_CERTIFICATE_CHAIN",
            "AZURE_USERNAME",
            "AZURE_PASSWORD",
            "AZURE_SUBSCRIPTION_ID",
            "AZURE_AUTHORITY_HOST",
            "AZURE_RESOURCE_MANAGER_ENDPOINT",
        ),
        files=(
            CredentialFile("AZURE_CLIENT_CERTIFICATE_PATH"),
            CredentialFile("REQUESTS_CA_BUNDLE"),
        ),
    )

    def region_label(self, config: ClusterConfig) -> str:
        provider = config.provider
        return provider.location if isinstance(provider, AzureProviderConfig) else ""

    def prepare(self, raw: dict[str, Any]) -> list[Problem]:
        return _default_warning(raw, "location", _DEFAULT_LOCATION) + _default_warning(
            raw, "resource_group", _DEFAULT_GROUP
        )

    def complete(self, merged: dict[str, Any]) -> list[Problem]:
        """`priority: spot` and `evictionPolicy: delete` as Azure writes them."""
        problems = []
        for name, node_config in _node_types(merged):
            params = node_config.get("azure_arm_parameters")
            if not isinstance(params, dict):
                continue
            for key, allowed in _CASED.items():
                value = params.get(key)
                cased = next(
                    (a for a in allowed if isinstance(value, str) and a.lower() == value.lower()),
                    None,
                )
                if cased is not None and cased != value:
                    params[key] = cased
                    problems.append(
                        Problem(
                            (
                                "available_node_types",
                                name,
                                "node_config",
                                "azure_arm_parameters",
                                key,
                            ),
                            f"{value!r} read as {cased!r}",
                            f"write it as Azure does, `{key}: {cased}`",
                            severity=Severity.WARNING,
                        )
                    )
        return problems

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        problems = _check_provider(_provider_section(merged)) + _check_admin_user(merged)
        params = self._arm_schema().get("properties", {})
        known = set(params)
        for name, node_config in _node_types(merged):
            problems += _check_node_config(name, node_config, known)
        return problems

    def _arm_schema(self) -> Mapping[str, Any]:
        from launcher.config.schema import load_schema

        node_config = load_schema(self.schema_name)["definitions"]["node_config"]
        arm: Mapping[str, Any] = node_config["properties"]["azure_arm_parameters"]
        return arm

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        unique = section.get("unique_id")
        zone = section.get("availability_zone")
        return AzureProviderConfig(
            type="azure",
            extra=freeze(extra_keys(section, _KNOWN)),
            head_python=section.get("head_python"),
            location=str(section["location"]),
            resource_group=str(section["resource_group"]),
            subscription_id=section.get("subscription_id") or None,
            availability_zone="" if zone is None else str(zone).strip(),
            cache_stopped_nodes=bool(section.get("cache_stopped_nodes", True)),
            use_internal_ips=bool(section.get("use_internal_ips", False)),
            use_external_head_ip=bool(section.get("use_external_head_ip", False)),
            msi_name=section.get("msi_name") or None,
            msi_resource_group=section.get("msi_resource_group") or None,
            unique_id=None if unique is None or unique == "" else str(unique),
            subnet_mask=str(section.get("subnet_mask") or DEFAULT_SUBNET).strip(),
            allow_ssh_from=string_list(section.get("allow_ssh_from", [])),
        )

    def known_resources(self, node_config: Mapping[str, Any]) -> dict[str, int] | None:
        size = vm_size(node_config)
        info = _machine(load_prices(), size) if size else None
        if info is None:
            return None
        found = {"CPU": info.vcpus, "memory": int(info.memory_gib * _TASK_MEMORY_SHARE * 2**30)}
        if info.gpus:
            found["GPU"] = info.gpus
        return found

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        provider = _settings(config)
        cluster, unique = config.cluster_name, provider.unique_id
        group = provider.resource_group
        where = provider.location + (
            f", subscription {provider.subscription_id}"
            if provider.subscription_id
            else ", the subscription of your credentials"
        )
        own_subnets = sorted(
            {s for t in config.node_types.values() if (s := own_subnet(t.node_config))}
        )
        own_groups = sorted(
            {g for t in config.node_types.values() if (g := own_security_group(t.node_config))}
        )
        subnet_note = (
            f"; node types naming a subnet use {', '.join(own_subnets)}" if own_subnets else ""
        )
        nsg_note = f"; node types naming one use {', '.join(own_groups)}" if own_groups else ""
        planned = [
            PlannedResource("resource group", group, "create if missing", f"in {where}"),
            PlannedResource(
                "virtual network",
                names.vnet(cluster, unique),
                "create if missing",
                f"address range {provider.subnet_mask}",
            ),
            PlannedResource(
                "subnet",
                names.subnet(cluster, unique),
                "create if missing",
                f"{provider.subnet_mask} in {names.vnet(cluster, unique)}{subnet_note}",
            ),
            PlannedResource(
                "network security group",
                names.security_group(cluster, unique),
                "create or update",
                f"{_ssh_sources(provider)}; all traffic within the virtual network{nsg_note}",
            ),
            self._identity(config, provider),
            self._key(config),
            PlannedResource(
                "virtual machines",
                f"{names.vm_prefix(cluster)}-h-*, {names.vm_prefix(cluster)}-w-*",
                "create",
                f"each with a network interface and an OS disk; {_public_ips(provider)}",
            ),
            self._images(config),
        ]
        return planned

    @staticmethod
    def _identity(config: ClusterConfig, provider: AzureProviderConfig) -> PlannedResource:
        if provider.msi_name:
            home = provider.msi_resource_group or provider.resource_group
            return PlannedResource(
                "managed identity",
                provider.msi_name,
                "use",
                f"yours, for the head, in resource group {home}; it needs rights to manage "
                f"VMs and networking in {provider.resource_group}",
            )
        return PlannedResource(
            "managed identity",
            names.identity(config.cluster_name, provider.unique_id),
            "create if missing",
            f"the head's; Contributor on resource group {provider.resource_group} only, "
            "not the subscription",
        )

    @staticmethod
    def _key(config: ClusterConfig) -> PlannedResource:
        user = config.auth.ssh_user or "ubuntu"
        if config.auth.ssh_private_key:
            return PlannedResource(
                "SSH key", config.auth.ssh_private_key, "use", f"its public half for {user}"
            )
        return PlannedResource(
            "SSH key",
            str(names.key_file(config.cluster_name)),
            "create if missing",
            f"its public half in each VM's authorized keys for {user}",
        )

    @staticmethod
    def _images(config: ClusterConfig) -> PlannedResource:
        shown = set()
        for node_type in config.node_types.values():
            image = custom_image(node_type.node_config)
            ref = image_reference(node_type.node_config)
            if image:
                shown.add(image)
            elif ref:
                shown.add(":".join((ref["publisher"], ref["offer"], ref["sku"], ref["version"])))
        return PlannedResource("images", ", ".join(sorted(shown)) or "none named", "use")

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        """The names `up` makes: not the key file when auth.ssh_private_key names one, nor
        the head's identity when msi_name names the user's."""
        provider = _settings(config)
        made = names.derived_names(config.cluster_name, provider.unique_id)
        if config.auth.ssh_private_key:
            made.pop("SSH key file")
        if provider.msi_name:
            made.pop("head managed identity")
        return made

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        node_config = node_type.node_config
        spot = is_spot(node_config)
        size = vm_size(node_config)
        if size is None:
            return NodeOffer("no vmSize", spot, None)
        info = _machine(prices, size)
        description, price = size, None
        if info is not None:
            description = info.name
            if info.gpus:
                description += f" ({info.gpus} x {info.gpu_model})"
            # A live price is the location's own; else the table's row for it, if any.
            price = info.price if info.price.live else self._regional(config, info) or info.price
        cap = max_price(node_config)
        if spot and cap is not None and cap > 0:
            description += f", max price ${cap:g}/h"
            if price is not None and (price.spot is None or cap < price.spot):
                price = dataclasses.replace(
                    price, spot=cap, spot_source="the max price in node_config"
                )
        return NodeOffer(description, spot, price)

    def _regional(self, config: ClusterConfig, info: MachineInfo) -> HourlyPrice | None:
        """The location's own list price, where the table has one."""
        rows = self.price_rows() or {}
        regions = rows.get("regions")
        location = _settings(config).location
        row = regions.get(location, {}).get(info.name) if isinstance(regions, Mapping) else None
        if not isinstance(row, Mapping):
            return None
        label = static_label(str(rows["as_of"]), location)
        spot = row.get("spot")
        return HourlyPrice(float(row["on_demand"]), spot, label, label if spot is not None else "")

    def price_request(self, config: ClusterConfig, prices: PriceTable) -> PriceRequest | None:
        """Every node type's VM size (as the table names it) in the cluster's location."""
        sizes = {size for t in config.node_types.values() if (size := vm_size(t.node_config))}
        known = {info.name: info for s in sizes if (info := _machine(prices, s)) is not None}
        names = sorted({*known, *(s for s in sizes if _machine(prices, s) is None)})
        location = _settings(config).location
        return PriceRequest("azure", location, (), tuple(names), known=known)


def _ssh_sources(provider: AzureProviderConfig) -> str:
    sources = provider.allow_ssh_from
    if any(is_world(s) for s in sources):
        return f"SSH from every address on the internet ({', '.join(sources)})"
    if sources:
        return f"SSH from {', '.join(sources)} only"
    if provider.use_internal_ips:
        return f"SSH from the virtual network's range ({provider.subnet_mask}) only"
    return "SSH from your own public address only"


def _public_ips(provider: AzureProviderConfig) -> str:
    if not provider.use_internal_ips:
        return "a public IP address on each"
    if provider.use_external_head_ip:
        return "a public IP address on the head only"
    return "no public IP addresses"
