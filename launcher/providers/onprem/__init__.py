"""On-prem clusters: machines the user lists, reached over SSH."""
