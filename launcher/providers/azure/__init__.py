"""The Azure provider: `provider: type: azure` (see docs/adding-a-provider.md)."""
