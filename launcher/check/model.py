"""What `launcher check` found, as plain data: findings per provider, quota readings and the
quota a config's node types need."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """How one finding (and, summed up, one provider) stands."""

    OK = "ok"
    WARNING = "warning"  # `up` works, with a limit (e.g. max_workers beyond the quota)
    PROBLEM = "problem"  # `up` would fail
    UNKNOWN = "unknown"  # the API did not say (no quota API, a read refused)


class Aspect(StrEnum):
    EXTRA = "extra"
    CREDENTIALS = "credentials"
    PERMISSIONS = "permissions"
    QUOTA = "quota"


@dataclass(frozen=True)
class Finding:
    """One thing checked: what was found and, when it is not OK, what to do."""

    aspect: Aspect
    status: Status
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "aspect": self.aspect.value,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class QuotaReading:
    """A limit the cloud reports and how much of it is used (`name`: the cloud's own, e.g.
    `CPUS in us-west1`), in `unit`s (vCPUs, pods)."""

    name: str
    limit: float
    used: float
    unit: str = "vCPUs"
    fix: str = ""  # how to raise it

    @property
    def left(self) -> float:
        return max(0.0, self.limit - self.used)


@dataclass(frozen=True)
class QuotaNeed:
    """What `count_min` to `count_max` nodes of `node_type` take of quota `quota`, each
    `per_node` units."""

    quota: str
    node_type: str
    per_node: float
    count_min: int
    count_max: int


@dataclass(frozen=True)
class ProviderReport:
    """Everything checked for one provider; `in_config`: the config being checked uses it."""

    provider: str
    title: str
    in_config: bool
    findings: tuple[Finding, ...]

    def to_json(self, status: Status, summary: str) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "title": self.title,
            "in_config": self.in_config,
            "status": status.value,
            "summary": summary,
            "findings": [f.to_json() for f in self.findings],
        }
