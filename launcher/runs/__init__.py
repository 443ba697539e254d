"""Runs that outlive their head: `launcher submit --recover` and `launcher jobs`."""
