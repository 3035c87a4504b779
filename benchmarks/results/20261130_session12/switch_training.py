"""Policy training with condition switches (``TrainerConfig.switch_fraction``), with everything
else fixed (session 12 experiment).

    [CHANGES='{"model": {"short_context_len": 8}}'] \
    python switch_training.py RUN_DIR UPTO_S SEEDS FRACTION [FRACTION ...]

For each switch fraction, fits a new model from the shipped base bundle on the demo run's
replay up to UPTO_S (session 11's ``onset_refit.refit``; the fit is seeded, so every fraction
gets the same model, which is checked) and trains the update's policy with that fraction; then
flies the bundle in simulated time from wind B into wind A with the encoder, SEEDS plant seeds
(session 10's ``latent_lag_probe``), and once more with the latent switched to wind A's at
the onset (no encoder lag: the floor). Prints one JSON object per fraction. ``CHANGES``: more
LearnerConfig changes (as session 11's ``onset_refit.py`` takes them) for every fraction.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from vnd_core.config_io import apply_overrides
from vnd_core.learner import LearnerConfig

RESULTS = Path(__file__).resolve().parent.parent


def _load(folder: str, name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_{folder}", RESULTS / folder / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


session11 = _load("20261130_session11", "onset_refit.py")
probe = _load("20261130_session10", "latent_lag_probe.py")


def probe_bundle(bundle, seeds: int) -> dict:
    """Encoder runs per seed, the instant-switch floor of seed 0, and their means."""
    scenario = probe.b_then_a()
    runs = {}
    for seed in range(seeds):
        result = probe.fly(bundle, scenario, seed)
        runs[f"encoder_s{seed}"] = probe.summary(result)
    t, z = probe.latents_of(result, bundle.model)
    z_b = np.nanmean(z[(t > 10) & (t < probe.ONSET_S - 0.2)], 0).astype(np.float32)
    z_a = np.nanmean(z[(t > probe.ONSET_S + 5) & (t < probe.END_S - 1)], 0).astype(np.float32)
    instant = probe.fly(bundle, scenario, 0, lambda t_s: z_a if t_s >= probe.ONSET_S else z_b)
    runs["instant_s0"] = probe.summary(instant)
    encoder = [v for k, v in runs.items() if k.startswith("encoder")]
    runs["encoder_mean"] = {
        key: round(float(np.mean([r[key] for r in encoder])), 4) for key in encoder[0]
    }
    return runs


def main() -> None:
    torch.set_num_threads(1)
    run, upto_s, seeds = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    reference_model = None
    for fraction in (float(f) for f in sys.argv[4:]):
        trainer = apply_overrides(
            LearnerConfig.standard().trainer, {"switch_fraction": fraction}, "trainer"
        )
        changes = {**json.loads(os.environ.get("CHANGES", "{}")), "trainer": trainer}
        bundle, _, _ = session11.refit(run, 0, upto_s, changes)
        weights = bundle.model.state_dict()
        if reference_model is None:
            reference_model = weights
        same = all(torch.equal(weights[k], reference_model[k]) for k in weights)
        runs = probe_bundle(bundle, seeds)
        print(json.dumps({"switch_fraction": fraction, "same_model": same, **runs}), flush=True)


if __name__ == "__main__":
    main()
