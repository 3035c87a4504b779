"""``vnd train-observer``: train the force-observer start bundle from a base bundle.

The chain ``vnd eval`` runs before vnd_observer flies: the base policy fine-tuned with domain
randomisation (dr), then further with the external force as an input (dob), then that force
moved to the policy's force input with z silent, so the flight's observer feeds it and a
learner can give z its meaning (:func:`~vnd_core.evaluation.dob.force_input_bundle`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch
from vnd_core.bundle import load_bundle, save_bundle, shipped_bundle_path
from vnd_core.evaluation.baselines import train_baseline_bundle
from vnd_core.evaluation.dob import force_input_bundle
from vnd_core.evaluation.suite import EvalConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd train-observer``."""
    defaults = EvalConfig().randomised_trainer
    parser.add_argument("--out", required=True, type=Path, help="bundle file to write")
    parser.add_argument(
        "--base", type=Path, default=None, help="bundle to start from (default: the shipped base)"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of both trainings")
    parser.add_argument(
        "--iterations", type=int, default=defaults.iterations, help="optimiser steps per training"
    )
    parser.add_argument(
        "--envs", type=int, default=defaults.num_envs, help="parallel training environments"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    """Train dr, then dob from it, save the force-input bundle; returns the exit code."""
    torch.set_num_threads(args.threads)
    config = dataclasses.replace(
        EvalConfig().randomised_trainer,
        seed=args.seed,
        iterations=args.iterations,
        num_envs=args.envs,
    )
    base = load_bundle(args.base or shipped_bundle_path())
    start = time.perf_counter()
    dr = train_baseline_bundle(base, "dr", config)
    print(f"trained dr policy in {time.perf_counter() - start:.0f} s", flush=True)
    dob = train_baseline_bundle(dr, "dob", config)
    print(f"trained dob policy in {time.perf_counter() - start:.0f} s", flush=True)
    bundle = force_input_bundle(dob)
    save_bundle(bundle, args.out)  # fills in the bundle's sha256
    print(
        f"wrote {args.out} (version {bundle.version}, sha256 {bundle.sha256[:12]}) "
        f"in {time.perf_counter() - start:.0f} s"
    )
    return 0
