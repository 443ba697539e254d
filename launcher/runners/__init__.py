"""How commands run on a node: a local process, SSH, or the Kubernetes exec API."""
