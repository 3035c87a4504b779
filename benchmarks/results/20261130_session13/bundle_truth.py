"""Steady tracking error of demo bundles on the true plant, per condition (session 13 study).

    python bundle_truth.py OUT.jsonl RUN_DIR [RUN_DIR ...]

Flies every bundle of each run's registry (and the shipped base bundle once) in simulated time
through calm air, recurring_wind's wind A and its wind B, 20 s each, on the demo's figure-eight,
with the bundle's encoder in the loop, and writes one JSON line per bundle: the RMS error over
the last 10 s of each phase. This is the ground truth a per-condition gate is judged against:
did an update fly a condition it had already met worse than its parent?
"""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
from vnd_core.bundle import load_bundle
from vnd_core.evaluation import continual_loop as cl
from vnd_core.scenario import Phase, load_scenario

PHASE_S = 20.0
BASE = (
    Path(__file__).resolve().parents[3]
    / "ros2_ws/src/vnd_core/vnd_core/data/base_agile.safetensors"
)


def calm_a_b():
    """Calm, then recurring_wind's wind A, then its wind B, PHASE_S each."""
    base = load_scenario("recurring_wind")
    wind = {e.at_s: e for e in base.events}
    return dataclasses.replace(
        base,
        name="calm_a_b",
        duration_s=3 * PHASE_S,
        phases=(Phase("calm", 0.0), Phase("wind_a", PHASE_S), Phase("wind_b", 2 * PHASE_S)),
        events=(
            dataclasses.replace(wind[20.0], at_s=PHASE_S),
            dataclasses.replace(wind[90.0], at_s=2 * PHASE_S),
        ),
    )


def steady_errors(bundle, seed: int = 0) -> dict:
    """RMS error [m] over the last half of each phase of :func:`calm_a_b`."""
    mode = cl.LATENT_ENCODER if bundle.model is not None else cl.LATENT_NONE
    result = cl.run_method(cl.Method("truth", bundle, mode), calm_a_b(), seed)
    t, e = result.time_s, result.error_m
    out = {}
    for k, name in enumerate(("calm", "wind_a", "wind_b")):
        rows = (t >= (k + 0.5) * PHASE_S) & (t < (k + 1) * PHASE_S)
        out[name] = round(float(np.sqrt(np.mean(np.square(e[rows])))), 4)
    return out


def main() -> None:
    torch.set_num_threads(1)
    out_path = Path(sys.argv[1])
    with out_path.open("a") as out:
        row = {"run": "base", "version": 1, **steady_errors(load_bundle(BASE))}
        out.write(json.dumps(row) + "\n")
        out.flush()
        for run in map(Path, sys.argv[2:]):
            for path in sorted((run / "learner" / "bundles").glob("v*.safetensors")):
                bundle = load_bundle(path)
                row = {"run": run.name, "version": bundle.version, **steady_errors(bundle)}
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
