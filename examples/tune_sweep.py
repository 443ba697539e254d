"""A Ray Tune sweep that survives losing a worker: every trial checkpoints as it goes, and a
trial whose node is taken away (a spot machine reclaimed) is restarted on another node from
its last checkpoint, not from the start.

    launcher submit examples/clusters/local.yaml examples/tune_sweep.py --start --stop

and, while it runs, from another terminal:

    launcher kill-random-node examples/clusters/local.yaml --hard -y

Trials write their checkpoints to `--storage-path`, which every node must reach: on a
cluster of several machines use cloud storage (`s3://bucket/path`, `gs://bucket/path`) or
a shared file system; on this machine's localhost provider every node shares the disk, so
the default (`~/ray_results` of the head) works. At the end it prints, per trial, how far it
got, where it ran, and from which step it resumed after a failure; `--summary FILE` also
writes that as JSON.

It also survives losing the head, run as a recovering run:

    launcher submit examples/clusters/local-recover.yaml examples/tune_sweep.py \
        --start --stop --recover --recover-storage "$PWD/results"
    launcher kill-random-node examples/clusters/local-recover.yaml --head --hard -y

The launcher then brings up a new head and starts this script again, with the same
LAUNCHER_RUN_ID and LAUNCHER_STORAGE_PATH: it finds its experiment there
(`Tuner.can_restore`) and resumes it (`Tuner.restore(..., resume_errored=True)`), every
trial from its last checkpoint. That is all a script needs for it: what Tune asks for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from ray import tune


def objective(config: dict[str, Any]) -> None:
    """A made-up training run: `steps` iterations of `step_s` seconds each, a score that
    improves with a speed given by `lr`, a checkpoint every `checkpoint_every` steps."""
    step, score = 0, 0.0
    resumed_from = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = json.loads((Path(folder) / "state.json").read_text())
        step, score = state["step"] + 1, state["score"]
        resumed_from = step
    node_ip = ray.util.get_node_ip_address()
    while step < config["steps"]:
        time.sleep(config["step_s"])
        score += config["lr"] * math.exp(-config["lr"] * step)
        metrics = {"score": score, "step": step, "resumed_from": resumed_from, "node_ip": node_ip}
        last = step == config["steps"] - 1
        if (step + 1) % config["checkpoint_every"] == 0 or last:
            with tempfile.TemporaryDirectory() as folder:
                state = {"step": step, "score": score}
                (Path(folder) / "state.json").write_text(json.dumps(state))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        else:
            tune.report(metrics)
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4, help="how many trials (default 4)")
    parser.add_argument("--steps", type=int, default=30, help="iterations per trial")
    parser.add_argument("--step-seconds", type=float, default=1.0, help="seconds per step")
    parser.add_argument("--checkpoint-every", type=int, default=3, help="steps per checkpoint")
    parser.add_argument("--max-failures", type=int, default=3, help="restarts per trial")
    parser.add_argument("--cpus-per-trial", type=float, default=1.0)
    parser.add_argument(
        "--storage-path",
        # A recovering run's storage (`submit --recover --recover-storage`), else Tune's habit.
        default=os.environ.get("LAUNCHER_STORAGE_PATH")
        or os.environ.get("TUNE_STORAGE_PATH", "~/ray_results"),
        help="where trials keep checkpoints; every node must reach it (s3://, gs://, NFS)",
    )
    parser.add_argument(
        "--name",
        # One experiment per run: every attempt of a recovering run resumes the same one.
        default=os.environ.get("LAUNCHER_RUN_ID", "tune-sweep"),
        help="the experiment's name",
    )
    parser.add_argument(
        "--keep-checkpoints",
        type=int,
        default=None,
        help="checkpoints kept per trial (default: all; see the CheckpointConfig comment)",
    )
    parser.add_argument("--summary", help="also write the per-trial summary here, as JSON")
    args = parser.parse_args()

    ray.init()
    storage = args.storage_path
    if "://" not in storage:
        storage = str(Path(storage).expanduser().resolve())
    print(f"{args.trials} trials of {args.steps} steps; checkpoints in {storage}", flush=True)
    trainable = tune.with_resources(objective, {"cpu": args.cpus_per_trial})
    experiment = storage.rstrip("/") + "/" + args.name
    if tune.Tuner.can_restore(experiment):
        # An earlier attempt of this run (its head was lost): go on where it was.
        print(f"resuming the sweep from {experiment}", flush=True)
        tuner = tune.Tuner.restore(experiment, trainable=trainable, resume_errored=True)
    else:
        tuner = _new_tuner(trainable, args, storage)
    results = tuner.fit()
    _report(results, args)


def _new_tuner(trainable: Any, args: argparse.Namespace, storage: str) -> tune.Tuner:
    return tune.Tuner(
        trainable,
        param_space={
            "lr": tune.grid_search([0.01 * 2**i for i in range(args.trials)]),
            "steps": args.steps,
            "step_s": args.step_seconds,
            "checkpoint_every": args.checkpoint_every,
        },
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(
            name=args.name,
            storage_path=storage,
            failure_config=tune.FailureConfig(max_failures=args.max_failures),
            # Every checkpoint kept: a head lost between a trial deleting an old checkpoint
            # and the experiment's next snapshot would leave the restored run pointing at
            # one that is gone (Tune: "does not exist on storage anymore"). Keep at least a
            # few more than checkpoints per snapshot if you bound it.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=args.keep_checkpoints),
            verbose=1,
        ),
    )


def _report(results: Any, args: argparse.Namespace) -> None:
    summary = []
    for result in results:
        history = result.metrics_dataframe
        rows = [] if history is None else history.to_dict("records")
        summary.append(
            {
                "lr": result.config["lr"],
                "error": None if result.error is None else str(result.error),
                "last_step": int(result.metrics.get("step", -1)),
                "score": result.metrics.get("score"),
                "nodes": sorted({str(r["node_ip"]) for r in rows}),
                "resumed_from": sorted({int(r["resumed_from"]) for r in rows} - {0}),
            }
        )
    for trial in summary:
        resumed = ", ".join(map(str, trial["resumed_from"])) or "-"
        print(
            f"trial lr={trial['lr']:.2f}: last step {trial['last_step']}, "
            f"score {trial['score']}, nodes {', '.join(trial['nodes'])}, "
            f"resumed from step {resumed}" + (f", error {trial['error']}" if trial["error"] else "")
        )
    best = results.get_best_result()
    print(f"best: lr={best.config['lr']:.2f} score={best.metrics['score']:.4f}")
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1))
    failed = [t for t in summary if t["error"] or t["last_step"] != args.steps - 1]
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
