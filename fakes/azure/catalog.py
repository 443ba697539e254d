"""The VM sizes the fake offers (vCPUs, memory, quota family, GPUs) and its locations'
zones. A size not listed is refused (400 InvalidParameter); `AzureServer.add_size` adds one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    name: str
    vcpus: int
    memory_gb: float
    family: str  # the quota family (`standardDSv3Family`)
    gpus: int = 0


def _sizes() -> dict[str, Size]:
    rows = [
        ("Standard_B1s", 1, 1, "standardBSFamily"),
        ("Standard_B1ms", 1, 2, "standardBSFamily"),
        ("Standard_B2s", 2, 4, "standardBSFamily"),
        ("Standard_B2ms", 2, 8, "standardBSFamily"),
        ("Standard_B4ms", 4, 16, "standardBSFamily"),
        ("Standard_DS1_v2", 1, 3.5, "standardDSv2Family"),
        ("Standard_DS2_v2", 2, 7, "standardDSv2Family"),
        ("Standard_DS3_v2", 4, 14, "standardDSv2Family"),
        ("Standard_D2s_v3", 2, 8, "standardDSv3Family"),
        ("Standard_D4s_v3", 4, 16, "standardDSv3Family"),
        ("Standard_D8s_v3", 8, 32, "standardDSv3Family"),
        ("Standard_D16s_v3", 16, 64, "standardDSv3Family"),
        ("Standard_D2s_v5", 2, 8, "standardDSv5Family"),
        ("Standard_D4s_v5", 4, 16, "standardDSv5Family"),
        ("Standard_D8s_v5", 8, 32, "standardDSv5Family"),
        ("Standard_D16s_v5", 16, 64, "standardDSv5Family"),
        ("Standard_D32s_v5", 32, 128, "standardDSv5Family"),
        ("Standard_D2as_v5", 2, 8, "standardDASv5Family"),
        ("Standard_D4as_v5", 4, 16, "standardDASv5Family"),
        ("Standard_D8as_v5", 8, 32, "standardDASv5Family"),
        ("Standard_E2s_v3", 2, 16, "standardESv3Family"),
        ("Standard_E4s_v3", 4, 32, "standardESv3Family"),
        ("Standard_E8s_v3", 8, 64, "standardESv3Family"),
        ("Standard_F2s_v2", 2, 4, "standardFSv2Family"),
        ("Standard_F4s_v2", 4, 8, "standardFSv2Family"),
        ("Standard_F8s_v2", 8, 16, "standardFSv2Family"),
        ("Standard_F16s_v2", 16, 32, "standardFSv2Family"),
    ]
    gpu_rows = [
        ("Standard_NC6s_v3", 6, 112, "standardNCSv3Family", 1),
        ("Standard_NC12s_v3", 12, 224, "standardNCSv3Family", 2),
        ("Standard_NC24s_v3", 24, 448, "standardNCSv3Family", 4),
        ("Standard_NC4as_T4_v3", 4, 28, "standardNCASv3_T4Family", 1),
        ("Standard_NC8as_T4_v3", 8, 56, "standardNCASv3_T4Family", 1),
        ("Standard_NC16as_T4_v3", 16, 110, "standardNCASv3_T4Family", 1),
        ("Standard_NC64as_T4_v3", 64, 440, "standardNCASv3_T4Family", 4),
    ]
    out = {r[0].lower(): Size(r[0], r[1], float(r[2]), r[3]) for r in rows}
    out.update({r[0].lower(): Size(r[0], r[1], float(r[2]), r[3], r[4]) for r in gpu_rows})
    return out


SIZES = _sizes()
ZONES = ("1", "2", "3")
LOCATIONS = ("eastus", "eastus2", "westus2", "westus3", "westeurope", "northeurope", "centralus")
