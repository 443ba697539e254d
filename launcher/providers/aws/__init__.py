"""Amazon EC2."""
