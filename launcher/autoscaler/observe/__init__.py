"""What the autoscaler reads: the provider's listing, Ray's demand from the GCS (through a
child process), and the head's own files (the autostop setting, open sessions)."""
