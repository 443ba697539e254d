"""The autoscaler that runs on the head node: observe, decide, then act.

- `observe/`: what is read (the provider's listing, Ray's demand through a child process,
  the head's own files);
- `decide/`: pure decisions over values (the planner and its helpers, broken and idle
  workers, evacuations, the table of a worker's states, the tick's `choose`), returning
  typed decisions;
- `act/`: what carries them out (the executor's launches, node setups, evacuations,
  autostop);
- `daemon.py`, the loop on top: each tick observes, notes the facts, decides once on the
  listing it acts on, then acts. `clock.py` is the time every part is given; `spec.py` what
  `up` hands the head; `simulator.py` drives the planner with a simulated cloud and clock.
  What runs on the nodes themselves belongs to their provider (AWS's reclaim-notice
  watcher: launcher/providers/notice_watch.py).
"""
