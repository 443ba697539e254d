"""`launcher check`: is each provider ready for `up` on this machine?

For each provider: is its extra installed (its SDK importable), are credentials found, do
they allow what `up` does, and how much quota is left for a config's node types. The
decisions (what a reading means, what to do about it, the exit code) are pure functions in
`decide.py` over the dataclasses of `model.py`; the probes that call the clouds live one per
provider beside them (`aws.py`, `gcp.py`, `kubernetes.py`, `azure.py`), imported only when
their SDK is, and `run.py` puts them together.
"""
