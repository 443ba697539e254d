"""Build the NodeProvider for a config, importing provider code and SDKs only when used."""

from __future__ import annotations

import importlib
from pathlib import Path

from launcher import DISTRIBUTION
from launcher.config.model import ClusterConfig
from launcher.errors import UsageError
from launcher.providers.base import NodeProvider
from launcher.providers.registry import SPECS


def make_provider(config: ClusterConfig, on_head: bool = False) -> NodeProvider:
    """The NodeProvider for `config`, importing its SDK only now, with an install hint.
    `on_head`: for the autoscaler running on the head node."""
    kind = config.provider.type
    spec = SPECS.get(kind)
    if spec is None or not spec.implementation:
        runs = ", ".join(f"`{name}`" for name, s in SPECS.items() if s.implementation)
        raise UsageError(
            f"the {kind} provider cannot run clusters yet; `launcher validate` and "
            f"`launcher plan` work for it, and `up` works with `provider: type:` {runs}"
        )
    module_name, _, class_name = spec.implementation.partition(":")
    try:
        if spec.sdk_module:
            importlib.import_module(spec.sdk_module)
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = spec.install_extra or "all"
        raise UsageError(
            f"the {kind} provider needs {exc.name or 'an SDK'}; install it with "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        ) from exc
    implementation: type[NodeProvider] = getattr(module, class_name)
    if implementation.traits.logs_in_over_ssh and not on_head:
        _require_private_key(config)
    return implementation(config, on_head)


def _require_private_key(config: ClusterConfig) -> None:
    """Refuse, before anything is created, a command that would log in to the nodes with a
    key file this machine lacks (`validate` and `plan` only warn: they contact nothing)."""
    key = config.auth.ssh_private_key
    if key and not Path(key).expanduser().is_file():
        raise UsageError(
            f"auth.ssh_private_key: {key} is not on this machine, and this command logs in "
            "to the cluster's nodes with it; copy the key here or fix the path in "
            f"{config.source or 'the config'}"
        )
