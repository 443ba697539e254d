"""The pure decisions of `launcher check` (launcher/check/decide.py)."""

from __future__ import annotations

from launcher.check.decide import exit_code, overall, quota_findings, summary
from launcher.check.model import Aspect, Finding, ProviderReport, QuotaNeed, QuotaReading, Status


def test_quota_is_ok_warning_or_problem_by_what_the_start_and_max_take() -> None:
    reading = QuotaReading("CPUS in r", limit=10, used=2)
    ok = quota_findings([reading], [QuotaNeed("CPUS in r", "w", 2, 1, 4)])
    assert ok[0].status is Status.OK and "8 of 10 vCPUs left" in ok[0].detail
    warn = quota_findings([reading], [QuotaNeed("CPUS in r", "w", 2, 1, 5)])
    assert warn[0].status is Status.WARNING and "max_workers" in warn[0].fix
    bad = quota_findings([reading], [QuotaNeed("CPUS in r", "w", 4, 3, 3)])
    assert bad[0].status is Status.PROBLEM and "min_workers" in bad[0].fix


def test_exit_code_only_for_the_config_s_provider_and_unknown_is_not_a_failure() -> None:
    problem = Finding(Aspect.CREDENTIALS, Status.PROBLEM, "no credentials", "log in")
    unknown = Finding(Aspect.QUOTA, Status.UNKNOWN, "no quota API")
    assert exit_code([ProviderReport("aws", "aws", False, (problem,))]) == 0
    assert exit_code([ProviderReport("aws", "aws", True, (problem,))]) == 1
    fine = ProviderReport("gcp", "gcp", True, (Finding(Aspect.EXTRA, Status.OK, "x"), unknown))
    assert exit_code([fine]) == 0 and overall(fine.findings) is Status.OK
    assert "not known: no quota API" in summary(fine)
    assert summary(ProviderReport("aws", "aws", True, (problem,))) == "no credentials: log in"
