"""The node types every contract harness's configs share: a head, a worker and a type
whose capacity the harness makes run out (`NODE` and `SCARCE`: each provider's
node_config)."""

TYPES_TEXT = """
available_node_types:
  head: {node_config: NODE, resources: {CPU: 1}, max_workers: 0}
  worker: {node_config: NODE, resources: {CPU: 1}, max_workers: 8}
  scarce: {node_config: SCARCE, resources: {CPU: 1}, max_workers: 8}
head_node_type: head
"""
