"""The decisions of `launcher check`, pure: what the readings mean, the one line each
provider gets, and the exit code. No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from launcher import DISTRIBUTION
from launcher.check.model import Aspect, Finding, ProviderReport, QuotaNeed, QuotaReading, Status
from launcher.config.model import ClusterConfig

_ORDER = (Status.PROBLEM, Status.WARNING, Status.UNKNOWN, Status.OK)


def install_command(extra: str | None) -> str:
    """The command that installs a provider's extra (as `up` says it)."""
    return f"pip install '{DISTRIBUTION}[{extra or 'all'}]'"


def node_counts(config: ClusterConfig) -> dict[str, tuple[int, int]]:
    """Per node type, how many nodes of it the cluster has at the least (the head and
    min_workers) and at the most (max_workers, within the cluster's max_workers)."""
    counts: dict[str, tuple[int, int]] = {}
    for name, node_type in config.node_types.items():
        head = 1 if name == config.head_node_type else 0
        most = min(node_type.max_workers, config.max_workers)
        least = min(node_type.min_workers, most)
        if head or most:
            counts[name] = (head + least, head + most)
    return counts


def permission_finding(
    checked: Sequence[str], denied: Sequence[str], where: str, fix: str
) -> Finding:
    """The finding of a permission check: `checked` were asked about, `denied` refused."""
    if not denied:
        return Finding(Aspect.PERMISSIONS, Status.OK, f"allowed: {', '.join(checked)} ({where})")
    return Finding(
        Aspect.PERMISSIONS,
        Status.PROBLEM,
        f"not allowed: {', '.join(denied)} ({where})",
        fix,
    )


def _amount(value: float) -> str:
    return f"{value:g}"


def quota_findings(readings: Iterable[QuotaReading], needs: Iterable[QuotaNeed]) -> list[Finding]:
    """One finding per quota: what is left and, with a config, whether its node types fit:
    a problem when the nodes `up` starts with do not, a warning when max_workers does not."""
    wanted: dict[str, list[QuotaNeed]] = {}
    for need in needs:
        wanted.setdefault(need.quota, []).append(need)
    findings = []
    for reading in readings:
        mine = wanted.get(reading.name, [])
        left = reading.left
        text = f"{reading.name}: {_amount(left)} of {_amount(reading.limit)} {reading.unit} left"
        if not mine:
            findings.append(Finding(Aspect.QUOTA, Status.OK, text))
            continue
        least = sum(n.per_node * n.count_min for n in mine)
        most = sum(n.per_node * n.count_max for n in mine)
        types = ", ".join(sorted({n.node_type for n in mine}))
        text += f"; {types} need {_amount(least)} to start, {_amount(most)} at max_workers"
        raise_it = reading.fix or "ask the cloud for a higher quota"
        if left < least:
            findings.append(
                Finding(
                    Aspect.QUOTA,
                    Status.PROBLEM,
                    text,
                    f"{raise_it}, or lower min_workers of {types}",
                )
            )
        elif left < most:
            findings.append(
                Finding(
                    Aspect.QUOTA,
                    Status.WARNING,
                    text,
                    f"{raise_it}, or lower max_workers of {types} "
                    f"(the cluster stops growing at {_amount(left)} {reading.unit})",
                )
            )
        else:
            findings.append(Finding(Aspect.QUOTA, Status.OK, text))
    return findings


def overall(findings: Iterable[Finding]) -> Status:
    """A provider's status: its worst finding's (unknown quota alone is still OK to use)."""
    seen = {f.status for f in findings}
    for status in _ORDER[:2]:
        if status in seen:
            return status
    return Status.OK


def summary(report: ProviderReport) -> str:
    """The provider's one line: what is wrong and what to do, else what was found."""
    status = overall(report.findings)
    if status is Status.OK:
        parts = [f.detail for f in report.findings if f.status is Status.OK]
        unknown = [f.detail for f in report.findings if f.status is Status.UNKNOWN]
        text = "; ".join(parts) or "ready"
        if unknown:
            text += f" (not known: {'; '.join(unknown)})"
        return text
    worst = [f for f in report.findings if f.status is status]
    return "; ".join(f"{f.detail}: {f.fix}" if f.fix else f.detail for f in worst)


def label(status: Status) -> str:
    return {
        Status.OK: "OK",
        Status.WARNING: "OK, with a limit",
        Status.PROBLEM: "NOT READY",
        Status.UNKNOWN: "UNKNOWN",
    }[status]


def exit_code(reports: Iterable[ProviderReport]) -> int:
    """1 when a provider the config uses is not ready, else 0 (without a config: 0, the
    report is the answer)."""
    return int(any(r.in_config and overall(r.findings) is Status.PROBLEM for r in reports))


def needs_by_type(
    counts: Mapping[str, tuple[int, int]],
    quota_of: Mapping[str, tuple[str, float] | None],
) -> list[QuotaNeed]:
    """The quota needs of the node types, given which quota each takes and how much per
    node (`quota_of[type]`: (quota name, units per node), None for none known)."""
    needs = []
    for name, (least, most) in counts.items():
        found = quota_of.get(name)
        if found is not None:
            needs.append(QuotaNeed(found[0], name, found[1], least, most))
    return needs
