"""Google Compute Engine."""
