"""Config-time knowledge of the GCE provider. Imports no Google SDK."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.config.frozen import freeze
from launcher.config.model import ClusterConfig, NodeType, ProviderConfig
from launcher.config.problems import Problem, Severity
from launcher.pricing import HourlyPrice, MachineInfo, PriceTable, load_prices
from launcher.pricing.gcp import machine_info
from launcher.pricing.quotes import PriceRequest
from launcher.providers.gcp import names
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
from launcher.providers.ssh_sources import ssh_source_problems

_KNOWN = {
    "type",
    "region",
    "availability_zone",
    "project_id",
    "use_internal_ips",
    "cache_stopped_nodes",
    "gcp_credentials",
    "allow_ssh_from",
    "head_python",
}
_TASK_MEMORY_SHARE = 0.7
# Custom machine types: `custom-CPUS-MEMORY_MB`, optionally with a family prefix or `-ext`.
_CUSTOM = re.compile(r"^(?:[a-z0-9]+-)?custom-(\d+)-(\d+)(?:-ext)?$")


# What GCP names look like: regions `us-west1`, zones `us-west1-a`, project ids (lowercase
# letters, digits and `-`, after a `domain.com:` for a domain-scoped project; the length is
# left to GCP: Ray's examples write a placeholder `todo`).
_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)*[0-9]+$")
_ZONE = re.compile(r"^[a-z]+(?:-[a-z]+)*[0-9]+-[a-z]$")
_PROJECT = re.compile(r"^(?:[a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]*[a-z0-9]$")


def _check_names(provider: Mapping[str, Any]) -> list[Problem]:
    """provider.region, availability_zone and project_id as GCP writes them (they go into
    API paths: `../../etc` must never get there)."""
    problems = []
    region = provider.get("region")
    if isinstance(region, str) and not _REGION.match(region):
        problems.append(
            Problem(
                ("provider", "region"),
                f"{region!r} is not a GCP region",
                "write a region such as us-west1",
            )
        )
    zones = provider.get("availability_zone")
    for zone in (z.strip() for z in zones.split(",")) if isinstance(zones, str) else ():
        if zone and not _ZONE.match(zone):
            problems.append(
                Problem(
                    ("provider", "availability_zone"),
                    f"{zone!r} is not a GCP zone",
                    "write zones such as us-west1-a, comma-separated",
                )
            )
    project = provider.get("project_id")
    if isinstance(project, str) and project and not _PROJECT.match(project):
        problems.append(
            Problem(
                ("provider", "project_id"),
                f"{project!r} is not a GCP project id",
                "write the project's id (lowercase letters, digits and -), "
                "as `gcloud projects list` shows it",
            )
        )
    return problems


@dataclass(frozen=True)
class GcpProviderConfig(ProviderConfig):
    region: str
    availability_zone: str
    project_id: str | None
    use_internal_ips: bool
    cache_stopped_nodes: bool
    credentials_type: str | None
    credentials: str | None
    allow_ssh_from: tuple[str, ...] = ()


def _basename(value: object) -> str | None:
    return value.rsplit("/", 1)[-1] if isinstance(value, str) and value else None


def is_spot(node_config: Mapping[str, Any]) -> bool:
    scheduling = node_config.get("scheduling")
    entries = scheduling if isinstance(scheduling, list | tuple) else [scheduling]
    return any(
        isinstance(e, Mapping)
        and (e.get("preemptible") is True or e.get("provisioningModel") == "SPOT")
        for e in entries
    )


def accelerators(node_config: Mapping[str, Any]) -> list[tuple[str, int]]:
    found = []
    for item in node_config.get("guestAccelerators") or ():
        if isinstance(item, Mapping):
            name = _basename(item.get("acceleratorType"))
            if name:
                found.append((name, int(item.get("acceleratorCount", 1))))
    return found


class GcpSpec(ProviderSpec):
    type = "gcp"
    implementation = "launcher.providers.gcp.provider:GcpProvider"
    price_file = "prices.json"
    price_source = "launcher.pricing.gcp"
    title = "gcp"
    controller_credentials = ControllerCredentials(
        variables=("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"),
        prefixes=("CLOUDSDK_API_ENDPOINT_OVERRIDES_",),
        files=(
            CredentialFile(
                "GOOGLE_APPLICATION_CREDENTIALS",
                (".config/gcloud/application_default_credentials.json",),
            ),
        ),
    )
    install_extra = "gcp"
    sdk_module = "googleapiclient"

    def region_label(self, config: ClusterConfig) -> str:
        provider = config.provider
        return provider.region if isinstance(provider, GcpProviderConfig) else ""

    def prepare(self, raw: dict[str, Any]) -> list[Problem]:
        return region_default_warning(raw, "us-west1")

    def complete(self, merged: dict[str, Any]) -> list[Problem]:
        """Older examples write one accelerator as a mapping; GCE wants a list."""
        problems = []
        types = merged.get("available_node_types")
        for name, node_type in types.items() if isinstance(types, dict) else ():
            node_config = node_type.get("node_config") if isinstance(node_type, dict) else None
            if isinstance(node_config, dict) and isinstance(
                node_config.get("guestAccelerators"), dict
            ):
                node_config["guestAccelerators"] = [node_config["guestAccelerators"]]
                problems.append(
                    Problem(
                        ("available_node_types", name, "node_config", "guestAccelerators"),
                        "one accelerator written as a mapping; read as a list of one",
                        "write it as a list item (`- acceleratorType: ...`)",
                        severity=Severity.WARNING,
                    )
                )
        return problems

    def check(self, merged: Mapping[str, Any]) -> list[Problem]:
        provider = merged.get("provider")
        if not isinstance(provider, Mapping):
            return []
        problems = _check_names(provider)
        problems += ssh_source_problems(provider.get("allow_ssh_from"))
        region, zones = provider.get("region"), provider.get("availability_zone")
        if problems or not (isinstance(region, str) and isinstance(zones, str)):
            return problems
        return [
            Problem(
                ("provider", "availability_zone"),
                f"zone {zone} is not in region {region}",
                f"use a zone of {region}, such as {region}-a, or change provider.region",
            )
            for zone in (z.strip() for z in zones.split(","))
            if zone and not zone.startswith(region + "-")
        ]

    def build_provider(self, section: Mapping[str, Any]) -> ProviderConfig:
        region = str(section["region"])
        credentials = section.get("gcp_credentials") or {}
        return GcpProviderConfig(
            type="gcp",
            extra=freeze(extra_keys(section, _KNOWN)),
            region=region,
            availability_zone=str(section.get("availability_zone") or f"{region}-a"),
            project_id=section.get("project_id"),
            use_internal_ips=bool(section.get("use_internal_ips", False)),
            cache_stopped_nodes=bool(section.get("cache_stopped_nodes", False)),
            credentials_type=credentials.get("type"),
            credentials=credentials.get("credentials"),
            allow_ssh_from=string_list(section.get("allow_ssh_from", [])),
            head_python=section.get("head_python"),
        )

    def known_resources(self, node_config: Mapping[str, Any]) -> dict[str, int] | None:
        machine = _basename(node_config.get("machineType")) or ""
        info = load_prices().machine("gcp", machine)
        custom = _CUSTOM.match(machine)
        if info is not None:
            cpus, memory_gib, gpus = info.vcpus, info.memory_gib, info.gpus
        elif custom:
            cpus, memory_gib, gpus = int(custom.group(1)), int(custom.group(2)) / 1024, 0
        else:
            return None
        found = {"CPU": cpus, "memory": int(memory_gib * _TASK_MEMORY_SHARE * 2**30)}
        gpus += sum(count for _, count in accelerators(node_config))
        if gpus:
            found["GPU"] = gpus
        return found

    def bootstrap_plan(self, config: ClusterConfig) -> list[PlannedResource]:
        provider = config.provider
        assert isinstance(provider, GcpProviderConfig)
        project = provider.project_id or "the project of your credentials"
        cluster = config.cluster_name
        ssh_from = ", ".join(provider.allow_ssh_from) or (
            "the network's own address ranges"
            if provider.use_internal_ips
            else "your public address"
        )
        key = config.auth.ssh_private_key or str(names.key_file(cluster))
        planned = [
            PlannedResource("project", project, "use", f"zones {provider.availability_zone}"),
            PlannedResource(
                "SSH key",
                key,
                "use" if config.auth.ssh_private_key else "create if missing",
                f"in each instance's ssh-keys metadata for {config.auth.ssh_user or 'ubuntu'}",
            ),
            PlannedResource(
                "firewall rule",
                names.ssh_rule(cluster),
                "create or update",
                f"SSH from {ssh_from} to network tag {names.network_tag(cluster)}",
            ),
            PlannedResource(
                "firewall rule",
                names.internal_rule(cluster),
                "create or update",
                f"all traffic between the nodes tagged {names.network_tag(cluster)}",
            ),
        ]
        if not config.head_type.node_config.get("serviceAccounts"):
            planned.append(
                PlannedResource(
                    "service account",
                    f"{names.account_id(cluster)} (the head's)",
                    "create if missing",
                    "roles/compute.instanceAdmin.v1 on the project for instances and disks "
                    f"named {names.instance_prefix(cluster)}-* only (an IAM condition), "
                    "roles/compute.imageUser",
                )
            )
        return planned

    def derived_names(self, config: ClusterConfig) -> dict[str, str]:
        """The names `up` makes: not the account when the head's node_config names its own,
        nor the key file when auth.ssh_private_key names one."""
        made = names.derived_names(config.cluster_name)
        if config.head_type.node_config.get("serviceAccounts"):
            made.pop("head service account")
        if config.auth.ssh_private_key:
            made.pop("SSH key file")
        return made

    def node_offer(
        self, config: ClusterConfig, node_type: NodeType, prices: PriceTable
    ) -> NodeOffer:
        node_config = node_type.node_config
        spot = is_spot(node_config)
        machine = _basename(node_config.get("machineType"))
        if machine is None:
            tpu = node_config.get("acceleratorType")
            return NodeOffer(f"TPU {tpu}" if tpu else "unknown machine", spot, None)
        info = prices.machine("gcp", machine)
        price: HourlyPrice | None = info.price if info else None
        parts = [machine]
        for name, count in accelerators(node_config):
            parts.append(f"{count} x {name}")
            extra = prices.accelerator("gcp", name)
            price = None if price is None or extra is None else price + extra.times(count)
        return NodeOffer(" + ".join(parts), spot, price)

    def price_request(self, config: ClusterConfig, prices: PriceTable) -> PriceRequest | None:
        """Every node type's machine type and GPUs in the cluster's region (GCE's prices are
        the region's, the same in each of its zones). The sizes are the table's rows, else
        those a machine type's name gives (n2-standard-32: 32 vCPUs, 128 GiB)."""
        provider = config.provider
        assert isinstance(provider, GcpProviderConfig)
        machines: set[str] = set()
        gpus: set[str] = set()
        for node_type in config.node_types.values():
            machine = _basename(node_type.node_config.get("machineType"))
            if machine:
                machines.add(machine)
            gpus.update(name for name, _ in accelerators(node_type.node_config))
        known: dict[str, MachineInfo] = {}
        for machine in machines:
            info = prices.machine("gcp", machine) or machine_info(machine)
            if info is not None:
                known[machine] = info
        zones = tuple(z.strip() for z in provider.availability_zone.split(",") if z.strip())
        return PriceRequest(
            "gcp",
            provider.region,
            zones,
            tuple(sorted(machines)),
            tuple(sorted(gpus)),
            provider_config=provider,
            known=known,
        )
