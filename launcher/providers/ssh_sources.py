"""`provider.allow_ssh_from`, as every cloud provider takes it: each entry a real network
(CIDR, host bits clear, as a firewall keeps it), and a warning for one open to every address."""

from __future__ import annotations

import ipaddress

from launcher.config.problems import Problem, Severity


def ssh_source_problems(sources: object) -> list[Problem]:
    """Each `allow_ssh_from` entry must be a network (CIDR); one open to every address is
    allowed, with a warning."""
    if not isinstance(sources, list):
        return []  # the schema reports it
    problems = []
    for index, source in enumerate(sources):
        path = ("provider", "allow_ssh_from", index)
        if not isinstance(source, str):
            continue
        try:
            ipaddress.ip_network(source.strip())
        except ValueError as exc:
            problems.append(Problem(path, _cidr_error(source, exc), _cidr_fix(source)))
            continue
        if is_world(source):
            problems.append(
                Problem(
                    path,
                    f"{source} opens SSH to every address on the internet",
                    "name the networks SSH comes from, such as your office's range, or leave "
                    "allow_ssh_from out to allow only this machine's address",
                    severity=Severity.WARNING,
                )
            )
    return problems


def is_world(source: str) -> bool:
    try:
        return ipaddress.ip_network(source.strip(), strict=False).prefixlen == 0
    except ValueError:
        return False


def _cidr_error(source: str, exc: ValueError) -> str:
    if "has host bits set" in str(exc):
        return f"{source} has host bits set"
    return f"{source!r} is not an address range (CIDR)"


def _cidr_fix(source: str) -> str:
    try:
        network = ipaddress.ip_network(source.strip(), strict=False)
    except ValueError:
        return "write an IPv4 or IPv6 range such as 203.0.113.0/24 or 2001:db8::/32"
    return f"write the range as {network}"
