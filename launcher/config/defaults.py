"""Provider defaults (each provider's `defaults.yaml`, read by its spec), merged under the
user's config."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# Keys whose mappings merge key by key (the user's keys win); every other key is
# taken whole from the user when present.
_MERGED_SECTIONS = ("provider", "auth")


def merge_defaults(raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The user's config with defaults filled in where the user said nothing.

    Node types come from the defaults only when the user defines none, and then the
    default head type comes with them.
    """
    merged = copy.deepcopy(dict(raw))
    user_types = raw.get("available_node_types")
    for key, value in defaults.items():
        if key in ("available_node_types", "head_node_type"):
            continue
        if key not in merged:
            merged[key] = copy.deepcopy(value)
        elif key in _MERGED_SECTIONS and isinstance(merged[key], dict):
            merged[key] = {**copy.deepcopy(value), **merged[key]}
    if "available_node_types" not in raw and "available_node_types" in defaults:
        merged["available_node_types"] = copy.deepcopy(defaults["available_node_types"])
        merged.setdefault("head_node_type", defaults.get("head_node_type"))
    elif isinstance(user_types, Mapping) and defaults.get("head_node_type") in user_types:
        # The user's node types reuse the default head type's name: it is the head.
        merged.setdefault("head_node_type", defaults["head_node_type"])
    return merged
