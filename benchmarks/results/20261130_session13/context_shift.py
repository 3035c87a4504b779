"""Which encoder inputs differ between the replay's wind B, the new policy's wind B on the true
plant, and the new policy's wind B on its own learned model? (session 13 diagnostic)

    python context_shift.py RUN_DIR BUNDLE_FILE [CONDITION]

Prints, per context feature (16 dynamics inputs, 12 prior-error components), the mean of each of
the three window sets in the encoder's normalised units, largest shift first, and the latent gap
left when one group of the flight's windows is moved to the replay's mean.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from bundle_truth import PHASE_S, calm_a_b
from latent_source import replay_contexts, replay_means
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
    model = bundle.model
    means = replay_means(run, model)
    replay = replay_contexts(run, model, condition)
    plant = flight_contexts(bundle, ("calm", "wind_a", "wind_b").index(condition))
    first = model.encoder.first_column  # what the encoder reads
    with torch.no_grad():
        a = model.encoder.normalized(replay).mean((0, 1)).numpy()
        b = model.encoder.normalized(plant).mean((0, 1)).numpy()
        gap = float((model.encoder(replay).mean(0) - model.encoder(plant).mean(0)).norm())
    to_calm = np.linalg.norm(means[condition] - means["calm"])
    print(f"latent gap replay vs flight: {gap:.3f}; replay vs calm {to_calm:.3f}")
    groups = {"vel": slice(0, 3), "rot6": slice(3, 9), "rate": slice(9, 12),
              "command": slice(12, 16), "prior_error": slice(16, 28)}  # fmt: skip
    with torch.no_grad():
        for name, cols in groups.items():
            if cols.start < first:
                continue
            # the flight's windows with this group shifted by the replay-minus-flight mean
            shifted = plant.clone()
            shifted[..., cols] += (replay.mean((0, 1)) - plant.mean((0, 1)))[cols]
            moved = float((model.encoder(shifted).mean(0) - model.encoder(replay).mean(0)).norm())
            print(f"flight windows with {name:>11} moved to the replay's mean: gap {moved:.3f}")
    for i in np.argsort(-abs(b - a))[:14]:
        print(f"{NAMES[first + i]:>12}  replay {a[i]:+7.3f}  flight {b[i]:+7.3f}")


if __name__ == "__main__":
    main()
