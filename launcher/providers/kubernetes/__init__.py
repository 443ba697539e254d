"""Pods in a Kubernetes namespace."""
