"""Which encoder inputs differ between the replay's wind B, the new policy's wind B on the true
plant, and the new policy's wind B on its own learned model? (session 13 diagnostic)

    python context_shift.py RUN_DIR BUNDLE_FILE [CONDITION]

Prints, per context feature (16 dynamics inputs, 12 prior-error components), the mean of each of
the three window sets in the encoder's normalised units, largest true-plant shift first.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from bundle_truth import PHASE_S, calm_a_b
from latent_source import replay_means
from onpolicy_gap import onpolicy_latents  # noqa: F401  (same rollout settings)
from vnd_core.bundle import load_bundle
from vnd_core.evaluation import continual_loop as cl
from vnd_core.vnd.features import context_features

NAMES = [
    *[f"vel_{a}" for a in "xyz"], *[f"rot6_{i}" for i in range(6)], *[f"rate_{a}" for a in "xyz"],
    "thrust", *[f"cmd_rate_{a}" for a in "xyz"],
    *[f"err_pos_{a}" for a in "xyz"], *[f"err_rot_{a}" for a in "xyz"],
    *[f"err_vel_{a}" for a in "xyz"], *[f"err_rate_{a}" for a in "xyz"],
]  # fmt: skip


def flight_contexts(bundle, phase: int) -> torch.Tensor:
    """Context features (N, C, 28) of the bundle's own flight of calm_a_b's phase (its 2nd half)."""
    model = bundle.model
    c, d = model.context_len, model.config.action_delay_ticks
    result = cl.run_method(cl.Method("probe", bundle, cl.LATENT_ENCODER), calm_a_b(), 0)
    states = torch.as_tensor(result.records.state).float()
    actions = torch.as_tensor(result.records.action).float()
    t = result.time_s
    rows = np.flatnonzero((t >= (phase + 0.5) * PHASE_S) & (t < (phase + 1) * PHASE_S))
    windows = [
        context_features(model.prior, states[i - c : i + 1], actions[i - c - d : i - d])
        for i in rows
        if i - c - d >= 0
    ]
    return torch.stack(windows)


def main() -> None:
    torch.set_num_threads(1)
    run, bundle = Path(sys.argv[1]), load_bundle(sys.argv[2])
    condition = sys.argv[3] if len(sys.argv) > 3 else "wind_b"
    phase = ("calm", "wind_a", "wind_b").index(condition)
    import latent_source

    captured = {}
    original = latent_source.replay_means

    model = bundle.model
    means = original(run, model)
    # replay windows of the condition: rebuild them as replay_means does
    import json

    from latent_source import condition_of, fly, fr, read_transitions, to_segments
    from vnd_core.learner import LearnerConfig
    from vnd_core.scenario import load_scenario
    from vnd_core.vnd.data import TransitionDataset

    config = LearnerConfig.standard()
    meta = json.loads((run / "flight_meta.json").read_text())
    flight = fly.read_flight(run / "bag", meta["vehicle"])
    clock = fr.ScenarioClock(flight.clock_points, meta["real_time_factor"])
    records = read_transitions(run / "learner" / "replay")
    t_s = clock.to_scenario_s(records.stamp_ns)
    conditions = condition_of(t_s, load_scenario(meta["scenario"]))
    keep = np.flatnonzero((conditions == condition) & (t_s > 2.0) & (t_s < 170.0))
    segments = to_segments(records.take(keep), config.control_period_s, config.gap_factor)
    dataset = TransitionDataset(model.prior, segments, model.config.action_delay_ticks)
    replay = dataset.context(dataset.window_starts(model.context_len, 0), model.context_len)
    plant = flight_contexts(bundle, phase)
    norm = model.encoder.normalizer
    with torch.no_grad():
        a = norm(replay).mean((0, 1)).numpy()
        b = norm(plant).mean((0, 1)).numpy()
        za = model.encoder(replay).mean(0)
        zb = model.encoder(plant).mean(0)
    captured["latent_gap"] = float((za - zb).norm())
    print(f"latent gap replay vs true-plant flight: {captured['latent_gap']:.3f}; "
          f"replay mean vs calm {np.linalg.norm(means[condition] - means['calm']):.3f}")  # fmt: skip
    groups = {"vel": slice(0, 3), "rot6": slice(3, 9), "rate": slice(9, 12),
              "command": slice(12, 16), "prior_error": slice(16, 28)}  # fmt: skip
    with torch.no_grad():
        for name, cols in groups.items():
            # the flight's windows with this group shifted by the replay-minus-flight mean
            shifted = plant.clone()
            shifted[..., cols] += (replay.mean((0, 1)) - plant.mean((0, 1)))[cols]
            moved = float((model.encoder(shifted).mean(0) - za).norm())
            print(f"flight windows with {name:>11} moved to the replay's mean: gap {moved:.3f}")
    order = np.argsort(-abs(b - a))
    for i in order[:14]:
        print(f"{NAMES[i]:>12}  replay {a[i]:+7.3f}  plant {b[i]:+7.3f}")


if __name__ == "__main__":
    main()
