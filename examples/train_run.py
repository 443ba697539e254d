"""A Ray Train run that survives losing a worker node: a data-parallel trainer whose
training function checkpoints every few epochs; when a node of its worker group is taken
away (a spot machine reclaimed), Ray Train starts the group again on the nodes the
autoscaler brings, and training resumes from the last checkpoint.

    launcher submit examples/clusters/local.yaml examples/train_run.py --start --stop

and, while it runs, from another terminal:

    launcher kill-random-node examples/clusters/local.yaml --hard -y

The training function is plain Python and NumPy (a linear model fitted by SGD on each
worker's shard of synthetic data), so the example needs no deep-learning framework; a
PyTorch loop goes in the same place. Checkpoints go to `--storage-path`, which every node
must reach: cloud storage (`s3://...`, `gs://...`) or a shared file system on a cluster of
several machines; on this machine's localhost provider, the head's `~/ray_results`.

Each start of the training (the first and every restart) is recorded in the checkpoint, so
at the end it prints where training started each time and from which epoch it resumed;
`--summary FILE` also writes that as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.train
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

FEATURES = 8


def train_loop(config: dict[str, Any]) -> None:
    context = ray.train.get_context()
    rank = context.get_world_rank()
    rng = np.random.default_rng(1000 + rank)
    truth = np.arange(1, FEATURES + 1, dtype=float)
    inputs = rng.normal(size=(512, FEATURES))
    targets = inputs @ truth + rng.normal(scale=0.1, size=512)

    weights = np.zeros(FEATURES)
    epoch, starts = 0, []
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = json.loads((Path(folder) / "state.json").read_text())
        weights, epoch, starts = np.array(state["weights"]), state["epoch"] + 1, state["starts"]
    node_ip = ray.util.get_node_ip_address()
    starts = [*starts, {"epoch": epoch, "node_ip": node_ip, "rank": rank, "time": time.time()}]

    while epoch < config["epochs"]:
        time.sleep(config["epoch_s"])
        gradient = 2 * inputs.T @ (inputs @ weights - targets) / len(targets)
        weights = weights - config["lr"] * gradient
        loss = float(np.mean((inputs @ weights - targets) ** 2))
        metrics = {"epoch": epoch, "loss": loss, "node_ip": node_ip}
        last = epoch == config["epochs"] - 1
        if (epoch + 1) % config["checkpoint_every"] == 0 or last:
            # Every worker reports; rank 0's weights are the checkpoint (as with DDP, the
            # replicas agree). Its record of starts covers the whole run.
            with tempfile.TemporaryDirectory() as folder:
                state = {"weights": weights.tolist(), "epoch": epoch, "starts": starts}
                (Path(folder) / "state.json").write_text(json.dumps(state))
                saved = ray.train.Checkpoint.from_directory(folder) if rank == 0 else None
                ray.train.report(metrics, checkpoint=saved)
        else:
            ray.train.report(metrics)
        epoch += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="training workers (default 2)")
    parser.add_argument("--cpus-per-worker", type=float, default=2.0)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--epoch-seconds", type=float, default=1.0)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--max-failures", type=int, default=3)
    parser.add_argument(
        "--storage-path",
        default=os.environ.get("TRAIN_STORAGE_PATH", "~/ray_results"),
        help="where checkpoints go; every node must reach it (s3://, gs://, NFS)",
    )
    parser.add_argument("--name", default="train-run", help="the run's name")
    parser.add_argument("--summary", help="also write the summary here, as JSON")
    args = parser.parse_args()

    ray.init()
    storage = args.storage_path
    if "://" not in storage:
        storage = str(Path(storage).expanduser().resolve())
    print(
        f"{args.workers} workers x {args.cpus_per_worker:g} CPUs, {args.epochs} epochs; "
        f"checkpoints in {storage}",
        flush=True,
    )
    trainer = DataParallelTrainer(
        train_loop,
        train_loop_config={
            "epochs": args.epochs,
            "epoch_s": args.epoch_seconds,
            "checkpoint_every": args.checkpoint_every,
            "lr": 0.05,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=args.workers, resources_per_worker={"CPU": args.cpus_per_worker}
        ),
        run_config=ray.train.RunConfig(
            name=args.name,
            storage_path=storage,
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
        ),
    )
    result = trainer.fit()

    starts: list[dict[str, Any]] = []
    last_epoch = -1
    if result.checkpoint is not None:
        with result.checkpoint.as_directory() as folder:
            state = json.loads((Path(folder) / "state.json").read_text())
        starts, last_epoch = state["starts"], state["epoch"]
    for start in starts:
        print(f"training started at epoch {start['epoch']} on {start['node_ip']} (rank 0)")
    print(
        f"last epoch {last_epoch}, loss {result.metrics.get('loss')}"
        + (f", error {result.error}" if result.error else "")
    )
    summary = {
        "last_epoch": last_epoch,
        "loss": result.metrics.get("loss"),
        "starts": starts,
        "error": None if result.error is None else str(result.error),
    }
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1))
    raise SystemExit(0 if result.error is None and last_epoch == args.epochs - 1 else 1)


if __name__ == "__main__":
    main()
