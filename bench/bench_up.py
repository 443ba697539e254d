"""Time `launcher up` to a ready cluster (1 head + 2 workers) on the localhost provider, and
a no-op `up` on the same cluster, against the same work done by hand with `ray start` in the
same run (the floor any launcher pays). Prints the figures and their ratios.

    .venv/bin/python bench/bench_up.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCHER = str(Path(sys.executable).parent / "launcher")
RAY = str(Path(sys.executable).parent / "ray")
CONFIG = """\
cluster_name: bench-up
max_workers: 2
provider: {type: localhost}
available_node_types:
  head: {node_config: {}, resources: {CPU: 2}, max_workers: 0}
  worker: {node_config: {}, resources: {CPU: 2}, min_workers: 2, max_workers: 2}
head_node_type: head
"""


def timed(*args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, env=env, capture_output=True, timeout=600)
    return time.perf_counter() - started


def by_hand(env: dict[str, str], temp: str) -> float:
    """The same cluster with plain `ray start`: the head, then the workers one at a time
    (concurrent `ray start`s on one machine race for Ray's socket names and time out)."""
    started = time.perf_counter()
    common = ["--num-cpus=2", "--disable-usage-stats"]
    subprocess.run(
        [
            RAY,
            "start",
            "--head",
            "--node-ip-address=127.0.0.201",
            "--port=46379",
            f"--temp-dir={temp}",
            "--dashboard-agent-listen-port=46380",
            "--include-dashboard=false",
            *common,
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    for i in range(2):
        subprocess.run(
            [
                RAY,
                "start",
                "--address=127.0.0.201:46379",
                f"--node-ip-address=127.0.0.{202 + i}",
                f"--dashboard-agent-listen-port={46381 + i}",
                *common,
            ],
            check=True,
            env=env,
            capture_output=True,
            timeout=600,
        )
    elapsed = time.perf_counter() - started
    subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, check=False)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    first, noop, manual = [], [], []
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, LAUNCHER_HOME=home, RAY_USAGE_STATS_ENABLED="0")
        config = Path(home) / "bench.yaml"
        config.write_text(CONFIG)
        for _ in range(args.repeat):
            manual.append(by_hand(env, str(Path(home) / "ray")))
            first.append(timed(LAUNCHER, "up", "-y", str(config), env=env))
            noop.append(timed(LAUNCHER, "up", "-y", str(config), env=env))
            timed(LAUNCHER, "down", "-y", str(config), env=env)
    med = statistics.median
    print(f"repeat={args.repeat} (medians)")
    print(f"ray start by hand, 1 head + 2 workers:   {med(manual):6.2f} s")
    print(
        f"launcher up, 1 head + 2 workers ready:   {med(first):6.2f} s  "
        f"({med(first) / med(manual):.2f}x by hand)"
    )
    print(
        f"launcher up again (no-op):               {med(noop):6.2f} s  "
        f"({100 * med(noop) / med(first):.1f}% of the first up; target < 10%)"
    )


if __name__ == "__main__":
    main()
