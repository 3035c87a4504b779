"""``vnd model-eval``: open-loop prediction error of a bundle's model on recorded replay data.

For every window of the bag's POLICY-mode runs, the bundle's encoder reads the C ticks of
context, then the prior alone and prior + residual(z) roll the logged actions forward from the
next state; the position, velocity, tilt and attitude errors after 1, 10 and 50 steps are
averaged over windows (:func:`vnd_core.vnd.open_loop_errors`), overall and per run
(:mod:`vnd_core.evaluation.segment_errors`), printed as a table, written to the JSON
(``errors`` and ``per_segment``) and, with ``--png``, drawn.

The model is scored as the policy uses it: with the residual components recorded in the bundle
(:mod:`vnd_core.vnd.components`: a learner's bundle by default records position, velocity and
the per-condition body-rate offset; a bundle that records none was trained against position
and velocity only). ``--components full`` scores every component instead, for diagnosis.
``--latents`` exports the latent of every complete context with the stamp of the tick it
serves (the newest state of its context).
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
from vnd_core.vnd.components import COMPONENT_MASKS, recorded_components
from vnd_core.vnd.data import Segment, TransitionDataset
from vnd_core.vnd.metrics import ERROR_KINDS, open_loop_errors
from vnd_core.vnd.model import VNDModel

from vnd_tools.logimport.checks import check_replay_input

HORIZONS = (1, 10, 50)
CELL_WIDTH = 17  # characters of one "prior / model" cell of the table
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
        "--png", type=Path, default=None, help="per-segment and overall errors (PNG)"
    )
    parser.add_argument(
        "--components",
        choices=["recorded", *sorted(COMPONENT_MASKS), "all"],
        default="recorded",
        help="residual components the model applies: those the bundle records (the ones its "
        "policy trained against; default), or a set for diagnosis ('all' = 'full')",
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
    try:
        recorded = recorded_components(bundle.summary)
    except ValueError as err:
        print(f"vnd model-eval: {args.bundle}: bundle summary: {err}")
        return 2
    components = {"recorded": recorded, "all": "full"}.get(args.components, args.components)
    model = bundle.model.eval()
    dataset, stamps_ns = replay_dataset(model, records)
    if dataset.num_segments == 0:
        print(f"vnd model-eval: no POLICY-mode run of >= 2 ticks in {len(records)} records")
        return 2
    errors = open_loop_errors(model, dataset, HORIZONS, args.max_windows, components)
    report = {
        "bags": [str(b) for b in args.bag],
        "bundle": str(args.bundle),
        "bundle_version": bundle.version,
        "recorded_components": recorded,
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
    report["per_segment"] = segment_errors(model, _segments(records), HORIZONS, components)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.png is not None:
        plot_segment_errors(report["per_segment"], HORIZONS, args.png, errors["errors"], components)
    if args.latents is not None:
        z, stamps = latents_with_stamps(model, dataset, stamps_ns)
        args.latents.parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.latents, stamp_ns=stamps, z=z, bundle_version=np.array(bundle.version))
    print(
        f"open-loop errors ({dataset.num_transitions} transitions, residual components "
        f"{components}; the bundle records {recorded}), prior / model:"
    )
    print(error_table(errors, report["per_segment"]))
    return 0


def _cell(errors: dict, kind: str) -> str:
    """``prior / model`` of one error kind, angles in degrees."""
    scale = np.degrees(1.0) if kind.endswith("_rad") else 1.0
    return f"{errors['prior'][kind] * scale:.4f} / {errors['model'][kind] * scale:.4f}"


def error_table(overall: dict, per_segment: list[dict]) -> str:
    """Text table of the errors (prior / model) of every segment and overall, one row per
    segment and horizon; ``overall`` is what :func:`open_loop_errors` returns, ``per_segment``
    the entries of :func:`segment_errors`."""
    heads = [k.removesuffix("_rad") + "_deg" if k.endswith("_rad") else k for k in ERROR_KINDS]
    lines = ["  ".join([f"{'segment':>8}", f"{'H':>3}", f"{'windows':>7}"])]
    lines[0] += "".join(f"  {head:>{CELL_WIDTH}}" for head in heads)
    rows = [(str(e["segment"]), e) for e in per_segment]
    windows = overall["num_windows"]
    rows.append(("all", {h: {**e, "windows": windows[h]} for h, e in overall["errors"].items()}))
    for name, entry in rows:
        for horizon in HORIZONS:
            errors = entry.get(str(horizon))
            if errors is None:
                continue
            cells = "".join(f"  {_cell(errors, kind):>{CELL_WIDTH}}" for kind in ERROR_KINDS)
            count = f"{errors['windows']:>7}"
            lines.append("  ".join([f"{name:>8}", f"{horizon:>3}", count]) + cells)
    return "\n".join(lines)
