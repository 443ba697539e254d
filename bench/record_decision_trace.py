"""Record the head autoscaler's decision trace on a real localhost Ray cluster, for
tests/test_decision_gate.py to replay (launcher/autoscaler/decide/trace.py).

    flock /tmp/launcher-ray-tests.lock .venv/bin/python bench/record_decision_trace.py \\
        tests/traces/localhost-demo.jsonl

The cluster: a head and a `simulated_spot` type (min 1, max 2) falling back to an on-demand
type, idle timeout 1 minute. What happens, each a state the gate must not keep a choice
across: `up`; examples/cpu_tasks.py (16 CPUs at once: workers launched and set up, demand
met); a spot worker reclaimed after a 10 s notice (`kill-random-node --hard --notice 10`:
its replacement launched on the notice, its Ray stopped, the node taken); the cluster idle
until the idle timeout takes the extra workers; `down`. Every tick is decided (the trace
says which the gate would have kept); the daemon's log is checked for audit mismatches.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
LAUNCHER = str(BIN / "launcher")
REPO = Path(__file__).resolve().parent.parent
CONFIG = """\
cluster_name: {name}
max_workers: 4
idle_timeout_minutes: 1
provider: {{type: localhost}}
available_node_types:
  head: {{node_config: {{}}, resources: {{CPU: 4}}, max_workers: 0}}
  spot:
    node_config: {{simulated_spot: true}}
    resources: {{CPU: 4}}
    min_workers: 1
    max_workers: 2
  on-demand: {{node_config: {{}}, resources: {{CPU: 4}}, min_workers: 0, max_workers: 2}}
head_node_type: head
metadata: {{launcher: {{fallbacks: {{spot: [on-demand]}}}}}}
"""


def run(*args: str, env: dict[str, str], timeout: float = 900) -> str:
    print("$", " ".join(args[1:]), file=sys.stderr)
    done = subprocess.run(
        args, check=False, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def workers(config: Path, env: dict[str, str]) -> int:
    out = run(LAUNCHER, "get-worker-ips", str(config), env=env)
    return len([line for line in out.splitlines() if line.strip()])


def reclaim_a_spot_worker(config: Path, env: dict[str, str]) -> None:
    """`kill-random-node --hard --notice 10` until the worker it picks is a spot one (it
    refuses an on-demand one, changing nothing)."""
    args = [LAUNCHER, "kill-random-node", "--hard", "--notice", "10", "-y", str(config)]
    for _ in range(20):
        done = subprocess.run(
            args, check=False, env=env, capture_output=True, text=True, timeout=600
        )
        if done.returncode == 0:
            return
        if "cannot be given a reclaim notice" not in done.stderr:
            raise SystemExit(f"kill-random-node failed:\n{done.stdout}\n{done.stderr}")
    raise SystemExit("kill-random-node never picked a spot worker in 20 tries")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path, help="the trace to write (replaced)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="launcher-trace-") as tmp:
        home = Path(tmp)
        audit = home / "audit.jsonl"
        trace = home / "trace.jsonl"
        env = dict(
            os.environ,
            LAUNCHER_HOME=str(home / "home"),
            LAUNCHER_PRICES="static",
            LAUNCHER_DECISION_TRACE=str(trace),
            LAUNCHER_DECISION_AUDIT=str(audit),
        )
        config = home / "cluster.yaml"
        config.write_text(CONFIG.format(name=f"trace-{os.getpid()}"))
        try:
            run(LAUNCHER, "up", "-y", str(config), env=env)
            run(LAUNCHER, "submit", str(config), str(REPO / "examples" / "cpu_tasks.py"), env=env)
            reclaim_a_spot_worker(config, env)
            deadline = time.monotonic() + 300
            while workers(config, env) > 1:  # the idle timeout takes all but min_workers
                if time.monotonic() > deadline:
                    raise SystemExit("the idle workers were not terminated within 5 minutes")
                time.sleep(5)
            time.sleep(10)  # idle ticks with the cluster at its minimum
        finally:
            run(LAUNCHER, "down", "-y", str(config), env=env)
        if audit.exists() and audit.read_text().strip():
            raise SystemExit(f"the audit found mismatches:\n{audit.read_text()}")
        lines = trace.read_text().splitlines()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"{len(lines) - 1} ticks recorded in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
