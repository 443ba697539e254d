"""What tests of code above the provider seam use: an in-memory provider."""

from launcher.testing.memory import Call, MemoryProvider

__all__ = ["Call", "MemoryProvider"]
