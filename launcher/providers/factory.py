"""Build the NodeProvider for a config, importing provider code and SDKs only when used."""

from __future__ import annotations

import importlib
import importlib.util
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
    extra = spec.install_extra or "all"
    missing = _missing(spec.sdk_module) if spec.sdk_module else None
    try:
        if missing is not None:
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(
            f"the {kind} provider needs {exc.name or 'an SDK'}; install it with "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        ) from exc
    implementation: type[NodeProvider] = getattr(module, class_name)
    if implementation.traits.logs_in_over_ssh and not on_head:
        _require_private_key(config)
    return implementation(config, on_head)


def _missing(module: str) -> str | None:
    """The name of `module` (a provider's SDK) when it is not installed, else None. Looked
    up, not imported: the provider imports it when it first calls its cloud (boto3 alone
    costs ~40 ms that a no-op `up`, whose one EC2 call needs only botocore, saves)."""
    try:
        found = importlib.util.find_spec(module)
    except ImportError as exc:  # a parent package is missing
        return exc.name or module
    except ValueError:  # imported already, as a module without a spec
        return None
    return None if found is not None else module


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
