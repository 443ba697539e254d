"""`launcher check` for EC2: boto3's credential chain, `DryRun` launches of the config's node
types, and the vCPU quotas (Service Quotas) their instance families take. Imports boto3
only when probing; the quota mapping is pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.check.decide import needs_by_type, node_counts, permission_finding, quota_findings
from launcher.check.model import Aspect, Finding, QuotaReading, Status
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError
from launcher.providers.aws.clients import AwsClients, boto_errors, error_code, error_message
from launcher.providers.aws.launch import is_spot, subnet_ids
from launcher.providers.aws.spec import AwsProviderConfig

# Instance families (the letters an instance type starts with) -> the vCPU quotas of their
# on-demand and spot instances (Service Quotas codes of service `ec2`, as its
# ListServiceQuotas names them: "Running On-Demand P instances", "All P Spot Instance
# Requests"; checked against published listings of those names, 2026-12).
STANDARD = frozenset("acdhimrtz")
_QUOTAS: Mapping[str, tuple[str, str | None, str]] = {
    **dict.fromkeys(STANDARD, ("L-1216C47A", "L-34B43A08", "standard (A, C, D, H, I, M, R, T, Z)")),
    "g": ("L-DB2E81BA", "L-3819A6DF", "G and VT"),
    "vt": ("L-DB2E81BA", "L-3819A6DF", "G and VT"),
    "p": ("L-417A185B", "L-7212CCBC", "P"),
    "f": ("L-74FC7D96", "L-88CF9481", "F"),
    "x": ("L-7295265B", "L-E3A00192", "X"),
    "inf": ("L-1945791B", "L-B5D1601B", "Inf"),
    "trn": ("L-2C3B7624", "L-6B0D517C", "Trn"),
    "dl": ("L-6E869C2A", "L-85EED4F7", "DL"),
    "hpc": ("L-F7808C92", None, "HPC"),  # no spot market
}
QUOTA_FIX = "ask for more in the Service Quotas console (EC2) for this region"
POLICY_FIX = "allow ec2:RunInstances and ec2:DescribeInstances in the credentials' IAM policy"


@dataclass(frozen=True)
class QuotaKey:
    code: str
    name: str  # as shown: "us-west-2 on-demand standard (...) vCPUs"


def quota_key(instance_type: str, spot: bool, region: str) -> QuotaKey | None:
    """The vCPU quota that instances of `instance_type` count against, if known."""
    found = re.match(r"[a-z]+", instance_type)
    entry = _QUOTAS.get(found.group(0)) if found else None
    if entry is None:
        return None
    on_demand, spot_code, family = entry
    code = spot_code if spot else on_demand
    if code is None:
        return None
    market = "spot" if spot else "on-demand"
    return QuotaKey(code, f"{region} {market} {family} vCPUs")


def probe(config: ClusterConfig, in_depth: bool) -> list[Finding]:
    settings = config.provider
    assert isinstance(settings, AwsProviderConfig)
    clients = AwsClients(settings.region)
    identity = _credentials(clients, settings.region)
    if identity.status is not Status.OK:
        return [identity]
    findings = [identity, _launches(clients, config)]
    findings += _quotas(clients, config, in_depth)
    return findings


def _credentials(clients: AwsClients, region: str) -> Finding:
    try:
        found = _session(region).get_credentials()
        if found is None:
            return Finding(
                Aspect.CREDENTIALS,
                Status.PROBLEM,
                "no AWS credentials found",
                "give boto3 credentials: `aws configure`, AWS_PROFILE, or AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY",
            )
        who = clients.sts.get_caller_identity()
    except boto_errors() as exc:
        return Finding(Aspect.CREDENTIALS, Status.PROBLEM, error_message(exc))
    except LauncherError as exc:
        return Finding(Aspect.CREDENTIALS, Status.PROBLEM, str(exc))
    method = getattr(found, "method", "") or "boto3's chain"
    return Finding(
        Aspect.CREDENTIALS,
        Status.OK,
        f"account {who.get('Account')} as {who.get('Arn')} (from {method}), region {region}",
    )


def _session(region: str) -> Any:
    import boto3

    return boto3.session.Session(region_name=region)


def _image(clients: AwsClients, node_config: Mapping[str, Any], region: str) -> str:
    from launcher.providers.aws import images

    given = node_config.get("ImageId")
    if isinstance(given, str) and given.startswith("ami-"):
        return given
    kind = node_config.get("InstanceType")
    arch = images.architecture(clients, kind if isinstance(kind, str) else None)
    return images.newest_image(clients, images.query_for(node_config), arch, region)


def _launches(clients: AwsClients, config: ClusterConfig) -> Finding:
    """DryRun DescribeInstances, and a DryRun RunInstances per node type: DryRunOperation
    means allowed, UnauthorizedOperation not; any other answer is what `up` would meet."""
    settings = config.provider
    assert isinstance(settings, AwsProviderConfig)
    checked, denied, failed = ["ec2:DescribeInstances"], [], []
    calls: list[tuple[str, Any]] = [
        ("ec2:DescribeInstances", lambda: clients.ec2.describe_instances(DryRun=True))
    ]
    for name in node_counts(config):
        node_config = config.node_types[name].node_config
        request = _run_request(clients, node_config, settings.region)
        what = f"ec2:RunInstances ({name})"
        checked.append(what)
        calls.append((what, lambda request=request: clients.ec2.run_instances(**request)))
    for what, call in calls:
        try:
            call()
        except boto_errors() as exc:
            code = error_code(exc)
            if code == "DryRunOperation":
                continue
            if code in ("UnauthorizedOperation", "AccessDenied", "AuthFailure"):
                denied.append(what)
            else:
                failed.append(f"{what}: {error_message(exc)}")
        except LauncherError as exc:
            failed.append(f"{what}: {exc}")
        else:
            failed.append(f"{what}: answered without DryRunOperation")
    if failed:
        return Finding(
            Aspect.PERMISSIONS,
            Status.PROBLEM,
            "; ".join(failed),
            "fix the node_config (or the credentials) so that EC2 accepts the launch",
        )
    return permission_finding(checked, denied, f"DryRun in {settings.region}", POLICY_FIX)


def _run_request(clients: AwsClients, node_config: Mapping[str, Any], region: str) -> Any:
    request: dict[str, Any] = {
        "DryRun": True,
        "MinCount": 1,
        "MaxCount": 1,
        "InstanceType": node_config.get("InstanceType", "m5.large"),
        "ImageId": _image(clients, node_config, region),
    }
    subnets = subnet_ids(node_config)
    if subnets:
        request["SubnetId"] = subnets[0]
    if is_spot(node_config):
        request["InstanceMarketOptions"] = {"MarketType": "spot"}
    return request


def _quotas(clients: AwsClients, config: ClusterConfig, in_depth: bool) -> list[Finding]:
    """The vCPU quotas of the config's node types (all of them: the defaults' without a
    config) and how much of each running instances use."""
    settings = config.provider
    assert isinstance(settings, AwsProviderConfig)
    region = settings.region
    counts = node_counts(config)
    types = {
        name: str(config.node_types[name].node_config.get("InstanceType", "m5.large"))
        for name in counts
    }
    keys = {
        name: quota_key(kind, is_spot(config.node_types[name].node_config), region)
        for name, kind in types.items()
    }
    wanted = {k for k in keys.values() if k is not None}
    if not wanted:
        return []
    try:
        from botocore.config import Config

        quotas = _session(region).client(
            "service-quotas", config=Config(retries={"total_max_attempts": 2})
        )
        vcpus = _vcpus(clients, set(types.values()))
        readings = [
            _reading(quotas, key, _used(clients, key, region))
            for key in sorted(wanted, key=lambda k: k.name)
        ]
    except boto_errors() as exc:
        return [
            Finding(
                Aspect.QUOTA,
                Status.UNKNOWN,
                f"EC2 vCPU quotas in {region} ({error_message(exc)})",
            )
        ]
    per_type = {
        name: (key.name, float(vcpus.get(types[name], 0)))
        for name, key in keys.items()
        if key is not None and vcpus.get(types[name])
    }
    needs = needs_by_type(counts, per_type) if in_depth else []
    return quota_findings(readings, needs)


def _vcpus(clients: AwsClients, instance_types: set[str]) -> dict[str, int]:
    found = clients.ec2.describe_instance_types(InstanceTypes=sorted(instance_types))
    return {
        str(t["InstanceType"]): int(t.get("VCpuInfo", {}).get("DefaultVCpus", 0))
        for t in found.get("InstanceTypes", [])
    }


def _used(clients: AwsClients, key: QuotaKey, region: str) -> float:
    """vCPUs of this account's pending and running instances that count against `key`."""
    pages = clients.ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    instances = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    mine = [
        i
        for i in instances
        if quota_key(str(i["InstanceType"]), i.get("InstanceLifecycle") == "spot", region) == key
    ]
    if not mine:
        return 0.0
    vcpus = _vcpus(clients, {str(i["InstanceType"]) for i in mine})
    return float(sum(vcpus.get(str(i["InstanceType"]), 0) for i in mine))


def _reading(quotas: Any, key: QuotaKey, used: float) -> QuotaReading:
    value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=key.code)["Quota"]["Value"]
    return QuotaReading(key.name, float(value), used, fix=f"{QUOTA_FIX} (quota {key.code})")
