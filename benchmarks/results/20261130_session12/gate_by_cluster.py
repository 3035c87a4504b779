"""Would a per-condition gate have caught a candidate that is better overall and worse on one
condition? (session 12 diagnostic)

    python gate_by_cluster.py RUN_DIR ACTIVE_VERSION CANDIDATE_VERSION UPTO_S

Rebuilds the learner's validation of the update that made CANDIDATE_VERSION from ACTIVE_VERSION
(the replay up to UPTO_S, the candidate's own model, its dynamics as the learner built them),
keeps the cost of every rollout instead of the mean, groups the rollouts by k-means (k = 3) of
the candidate model's latents of their windows, and prints the candidate's and the active
policy's mean cost per group.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from vnd_core import flight_report as fr
from vnd_core.bundle import load_bundle
from vnd_core.evaluation.replay_bag import read_transitions
from vnd_core.learner import ContinualLearner, LearnerConfig
from vnd_core.learner import validation as val
from vnd_core.learner.policy_update import TrustRegion, anchored_dynamics, residual_bound
from vnd_ros.commands import fly


def per_rollout_cost(policy, z, dynamics, eval_set, v, dt_s, delay) -> torch.Tensor:
    """The gate's rollout errors (R,), one per rollout (``validation.rollout_errors``)."""
    return val.rollout_errors(
        policy, z, dynamics, eval_set, v.eval_ticks, v.crash_distance_m, dt_s, delay
    )


def kmeans(z: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Labels (N,) of a plain k-means on the rows of z."""
    rng = np.random.default_rng(seed)
    centres = z[rng.choice(len(z), k, replace=False)]
    for _ in range(50):
        labels = np.argmin(((z[:, None] - centres[None]) ** 2).sum(-1), axis=1)
        centres = np.array(
            [z[labels == j].mean(0) if (labels == j).any() else centres[j] for j in range(k)]
        )
    return labels


def main() -> None:
    torch.set_num_threads(1)
    run, active_v, cand_v, upto_s = (
        Path(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        float(sys.argv[4]),
    )
    meta = json.loads((run / "flight_meta.json").read_text())
    flight = fly.read_flight(run / "bag", meta["vehicle"])
    clock = fr.ScenarioClock(flight.clock_points, meta["real_time_factor"])
    records = read_transitions(run / "learner" / "replay")
    t_s = clock.to_scenario_s(records.stamp_ns)
    active = load_bundle(run / "learner" / "bundles" / f"v{active_v:04d}.safetensors")
    candidate = load_bundle(run / "learner" / "bundles" / f"v{cand_v:04d}.safetensors")
    learner = ContinualLearner(active.vehicle, LearnerConfig.standard(), active)
    learner.ingest(records.take(np.flatnonzero(t_s < upto_s)))
    model = candidate.model
    dataset = learner._dataset(model.prior)
    c, v = learner.config, learner.config.validation
    dynamics = anchored_dynamics(
        model, residual_bound(dataset), c.residual_components,
        trust_region=TrustRegion.of_dataset(dataset),
    )  # fmt: skip
    eval_set = val.make_eval_set(model, active.model, active.policy.latent_dim, dataset, v)
    delay = model.config.action_delay_ticks or v.delay_ticks
    dt_s = model.prior.config.dt_s
    cand = per_rollout_cost(candidate.policy, eval_set.z_model, dynamics, eval_set, v, dt_s, delay)
    act = per_rollout_cost(active.policy, eval_set.z_active, dynamics, eval_set, v, dt_s, delay)
    labels = kmeans(eval_set.z_model.numpy(), 3)
    out = {
        "overall": {
            "candidate": round(float(cand.mean()), 4),
            "active": round(float(act.mean()), 4),
        }
    }
    for j in range(3):
        m = torch.from_numpy(labels == j)
        out[f"group{j}"] = {
            "rollouts": int(m.sum()),
            "calm_share": round(float(eval_set.calm[m].float().mean()), 2),
            "candidate": round(float(cand[m].mean()), 4),
            "active": round(float(act[m].mean()), 4),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
