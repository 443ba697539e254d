"""Puts `launcher check` together: which providers to check, whether each one's extra is
installed, and its probe (imported only once its SDK imports)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from launcher.check.decide import install_command
from launcher.check.model import Aspect, Finding, ProviderReport, Status
from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig
from launcher.providers.registry import SPECS
from launcher.providers.spec import ProviderSpec

# Checked without a config, in this order.
PROVIDERS = ("localhost", "local", "aws", "gcp", "kubernetes", "azure")
# The probe of each cloud: `module`, whose `probe(config, in_depth)` returns findings.
PROBES = {
    "aws": "launcher.check.aws",
    "gcp": "launcher.check.gcp",
    "kubernetes": "launcher.check.kubernetes",
    "azure": "launcher.check.azure",
}
Probe = Callable[[ClusterConfig | None, bool], list[Finding]]


def extra_finding(spec: ProviderSpec) -> Finding:
    """Whether the provider's SDK imports (its extra is installed)."""
    if not spec.sdk_module:
        return Finding(Aspect.EXTRA, Status.OK, "needs no SDK")
    try:
        importlib.import_module(spec.sdk_module)
    except ImportError as exc:
        return Finding(
            Aspect.EXTRA,
            Status.PROBLEM,
            f"{exc.name or spec.sdk_module} is not installed",
            install_command(spec.install_extra),
        )
    return Finding(Aspect.EXTRA, Status.OK, f"{spec.sdk_module} installed")


def check(config: ClusterConfig | None) -> list[ProviderReport]:
    """With a config: its provider, in depth (its node types' quota); without: every one."""
    if config is not None:
        return [check_provider(config.provider.type, config, in_config=True)]
    return [check_provider(kind, None, in_config=False) for kind in PROVIDERS]


def check_provider(kind: str, config: ClusterConfig | None, in_config: bool) -> ProviderReport:
    spec = SPECS[kind]
    findings = [extra_finding(spec)]
    if findings[0].status is Status.OK:
        findings += _probe(kind, config)
    return ProviderReport(kind, spec.title or kind, in_config, tuple(findings))


def _probe(kind: str, config: ClusterConfig | None) -> list[Finding]:
    if kind == "local":
        return _onprem(config)
    module = PROBES.get(kind)
    if module is None:
        return []
    probe: Probe = importlib.import_module(module).probe
    if config is None and kind != "kubernetes":
        # The provider's defaults: what `up` would launch for a config that names no more.
        return probe(default_config(kind), False)
    return probe(config, config is not None)


def default_config(kind: str) -> ClusterConfig:
    return parse_config(
        f"cluster_name: check\nprovider: {{type: {kind}}}\n", f"<{kind} defaults>", Overrides()
    )


def _onprem(config: ClusterConfig | None) -> list[Finding]:
    """On-prem machines are reached over SSH with the config's key, if it names one."""
    key = config.auth.ssh_private_key if config is not None else None
    if key and not Path(key).expanduser().is_file():
        return [
            Finding(
                Aspect.CREDENTIALS,
                Status.PROBLEM,
                f"auth.ssh_private_key {key} is not on this machine",
                "copy the key here or fix the path in the config",
            )
        ]
    return [Finding(Aspect.CREDENTIALS, Status.OK, "machines reached over SSH")]
