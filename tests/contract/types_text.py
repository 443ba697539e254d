"""The config every contract harness but on-prem's builds: a cluster of the given name with
`max_workers: 8`, the provider's lines, and three node types: a head, a worker and a type
whose capacity the harness makes run out (`node` and `scarce`: each provider's
node_config)."""

from launcher.config.loader import Overrides, parse_config
from launcher.config.model import ClusterConfig

TYPES_TEXT = """
available_node_types:
  head: {node_config: NODE, resources: {CPU: 1}, max_workers: 0}
  worker: {node_config: NODE, resources: {CPU: 1}, max_workers: 8}
  scarce: {node_config: SCARCE, resources: {CPU: 1}, max_workers: 8}
head_node_type: head
"""


def typed_config(cluster: str, provider_lines: str, node: str, scarce: str) -> ClusterConfig:
    """The harness config of `cluster`: `provider_lines` (its `provider:` and any `auth:`
    lines), then the three node types with `node` and `scarce` as their node_configs."""
    text = f"cluster_name: {cluster}\nmax_workers: 8\n{provider_lines}"
    text += TYPES_TEXT.replace("SCARCE", scarce).replace("NODE", node)
    return parse_config(text, f"{cluster}.yaml", Overrides())
