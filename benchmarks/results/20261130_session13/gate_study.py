"""Which validation cost tells an update that forgets a condition from one that does not?
(session 13 study)

    python gate_study.py OUT.jsonl RUN_DIR [RUN_DIR ...]

For every update of each run's registry (v1 -> v2 ... v4 -> v5) it rebuilds the learner's gate
4 (the replay up to the start of that update, the candidate's own model, its dynamics as the
learner built them) and keeps every rollout's cost, for several eval-set designs:

- ``r64``: the shipped one (64 rollouts of 100 ticks);
- ``r256``: 256 rollouts of 100 ticks;
- ``r256_steady``: the same 256 rollouts flown 200 ticks, scored over the last 100 only.

Per design it writes the overall means and, per group of a k-means (k = 3) of the candidate
model's latents of the rollouts' windows, the means and the group's simulator condition labels
(ground truth, never seen by the gate). ``bundle_truth.py`` gives the true-plant outcome.
"""

import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from model_forgetting import labelled_replay
from vnd_core.bundle import load_bundle
from vnd_core.learner import ContinualLearner, LearnerConfig
from vnd_core.learner import validation as val
from vnd_core.learner.policy_update import TrustRegion, anchored_dynamics, residual_bound

BASE = (
    Path(__file__).resolve().parents[3]
    / "ros2_ws/src/vnd_core/vnd_core/data/base_agile.safetensors"
)


def kmeans(z: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Labels (N,) of a plain k-means on the rows of z (k-means++-free: seeded picks)."""
    rng = np.random.default_rng(seed)
    centres = z[rng.choice(len(z), k, replace=False)]
    for _ in range(50):
        labels = np.argmin(((z[:, None] - centres[None]) ** 2).sum(-1), axis=1)
        centres = np.array(
            [z[labels == j].mean(0) if (labels == j).any() else centres[j] for j in range(k)]
        )
    return labels


def design(learner, active, candidate, dataset, dynamics, rollouts, ticks, score_from):
    """Per-rollout costs of both policies and the windows' ground-truth condition names."""
    v = dataclasses.replace(learner.config.validation, eval_rollouts=rollouts)
    model = candidate.model
    eval_set = val.make_eval_set(model, active.model, active.policy.latent_dim, dataset, v)
    generator = torch.Generator().manual_seed(v.seed)  # the draw make_eval_set makes first
    starts = dataset.window_starts(model.context_len, 0)
    pick = starts[torch.randint(len(starts), (rollouts,), generator=generator)]
    label_ids = dataset.tensors()["labels"][pick + model.context_len - 1].numpy()
    names = {i: n for n, i in learner.label_ids.items()}
    conditions = [names.get(int(i), "?") for i in label_ids]
    delay = model.config.action_delay_ticks or v.delay_ticks
    dt_s = model.prior.config.dt_s

    def errors(policy, z):
        full = val.rollout_errors(
            policy, z, dynamics, eval_set, ticks, v.crash_distance_m, dt_s, delay
        )
        if score_from == 0:
            return full
        head = val.rollout_errors(
            policy, z, dynamics, eval_set, score_from, v.crash_distance_m, dt_s, delay
        )
        return (full * ticks - head * score_from) / (ticks - score_from)

    cand = errors(candidate.policy, eval_set.z_model).numpy()
    act = errors(active.policy, eval_set.z_active).numpy()
    return cand, act, eval_set.z_model.numpy(), conditions


def summarise(cand, act, z, conditions, k=3) -> dict:
    """Overall and per-k-means-group means, and the groups' condition make-up."""
    out = {"overall": [round(float(cand.mean()), 4), round(float(act.mean()), 4)]}
    labels = kmeans(z, k)
    for j in range(k):
        m = labels == j
        if not m.any():
            continue
        out[f"g{j}"] = {
            "n": int(m.sum()),
            "cand": round(float(cand[m].mean()), 4),
            "act": round(float(act[m].mean()), 4),
            "rel": round(float(cand[m].mean() / act[m].mean() - 1.0), 4),
            "paired_se": round(
                float((cand[m] - act[m]).std() / np.sqrt(m.sum()) / act[m].mean()), 4
            ),
            "conditions": dict(Counter(c for c, keep in zip(conditions, m, strict=True) if keep)),
        }
    return out


def main() -> None:
    torch.set_num_threads(1)
    out_path = Path(sys.argv[1])
    base = load_bundle(BASE)
    for run in map(Path, sys.argv[2:]):
        records, _, conditions = labelled_replay(run)
        records.condition = conditions  # ground truth, read back from the dataset's labels
        index = json.loads((run / "learner" / "bundles" / "index.json").read_text())
        meta = json.loads((run / "flight_meta.json").read_text())
        previous = base
        for entry in index["bundles"]:
            candidate = load_bundle(run / "learner" / "bundles" / entry["file"])
            cutoff_wall_s = entry["decided_wall_s"] - entry["metrics"]["timing_s"]["total"]
            learner = ContinualLearner(previous.vehicle, LearnerConfig.standard(), previous)
            learner.ingest(records.take(np.flatnonzero(records.stamp_ns < cutoff_wall_s * 1e9)))
            dataset = learner._dataset(candidate.model.prior)
            c = learner.config
            dynamics = anchored_dynamics(
                candidate.model, residual_bound(dataset), c.residual_components,
                trust_region=TrustRegion.of_dataset(dataset),
            )  # fmt: skip
            row = {
                "run": run.name,
                "from": previous.version,
                "to": candidate.version,
                "cutoff_s": round(cutoff_wall_s - meta["wall_start_s"], 1),
            }
            for name, rollouts, ticks, score_from in (
                ("r64", 64, 100, 0),
                ("r256", 256, 100, 0),
                ("r256_steady", 256, 200, 100),
            ):
                parts = design(
                    learner, previous, candidate, dataset, dynamics, rollouts, ticks, score_from
                )
                row[name] = summarise(*parts)
            with out_path.open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
            previous = candidate


if __name__ == "__main__":
    main()
