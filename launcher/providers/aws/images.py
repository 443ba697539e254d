"""The machine image for node types that name none (or `ImageId: latest_dlami`).

Looked up at `up` rather than kept in a table, so it is never stale (checked 2026-11):
- no ImageId: the newest Canonical Ubuntu 24.04 LTS server image (owner 099720109477,
  gp3 root volume) of the instance type's architecture in the region;
- `latest_dlami`: the newest AWS Deep Learning Base OSS Nvidia Driver GPU AMI for Ubuntu
  22.04 (owner amazon), as Ray's `latest_dlami` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.errors import ProviderError
from launcher.providers.aws.clients import AwsClients, boto_errors, error_message
from launcher.providers.aws.launch import LATEST_DLAMI


@dataclass(frozen=True)
class ImageQuery:
    owner: str
    name: str  # a DescribeImages name filter; {arch} is the image architecture
    what: str


UBUNTU = ImageQuery(
    "099720109477",
    "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-{arch}-server-*",
    "Ubuntu 24.04",
)
DLAMI = ImageQuery(
    "amazon",
    "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
    "Deep Learning Base AMI (Ubuntu 22.04)",
)
_UBUNTU_ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def query_for(node_config: Mapping[str, Any]) -> ImageQuery:
    return DLAMI if node_config.get("ImageId") == LATEST_DLAMI else UBUNTU


def architecture(clients: AwsClients, instance_type: str | None) -> str:
    if not instance_type:
        return "x86_64"
    try:
        found = clients.ec2.describe_instance_types(InstanceTypes=[instance_type])
    except boto_errors() as exc:
        raise ProviderError(f"unknown instance type {instance_type}: {error_message(exc)}") from exc
    types = found.get("InstanceTypes") or [{}]
    archs = types[0].get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
    return "arm64" if "x86_64" not in archs and "arm64" in archs else "x86_64"


def newest_image(clients: AwsClients, query: ImageQuery, arch: str, region: str) -> str:
    name = query.name.format(arch=_UBUNTU_ARCH.get(arch, arch))
    try:
        images = clients.ec2.describe_images(
            Owners=[query.owner],
            Filters=[
                {"Name": "name", "Values": [name]},
                {"Name": "architecture", "Values": [arch]},
                {"Name": "state", "Values": ["available"]},
            ],
        )["Images"]
    except boto_errors() as exc:
        raise ProviderError(f"cannot look up {query.what} images: {error_message(exc)}") from exc
    if not images:
        raise ProviderError(
            f"no {query.what} image ({arch}) found in {region}; set node_config.ImageId"
        )
    newest = max(images, key=lambda image: str(image.get("CreationDate", "")))
    return str(newest["ImageId"])
