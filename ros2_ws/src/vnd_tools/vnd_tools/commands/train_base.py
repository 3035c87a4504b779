"""``vnd train-base``: train the base policy (z = 0) from scratch on the nominal model."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch
from vnd_core.bundle import Bundle, save_bundle
from vnd_core.dynamics import NominalModel
from vnd_core.policy import PolicyConfig, PolicyNet
from vnd_core.trainer import PolicyTrainer, Progress, TrainerConfig, prior_dynamics
from vnd_core.vehicle import load_vehicle


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd train-base``."""
    defaults = TrainerConfig()
    parser.add_argument("--vehicle", default="agile", help="vehicle name or YAML path")
    parser.add_argument("--out", required=True, type=Path, help="bundle file to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    parser.add_argument(
        "--iterations", type=int, default=defaults.iterations, help="optimiser steps"
    )
    parser.add_argument(
        "--envs", type=int, default=defaults.num_envs, help="parallel training environments"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--version", type=int, default=1, help="bundle version to stamp")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def train_base_policy(
    vehicle_name: str, config: TrainerConfig, progress: Progress | None = None
) -> tuple[PolicyNet, dict]:
    """Train a fresh base policy on the prior; returns it and the training summary."""
    vehicle = load_vehicle(vehicle_name)
    torch.manual_seed(config.seed)
    policy = PolicyNet(vehicle, PolicyConfig())
    trainer = PolicyTrainer(policy, prior_dynamics(NominalModel(vehicle)), vehicle, config)
    summary = trainer.train(progress=progress)
    return policy.eval(), summary


def run(args: argparse.Namespace) -> int:
    """Train, save the bundle, print where it went; returns the exit code."""
    torch.set_num_threads(args.threads)
    config = dataclasses.replace(
        TrainerConfig(), seed=args.seed, iterations=args.iterations, num_envs=args.envs
    )
    start = time.perf_counter()
    if args.quiet:
        policy, summary = train_base_policy(args.vehicle, config)
    else:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        columns = (
            TextColumn("training"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("loss {task.fields[loss]:.4f}  error {task.fields[err]:.3f} m"),
            TimeRemainingColumn(),
        )
        with Progress(*columns) as bar:
            task = bar.add_task("train", total=config.iterations, loss=0.0, err=0.0)

            def progress(i: int, total: int, metrics: dict) -> None:
                bar.update(task, completed=i, loss=metrics["loss"], err=metrics["pos_error_m"])

            policy, summary = train_base_policy(args.vehicle, config, progress)
    summary["kind"] = "base policy, nominal model, z = 0"
    bundle = Bundle(
        version=args.version,
        parent_version=0,
        policy=policy,
        vehicle=policy.vehicle,
        summary=summary,
    )
    save_bundle(bundle, args.out)
    elapsed = time.perf_counter() - start
    print(
        f"wrote {args.out} (version {args.version}, sha256 {bundle.sha256[:12]}) in {elapsed:.0f} s"
    )
    return 0
