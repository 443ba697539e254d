"""launcher: a cluster launcher and autoscaler for Ray."""

__version__ = "0.1.0"
