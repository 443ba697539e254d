"""Cluster lifecycle: up, down, and the operations on a running cluster."""
