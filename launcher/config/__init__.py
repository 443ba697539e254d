"""Cluster configs: load, validate and model them."""

from launcher.config.loader import Overrides, load_config, parse_config
from launcher.config.model import ClusterConfig, NodeType

__all__ = ["ClusterConfig", "NodeType", "Overrides", "load_config", "parse_config"]
