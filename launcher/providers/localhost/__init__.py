"""Real Ray nodes on this machine, each with its own loopback IP."""
