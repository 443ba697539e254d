"""The autoscaler's decisions: pure functions and the memory they decide from.

Nothing here does I/O, reads a clock or sleeps: the time arrives as an argument, the nodes
and Ray's demand as values (observe/ reads them), and what is decided is returned as typed
values that act/ carries out. `tests/test_autoscaler_layers.py` checks that no module here
imports act/, observe/ or anything that reaches outside the process.
"""
