"""Cluster records: what ran, when, at what price (`list`, `cost-report`, autostop)."""
