"""Repeat one learner update of a ``vnd fly`` run offline, with FitConfig fields changed, and
time the deployed encoder at the wind onsets of the recorded flight (session 10 experiment).

    python onset_refit.py RUN_DIR INIT_VERSION UPTO_S ['{"splice_fraction": 0.1}']

The update starts from the run's bundle ``INIT_VERSION`` with the replay ticks before scenario
time ``UPTO_S``, as the live learner did. The new bundle's encoder then reads the whole flight
through the flight's ``LatentEstimator``. For each onset it prints the fraction of the way from
the old condition's mean latent to the new one's, 0.1 s apart; the first time that stays above
0.8 for 0.2 s; and its spread in the new condition's steady part. SAVE_BUNDLE=PATH keeps the
bundle.
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from vnd_core import flight_report as fr
from vnd_core.bundle import load_bundle, save_bundle
from vnd_core.evaluation.replay_bag import read_transitions
from vnd_core.flight.encoder_runtime import LatentEstimator
from vnd_core.learner import ContinualLearner, LearnerConfig
from vnd_ros.commands import fly

# (name, onset [s], before (from, to) [s], after (from, to) [s]) of recurring_wind
ONSETS = (
    ("A1", 20.0, (10.0, 19.5), (30.0, 55.0)),
    ("B", 90.0, (75.0, 89.5), (100.0, 150.0)),
    ("A2", 170.0, (155.0, 169.5), (180.0, 205.0)),
)


def refit(run: Path, init_version: int, upto_s: float, fit_changes: dict):
    """The update's bundle, the flight's records and their scenario times [s]."""
    meta = json.loads((run / "flight_meta.json").read_text())
    flight = fly.read_flight(run / "bag", meta["vehicle"])
    clock = fr.ScenarioClock(flight.clock_points, meta["real_time_factor"])
    records = read_transitions(run / "learner" / "replay")
    t_s = clock.to_scenario_s(records.stamp_ns)
    init = load_bundle(run / "learner" / "bundles" / f"v{init_version:04d}.safetensors")
    config = LearnerConfig.standard()
    config = dataclasses.replace(config, fit=dataclasses.replace(config.fit, **fit_changes))
    learner = ContinualLearner(init.vehicle, config, init)
    learner.ingest(records.take(np.flatnonzero(t_s < upto_s)))
    result = learner.update()
    print("update", result.accepted, result.reason, round(result.total_s, 1), flush=True)
    if result.bundle is None:
        raise SystemExit("the update produced no bundle")
    return result.bundle, records, t_s


def encode(model, records) -> np.ndarray:
    """Latent (N, nz) after each tick as the encoder node computes it (NaN while invalid)."""
    estimator = LatentEstimator()
    estimator.set_model(model)
    latents = np.full((len(records.stamp_ns), model.latent_dim), np.nan)
    for i, stamp in enumerate(records.stamp_ns):
        estimator.add_odometry(int(stamp), records.state[i])
        estimator.add_command(int(stamp), records.action[i])
        z = estimator.latent()
        if z is not None:
            latents[i] = z
    return latents


def onset_figures(latents: np.ndarray, t_s: np.ndarray) -> dict:
    """Per onset: the way from the old mean latent to the new one, t80 and steady spread."""

    def mean_in(span):
        keep = (t_s >= span[0]) & (t_s < span[1]) & np.isfinite(latents[:, 0])
        return latents[keep].mean(0)

    out = {}
    for name, onset, before, after in ONSETS:
        z_before, z_after = mean_in(before), mean_in(after)
        d = z_after - z_before
        way = (latents - z_before) @ d / (d @ d)
        profile = {
            f"{k:.1f}": round(float(way[np.argmin(abs(t_s - onset - k))]), 2)
            for k in np.arange(0.0, 1.01, 0.1)
        }
        window = np.flatnonzero((t_s >= onset) & (t_s < onset + 5))
        above = way[window] > 0.8
        t80 = next(
            (round(float(t_s[window[j]] - onset), 2) for j in range(len(window) - 10)
             if above[j : j + 10].all()),
            None,
        )  # fmt: skip
        steady = (t_s >= after[0]) & (t_s < after[1]) & np.isfinite(way)
        out[name] = {
            "t80_s": t80,
            "steady_std": round(float(way[steady].std()), 3),
            "dist": round(float(np.linalg.norm(d)), 2),
            "proj": profile,
        }
    return out


def main() -> None:
    torch.set_num_threads(1)
    run, init_version, upto_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    fit_changes = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    bundle, records, t_s = refit(run, init_version, upto_s, fit_changes)
    if os.environ.get("SAVE_BUNDLE"):
        save_bundle(bundle, Path(os.environ["SAVE_BUNDLE"]))
    figures = onset_figures(encode(bundle.model, records), t_s)
    summary = {"run": str(run), "init": init_version, "upto_s": upto_s, "fit": fit_changes}
    print(json.dumps({**summary, "onsets": figures}))


if __name__ == "__main__":
    main()
