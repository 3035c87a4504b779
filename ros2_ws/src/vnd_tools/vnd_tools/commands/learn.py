"""``vnd learn``: one learner update from recorded replay bags, offline.

The bags' Transition records go into a :class:`~vnd_core.learner.ContinualLearner` around the
``--init`` bundle (its replay keeps POLICY-mode ticks, deduplicated, bounded by the learner's
eviction rule), then one update cycle runs exactly as on the vehicle: fit the VND model (warm
start from the init bundle's model, or a new one), train the policy on prior + residual(z),
validate. An accepted bundle (version init + 1) is written to ``--out``; a rejected one is not,
and the reason is printed (exit code 3). ``--improve-rounds N`` then trains the new bundle's
policy further on its model for up to N policy improvement rounds, as the flight learner does
between updates, and writes the last version that passed the gates. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
from vnd_core.bundle import Bundle, BundleError, load_bundle, save_bundle
from vnd_core.evaluation.replay_bag import ReadReport, ReplayBagError, read_transitions
from vnd_core.learner import ContinualLearner
from vnd_core.learner.continual import UpdateProgress
from vnd_core.learner.settings import LEARNER_PRESETS
from vnd_core.vehicle import load_vehicle

from vnd_tools.logimport.checks import check_replay_input

EXIT_REJECTED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd learn``."""
    parser.add_argument(
        "--bag", required=True, type=Path, action="append", help="replay bag (repeatable)"
    )
    parser.add_argument("--init", required=True, type=Path, help="bundle to start from")
    parser.add_argument("--out", required=True, type=Path, help="bundle file to write")
    parser.add_argument(
        "--preset", choices=sorted(LEARNER_PRESETS), default="full", help="learner preset"
    )
    parser.add_argument("--quick", action="store_true", help="same as --preset quick")
    parser.add_argument(
        "--vehicle",
        default=None,
        help="vehicle name or file the ticks were flown with (default: the init bundle's)",
    )
    parser.add_argument("--topic", default=None, help="Transition topic (default: every one)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fit and the training")
    parser.add_argument("--fit-steps", type=int, default=None, help="model fit steps (preset's)")
    parser.add_argument(
        "--train-iterations", type=int, default=None, help="policy training iterations (preset's)"
    )
    parser.add_argument(
        "--improve-rounds",
        type=int,
        default=0,
        help="policy improvement rounds after the update (default 0: none)",
    )
    parser.add_argument("--summary", type=Path, default=None, help="write the update's JSON here")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    """Read the bags, run one update, write the bundle; returns the exit code."""
    torch.set_num_threads(args.threads)
    try:
        init = load_bundle(args.init)
        read_report = ReadReport()
        records = read_transitions(args.bag, args.topic, read_report)
        vehicle = init.vehicle if args.vehicle is None else load_vehicle(args.vehicle)
    except (BundleError, ReplayBagError, OSError, ValueError) as err:  # ValueError: vehicle file
        print(f"vnd learn: {err}")
        return 2
    print(f"vnd learn: {read_report.describe()}")
    print(check_replay_input(records.stamp_ns, records.state, vehicle))
    preset = LEARNER_PRESETS["quick" if args.quick else args.preset]
    config = preset(seed=args.seed, min_new_ticks=1, min_interval_s=0.0)
    if args.fit_steps is not None:
        config = dataclasses.replace(
            config, fit=dataclasses.replace(config.fit, steps=args.fit_steps)
        )
    if args.train_iterations is not None:
        trainer = dataclasses.replace(config.trainer, iterations=args.train_iterations)
        config = dataclasses.replace(config, trainer=trainer)
    if args.improve_rounds > 0:  # asked for explicitly: on whatever the preset says
        improvement = dataclasses.replace(config.improvement, enabled=True)
        config = dataclasses.replace(config, improvement=improvement)
    try:
        learner = ContinualLearner(vehicle, config, init)
    except ValueError as err:
        print(f"vnd learn: {args.init}: {err}")
        return 2
    stored = learner.ingest(records)
    if not learner.should_update(time.monotonic()):
        context = init.model.context_len if init.model is not None else config.model.context_len
        print(
            f"vnd learn: not enough learnable data: {stored} POLICY-mode ticks stored of "
            f"{len(records)} read (rejected: {learner.rejected_ticks}); an update needs "
            f"{config.min_windows} windows of {context} + {config.fit.horizon} "
            "contiguous ticks"
        )
        return 2
    result = learner.update(progress=_progress_printer())
    summary = {
        "accepted": result.accepted,
        "reason": result.reason,
        "version": result.metrics.get("version"),
        "ticks_read": len(records),
        "ticks_stored": stored,
        "timings_s": result.metrics.get("timing_s"),
        "metrics": result.metrics,
    }
    if args.summary is not None:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if result.bundle is None:  # rejected (an accepted update carries its bundle)
        print(f"vnd learn: candidate v{summary['version']} rejected: {result.reason}")
        return EXIT_REJECTED
    print(
        f"vnd learn: v{result.bundle.version} from {stored} ticks in {result.total_s:.1f} s "
        f"(fit {result.fit_s:.1f} s, train {result.train_s:.1f} s, validate "
        f"{result.validate_s:.1f} s)"
    )
    bundle = _improve(learner, args.improve_rounds) if args.improve_rounds > 0 else result.bundle
    save_bundle(bundle, args.out)
    print(f"wrote {args.out} (version {bundle.version}, parent {init.version})")
    return 0


def _improve(learner: ContinualLearner, rounds: int) -> Bundle:
    """Up to ``rounds`` policy improvement rounds on the learner's active model; the newest
    version that passed the gates (the update's when none did)."""
    for k in range(1, rounds + 1):
        if not learner.should_improve():
            print(f"vnd learn: improvement paused after {k - 1} rounds (no gain)")
            break
        result = learner.improve(progress=_progress_printer())
        cost = (result.metrics.get("validation") or {}).get("cost_m") or {}
        outcome = f"v{result.bundle.version}" if result.bundle is not None else result.reason
        figures = (
            f" (cost {cost['candidate']:.4f} m vs {cost['active']:.4f} m)"
            if cost and result.accepted
            else ""
        )
        print(f"vnd learn: improvement round {k}/{rounds}: {outcome}{figures}")
    return learner.active


def _progress_printer() -> UpdateProgress:
    """A progress callback printing each stage once and then every 10 % to stderr."""
    last = {"stage": "", "tenth": -1}

    def progress(stage: str, fraction: float) -> None:
        tenth = int(10 * fraction)
        if stage == last["stage"] and tenth == last["tenth"]:
            return
        last.update(stage=stage, tenth=tenth)
        print(f"vnd learn: {stage} {100 * fraction:3.0f}%", file=sys.stderr, flush=True)

    return progress
