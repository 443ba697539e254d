"""What the fake GCE offers every project (fakes/gce/server.py): regions and zones with their
loopback address blocks, machine types, accelerator types and public image families."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Region -> zone suffixes. Region number r (from 1) owns 127.17.(8r).0/21; its zone number i
# (from 0) hands out 127.17.(8r+i).y, y from 2 (GCE keeps .0 and .1, the gateway).
REGIONS: dict[str, str] = {
    "us-west1": "abc",
    "us-central1": "abcf",
    "us-east1": "bcd",
    "us-east4": "abc",
    "europe-west4": "abc",
    "asia-east1": "abc",
}


@dataclass(frozen=True)
class Zone:
    name: str
    region: str
    block: int  # the third octet of its addresses

    @property
    def prefix(self) -> str:
        return f"127.17.{self.block}."


def zones() -> dict[str, Zone]:
    out = {}
    for number, (region, suffixes) in enumerate(REGIONS.items(), 1):
        for index, suffix in enumerate(suffixes):
            name = f"{region}-{suffix}"
            out[name] = Zone(name, region, 8 * number + index)
    return out


def region_block(region: str) -> str:
    number = list(REGIONS).index(region) + 1
    return f"127.17.{8 * number}.0/21"


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    accelerator: str | None = None
    accelerator_count: int = 0
    shared_cpu: bool = False


def _table() -> dict[str, MachineType]:
    table: dict[str, MachineType] = {}

    def add(name: str, cpus: int, mb: int, *more: object) -> None:
        table[name] = MachineType(name, cpus, mb, *more)  # type: ignore[arg-type]

    for n in (1, 2, 4, 8, 16, 32, 64, 96):
        add(f"n1-standard-{n}", n, 3840 * n)
        if n > 1:
            add(f"n1-highmem-{n}", n, 6656 * n)
            add(f"n1-highcpu-{n}", n, 921 * n + (n * 6) // 10)
    for n in (2, 4, 8, 16, 32, 48, 64, 80, 96, 128):
        add(f"n2-standard-{n}", n, 4096 * n)
        add(f"n2-highmem-{n}", n, 8192 * n)
        add(f"n2-highcpu-{n}", n, 1024 * n)
    for n in (2, 4, 8, 16, 32):
        add(f"e2-standard-{n}", n, 4096 * n)
        add(f"e2-highmem-{n}", n, 8192 * n)
        add(f"e2-highcpu-{n}", n, 1024 * n)
    add("e2-micro", 2, 1024, None, 0, True)
    add("e2-small", 2, 2048, None, 0, True)
    add("e2-medium", 2, 4096, None, 0, True)
    for g in (1, 2, 4, 8):
        add(f"a2-highgpu-{g}g", 12 * g, 87040 * g, "nvidia-tesla-a100", g)
    for n, gpus in ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8)):
        add(f"g2-standard-{n}", n, 4096 * n, "nvidia-l4", gpus)
    return table


MACHINE_TYPES = _table()
_CUSTOM = re.compile(r"(?:(n1|n2|e2)-)?custom-(\d+)-(\d+)(-ext)?")


def machine_type(name: str) -> MachineType | None:
    """A predefined type, or a custom one (`custom-6-16384`, `n2-custom-4-8192`)."""
    if name in MACHINE_TYPES:
        return MACHINE_TYPES[name]
    custom = _CUSTOM.fullmatch(name)
    if custom and int(custom.group(2)) > 0 and int(custom.group(3)) % 256 == 0:
        return MachineType(name, int(custom.group(2)), int(custom.group(3)))
    return None


ACCELERATORS = {
    "nvidia-tesla-k80": "NVIDIA K80",
    "nvidia-tesla-p100": "NVIDIA P100",
    "nvidia-tesla-v100": "NVIDIA V100",
    "nvidia-tesla-t4": "NVIDIA T4",
    "nvidia-tesla-a100": "NVIDIA A100 40GB",
    "nvidia-l4": "NVIDIA L4",
}

# Public image projects -> their families; each family's image is FAMILY-v20250610.
IMAGE_FAMILIES: dict[str, tuple[str, ...]] = {
    "debian-cloud": ("debian-11", "debian-12"),
    "ubuntu-os-cloud": (
        "ubuntu-1604-lts",
        "ubuntu-2004-lts",
        "ubuntu-2204-lts",
        "ubuntu-2404-lts-amd64",
    ),
    "deeplearning-platform-release": (
        "common-cpu",
        "common-cu113",
        "common-cu121",
        "common-cu123",
        "tf-1-13-cpu",
        "tf-latest-cpu",
        "pytorch-latest-cpu",
        "pytorch-latest-gpu",
    ),
    "ml-images": ("tf-1-12-gpu",),
    "cos-cloud": ("cos-stable",),
}
IMAGE_VERSION = "v20250610"


def image_for(project: str, family: str) -> str | None:
    return f"{family}-{IMAGE_VERSION}" if family in IMAGE_FAMILIES.get(project, ()) else None


def family_of(project: str, image: str) -> str | None:
    family = image.removesuffix(f"-{IMAGE_VERSION}")
    return family if family != image and family in IMAGE_FAMILIES.get(project, ()) else None
