"""Does the learned model reproduce the latent shift a new policy causes in flight? (session 13)

    python onpolicy_gap.py RUN_DIR VERSION [VERSION ...]

For each registry bundle and each condition (calm, wind A, wind B), its policy flies the demo's
figure-eight on its own learned model (full prediction, driven by the replay windows' latents of
that condition, 1-tick command delay) from on-reference starts at random points of the figure;
the bundle's encoder then reads the last C transitions of each rollout (states with the policy
trainer's observation noise). Prints the distance between the mean of those latents and the
mean replay latent of the condition, next to the distance between the condition's and calm's
replay means (``latent_source.py`` measures the same gap on the true plant).
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from latent_source import NAMES, replay_means
from vnd_core.bundle import load_bundle
from vnd_core.reference import ReferenceSpec, Trajectory
from vnd_core.state import POS, VEL, hover_state
from vnd_core.trainer import TrainerConfig
from vnd_core.vnd.features import context_features

ROLLOUTS, WARMUP = 128, 50


@torch.no_grad()
def onpolicy_latents(bundle, z: torch.Tensor, noise: bool = True) -> torch.Tensor:
    """Encoder latents (R, nz) of the policy's own closed loop on the model under latent z."""
    model, policy = bundle.model, bundle.policy
    c, d = model.context_len, max(model.config.action_delay_ticks, 1)
    generator = torch.Generator().manual_seed(0)
    spec = ReferenceSpec(kind="figure8", center_m=(0.0, 0.0, 1.2), amplitude_m=1.2, period_s=6.0)
    trajectory = Trajectory.from_spec(spec, ROLLOUTS)
    t0 = torch.rand(ROLLOUTS, generator=generator) * spec.period_s
    ref = trajectory.sample(t0)
    state = hover_state((ROLLOUTS,))
    state[:, POS], state[:, VEL] = ref.position_m, ref.velocity_mps
    zs = z.expand(ROLLOUTS, -1)
    n_prev = policy.config.n_prev_actions
    prev = policy.action_offset.expand(ROLLOUTS, max(n_prev, 1), 4).clone()
    in_flight = [policy.action_offset.expand(ROLLOUTS, 4)] * d
    states, applied = [state], []
    for k in range(WARMUP + c):
        t_s = t0 + k * 0.02
        obs = policy.observation.build_from(state, trajectory, t_s, prev[:, :n_prev], zs)
        action = policy(obs)
        prev = torch.cat([action.unsqueeze(1), prev[:, :-1]], dim=1)
        in_flight.append(action)
        now = in_flight.pop(0)
        applied.append(now)
        state = model.predict(state, now, zs)
        states.append(state)
    window = torch.stack(states[-(c + 1) :], dim=1)  # (R, C+1, 13)
    if noise:
        t = TrainerConfig()
        std = torch.zeros(13)
        std[POS], std[VEL] = t.obs_noise_pos_m, t.obs_noise_vel_mps
        std[10:13] = t.obs_noise_rate_radps
        window = window + std * torch.randn(window.shape, generator=generator)
    actions = torch.stack(applied[-c:], dim=1)  # (R, C, 4): the action paired with each state
    return model.encoder(context_features(model.prior, window, actions))


def main() -> None:
    torch.set_num_threads(1)
    run = Path(sys.argv[1])
    for version in map(int, sys.argv[2:]):
        bundle = load_bundle(run / "learner" / "bundles" / f"v{version:04d}.safetensors")
        means = replay_means(run, bundle.model)
        row = {"run": run.name, "version": version}
        for name in NAMES:
            z = torch.as_tensor(means[name])[None]
            for noise in (False, True):
                latents = onpolicy_latents(bundle, z, noise)
                gap = float((latents.mean(0) - z[0]).norm())
                row[f"{name}{'_noisy' if noise else ''}"] = {
                    "gap": round(gap, 3),
                    "spread": round(float(latents.std(0).mean()), 3),
                    "vs_calm": round(float(np.linalg.norm(means[name] - means["calm"])), 3),
                }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
