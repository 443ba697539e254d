"""launcher: a cluster launcher and autoscaler for Ray."""

__version__ = "0.1.0"
# The name pip knows the launcher by (`launcher` on PyPI is another project); the command
# and the import package are `launcher`.
DISTRIBUTION = "launcher-ray"
