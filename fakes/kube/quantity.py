"""Kubernetes resource quantities ("500m", "2Gi", "1e3", "4") and a pod's requests."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .errors import bad_request

_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|([numkMGTPE]i?|Ki)?)$")

Resources = dict[str, Fraction]


def parse(value: Any) -> Fraction:
    """A quantity as an exact number; ApiError 400 when it is not one."""
    if isinstance(value, int | float):
        return Fraction(value)
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match or (match.group(3) or "") not in _SUFFIXES:
        raise bad_request(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    number = Fraction(match.group(1))
    if match.group(2):
        return number * Fraction(10) ** int(match.group(2)[1:])
    return number * _SUFFIXES[match.group(3) or ""]


def parse_map(values: Mapping[str, Any] | None) -> Resources:
    return {name: parse(value) for name, value in (values or {}).items()}


def show(name: str, value: Fraction) -> str:
    """A quantity as the API prints it: cpu in millicores when fractional, bytes in Ki/Mi/Gi
    when exact, plain integers otherwise."""
    if value.denominator == 1:
        number = int(value)
        if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                unit = int(_SUFFIXES[suffix])
                if number and number % unit == 0:
                    return f"{number // unit}{suffix}"
        return str(number)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    return str(float(value))


def container_requests(container: Mapping[str, Any]) -> Resources:
    """A container's requests, its limits standing in for requests it does not state."""
    resources = container.get("resources") or {}
    requests = parse_map(resources.get("limits"))
    requests.update(parse_map(resources.get("requests")))
    return requests


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What a pod asks of its node: the sum over its containers, or the largest init
    container's request when that is larger (as the scheduler computes it), plus one pod."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] = total.get(name, Fraction(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total.get(name, Fraction(0)), value)
    for name, value in parse_map(spec.get("overhead")).items():
        total[name] = total.get(name, Fraction(0)) + value
    total["pods"] = Fraction(1)
    return total


def add(into: Resources, more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Fraction(0)) + value
