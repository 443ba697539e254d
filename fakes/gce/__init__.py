"""See fakes/__init__.py."""
