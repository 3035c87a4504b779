"""``vnd model-eval``: open-loop prediction error of a bundle's model on recorded replay data.

For every window of the bag's POLICY-mode runs, the bundle's encoder reads the C ticks of
context, then the prior alone and prior + residual(z) roll the logged actions forward from the
next state; the position error after 1, 10 and 50 steps is averaged over windows
(:func:`vnd_core.vnd.open_loop_errors`). ``--latents`` exports the latent of every complete
context with the stamp of the tick it serves (the newest state of its context). The JSON's
``per_segment`` holds the position, velocity and attitude errors of each run on its own
(:mod:`vnd_core.evaluation.segment_errors`); ``--png`` draws them at the longest horizon.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from vnd_core.bundle import BundleError, load_bundle
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.evaluation.replay_bag import ReadReport, ReplayBagError, read_transitions
from vnd_core.evaluation.segment_errors import plot_segment_errors, segment_errors
from vnd_core.learner import TickRecords, split_runs
from vnd_core.vnd.data import Segment, TransitionDataset
from vnd_core.vnd.metrics import open_loop_errors
from vnd_core.vnd.model import VNDModel

from vnd_tools.logimport.checks import check_replay_input

HORIZONS = (1, 10, 50)
GAP_FACTOR = 1.5  # a stamp step above this many control periods breaks a run (as the learner)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``vnd model-eval``."""
    parser.add_argument("--bag", required=True, type=Path, action="append", help="replay bag(s)")
    parser.add_argument("--bundle", required=True, type=Path, help="bundle with a VND model")
    parser.add_argument("--json", required=True, type=Path, help="write the errors here")
    parser.add_argument("--latents", type=Path, default=None, help="write latents (.npz) here")
    parser.add_argument("--topic", default=None, help="Transition topic (default: every one)")
    parser.add_argument("--max-windows", type=int, default=2000, help="windows per horizon")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--png", type=Path, default=None, help="per-segment errors at the longest horizon (PNG)"
    )


def replay_dataset(model: VNDModel, records: TickRecords) -> tuple[TransitionDataset, np.ndarray]:
    """The model's dataset of the POLICY-mode runs of ``records`` and, aligned with its
    transition rows, the stamp (ns) of each row's outcome state (T,)."""
    dataset = model.new_dataset()
    stamps = []
    delay = model.config.action_delay_ticks
    for run in split_runs(records.stamp_ns, records.mode, CONTROL_PERIOD_S, GAP_FACTOR):
        if run.stop - run.start < 2:
            continue
        if dataset.add_segment(Segment(records.state[run], records.action[run])):
            stamps.append(records.stamp_ns[run][delay + 1 :])
    stamps_ns = np.concatenate(stamps) if stamps else np.zeros(0, np.int64)
    return dataset, stamps_ns


def _segments(records: TickRecords) -> list[Segment]:
    """The POLICY-mode runs of ``records`` of at least two ticks, as the model reads them."""
    runs = split_runs(records.stamp_ns, records.mode, CONTROL_PERIOD_S, GAP_FACTOR)
    return [
        Segment(records.state[run], records.action[run])
        for run in runs
        if run.stop - run.start >= 2
    ]


def latents_with_stamps(
    model: VNDModel, dataset: TransitionDataset, outcome_stamps_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Latent (M, nz) of every complete context and the stamp (M,) of the tick it serves."""
    encoded = model.encode_all(dataset)
    index = encoded.starts.numpy() + model.context_len - 1  # row whose outcome is s_{g+C}
    return encoded.z.numpy(), outcome_stamps_ns[index]


def run(args: argparse.Namespace) -> int:
    """Evaluate, write the JSON (and the latents); returns the exit code."""
    torch.set_num_threads(args.threads)
    try:
        bundle = load_bundle(args.bundle)
        read_report = ReadReport()
        records = read_transitions(args.bag, args.topic, read_report)
    except (BundleError, ReplayBagError) as err:
        print(f"vnd model-eval: {err}")
        return 2
    print(f"vnd model-eval: {read_report.describe()}")
    if bundle.model is None:
        print(f"vnd model-eval: {args.bundle}: bundle v{bundle.version} carries no VND model")
        return 2
    print(check_replay_input(records.stamp_ns, records.state, bundle.vehicle))
    model = bundle.model.eval()
    dataset, stamps_ns = replay_dataset(model, records)
    if dataset.num_segments == 0:
        print(f"vnd model-eval: no POLICY-mode run of >= 2 ticks in {len(records)} records")
        return 2
    errors = open_loop_errors(model, dataset, HORIZONS, args.max_windows)
    report = {
        "bags": [str(b) for b in args.bag],
        "bundle": str(args.bundle),
        "bundle_version": bundle.version,
        "ticks": len(records),
        "segments": dataset.num_segments,
        "transitions": dataset.num_transitions,
        **errors,
        "improvement": {
            h: 1.0 - errors["model_err_m"][h] / p if p > 0 else None
            for h, p in errors["prior_err_m"].items()
        },
    }
    missing = [str(h) for h in HORIZONS if str(h) not in errors["prior_err_m"]]
    if missing:
        report["note"] = f"no run is long enough for horizons {missing}"
    report["per_segment"] = segment_errors(model, _segments(records), HORIZONS)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.png is not None:
        plot_segment_errors(report["per_segment"], HORIZONS[-1], args.png)
    if args.latents is not None:
        z, stamps = latents_with_stamps(model, dataset, stamps_ns)
        args.latents.parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.latents, stamp_ns=stamps, z=z, bundle_version=np.array(bundle.version))
    summary = ", ".join(
        f"{h}: prior {errors['prior_err_m'][h]:.4f} m / model {errors['model_err_m'][h]:.4f} m"
        for h in errors["prior_err_m"]
    )
    print(f"open-loop position error ({dataset.num_transitions} transitions) {summary}")
    return 0
