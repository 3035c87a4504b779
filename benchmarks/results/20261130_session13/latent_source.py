"""Is a bundle's error under a condition the policy's or the in-flight latent's? (session 13)

    python latent_source.py RUN_DIR VERSION_OR_BUNDLE_FILE [...]

For each registry bundle, flies ``bundle_truth.calm_a_b`` on the true plant twice: with the
bundle's encoder in the loop (as deployed), and with z held at the mean latent the same encoder
gives the run's replay windows of the flying condition (calm, wind A, wind B; replay up to
170 s). Also prints how far the in-flight latent sits from that mean, and its spread, per phase.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from bundle_truth import PHASE_S, calm_a_b
from model_forgetting import labelled_replay
from vnd_core.bundle import load_bundle
from vnd_core.evaluation import continual_loop as cl
from vnd_core.learner import LearnerConfig
from vnd_core.learner.segmenter import to_segments
from vnd_core.vnd.data import TransitionDataset

NAMES = ("calm", "wind_a", "wind_b")


def replay_contexts(run: Path, model, condition: str) -> torch.Tensor:
    """Context features (N, C, 28) of every replay window of ``condition`` (replay to 170 s)."""
    config = LearnerConfig.standard()
    records, t_s, conditions = labelled_replay(run)
    keep = np.flatnonzero((conditions == condition) & (t_s > 2.0) & (t_s < 170.0))
    segments = to_segments(records.take(keep), config.control_period_s, config.gap_factor)
    dataset = TransitionDataset(model.prior, segments, model.config.action_delay_ticks)
    return dataset.context(dataset.window_starts(model.context_len, 0), model.context_len)


def replay_means(run: Path, model) -> dict[str, np.ndarray]:
    """Mean latent (nz,) of the model's encoder over the replay windows of each condition."""
    with torch.no_grad():
        return {
            name: model.encoder(replay_contexts(run, model, name)).mean(0).numpy() for name in NAMES
        }


def flown(bundle, z_of_t=None):
    """Steady errors per phase [m] and the flight, encoder or ``z_of_t`` latents."""
    original = cl._Flight.act
    if z_of_t is not None:

        def act(self, measured, t_s, stamp_ns, plant):
            return self.runner.act(measured, t_s, z_of_t(t_s)), True

        cl._Flight.act = act
    try:
        result = cl.run_method(cl.Method("probe", bundle, cl.LATENT_ENCODER), calm_a_b(), 0)
    finally:
        cl._Flight.act = original
    t, e = result.time_s, result.error_m
    errors = {}
    for k, name in enumerate(NAMES):
        rows = (t >= (k + 0.5) * PHASE_S) & (t < (k + 1) * PHASE_S)
        errors[name] = round(float(np.sqrt(np.mean(np.square(e[rows])))) * 100, 2)
    return errors, result


def main() -> None:
    torch.set_num_threads(1)
    run = Path(sys.argv[1])
    for item in sys.argv[2:]:
        path = (
            Path(item)
            if item.endswith(".safetensors")
            else (run / "learner" / "bundles" / f"v{int(item):04d}.safetensors")
        )
        bundle = load_bundle(path)
        version = item
        means = replay_means(run, bundle.model)
        encoder_cm, result = flown(bundle)
        estimator = cl.LatentEstimator()
        estimator.set_model(bundle.model)
        zs = []
        for i, stamp in enumerate(result.records.stamp_ns):
            estimator.add_odometry(int(stamp), result.records.state[i])
            estimator.add_command(int(stamp), result.records.action[i])
            z = estimator.latent()
            zs.append(z if z is not None else np.full(bundle.model.latent_dim, np.nan))
        zs, t = np.array(zs), result.time_s
        offset = {}
        for k, name in enumerate(NAMES):
            rows = (t >= (k + 0.5) * PHASE_S) & (t < (k + 1) * PHASE_S)
            gap = np.nanmean(zs[rows], 0) - means[name]
            offset[name] = {
                "mean_gap": round(float(np.linalg.norm(gap)), 3),
                "spread": round(float(np.nanstd(zs[rows], 0).mean()), 3),
                "between_conditions": round(float(np.linalg.norm(means[name] - means["calm"])), 3),
            }
        fixed_cm, _ = flown(
            bundle,
            lambda t_s, means=means: means[NAMES[min(int(t_s // PHASE_S), 2)]].astype(np.float32),
        )
        row = {"run": run.name, "version": version, "encoder_cm": encoder_cm,
               "fixed_z_cm": fixed_cm, "latent": offset}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
