"""The learned model's steady wind against the plant's, where the policy trains on it.

Flies VND (the standard learner preset) through a scenario in simulated time, as ``vnd eval``
does, then takes the model the final policy was trained against and, for one constant-wind
condition of the scenario, compares three accelerations along the translational residual:

- ``data``: on the replay's windows of that condition, the prior's error (the residual target),
  the model's residual under each window's own latent, and the plant's drag law at the logged
  states with the scenario's wind (the true disturbance: the prior has no drag);
- ``rollouts``: in the policy training's own rollouts (the learner's trainer settings and
  training dynamics, the final policy, latents drawn from that condition's windows), the
  residual the dynamics apply and the plant's drag law at the rollout states with the wind.

A policy trained on a model whose rollouts meet a fraction of the wind corrects about that
fraction of it in flight. Prints one JSON object last: per-phase flight RMSE (whole phase and
its second half), the updates, and the accelerations above (m/s^2, world frame, means).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys

import numpy as np
import torch
from vnd_core import so3
from vnd_core.bundle import Bundle, load_bundle, shipped_bundle_path
from vnd_core.evaluation.continual_loop import VNDMethod, run_method
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.continual import ContinualLearner
from vnd_core.learner.policy_update import (
    TrustRegion,
    anchored_dynamics,
    anchored_latent,
    on_model_environment,
    residual_bound,
)
from vnd_core.learner.records import TickRecords
from vnd_core.learner.replay_view import replay_dataset
from vnd_core.policy import PolicyNet
from vnd_core.scenario import Scenario, WindEvent, load_scenario
from vnd_core.state import QUAT, VEL
from vnd_core.trainer import PolicyTrainer
from vnd_core.trainer_config import LatentBoundDynamics, Step
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.model import EncodedLatents, VNDModel
from vnd_flight.evaluation_flight import fly_runtime

ROLLOUT_WINDOWS = 12  # training windows rolled out (the policy is a copy and is not kept)
WARMUP_WINDOWS = 2  # windows left out of the rollout means (staggered episode starts)


def drag_accel_mps2(
    vehicle: VehicleParams, quat: torch.Tensor, vel_mps: torch.Tensor, wind_mps: torch.Tensor
) -> torch.Tensor:
    """The plant's drag acceleration (B, 3) at attitudes (B, 4) and velocities (B, 3) in wind
    ``wind_mps`` (3,): linear plus quadratic drag of the body air velocity (plant.py)."""
    lin = torch.tensor(vehicle.drag_linear_nspm)
    quad = torch.tensor(vehicle.drag_quadratic_ns2pm2)
    air_b = so3.rotate_inverse(quat, vel_mps - wind_mps)
    return so3.rotate(quat, -(lin + quad * air_b.abs()) * air_b) / vehicle.mass_kg


def phase_rmse(scenario: Scenario, time_s: np.ndarray, error_m: np.ndarray) -> dict:
    """RMSE [m] of each phase, whole and its second half, keyed ``index:name``."""
    starts = [p.start_s for p in scenario.phases] + [scenario.duration_s]
    out = {}
    for i, phase in enumerate(scenario.phases):
        lo, hi = starts[i], starts[i + 1]
        whole = (time_s >= lo) & (time_s < hi)
        late = (time_s >= (lo + hi) / 2) & (time_s < hi)
        out[f"{i}:{phase.name}"] = [
            round(float(np.sqrt(np.mean(error_m[m] ** 2))), 4) for m in (whole, late)
        ]
    return out


def constant_wind(scenario: Scenario, condition: str) -> torch.Tensor:
    """Velocity (3,) of the constant wind blowing from the start of phase ``condition``."""
    for phase in scenario.phases:
        if phase.name != condition:
            continue
        for event in scenario.events:
            if not isinstance(event, WindEvent) or event.velocity_mps is None:
                continue
            if event.kind == "constant" and abs(event.at_s - phase.start_s) < 1e-6:
                return torch.tensor(event.velocity_mps, dtype=torch.float32)
    raise SystemExit(f"{scenario.name}: no constant wind starts with a phase {condition!r}")


def encoded_replay(
    bundle: Bundle, model: VNDModel, config: LearnerConfig, records: TickRecords
) -> tuple[TransitionDataset, EncodedLatents, dict[str, int]]:
    """``records`` as the learner's replay holds them (its dataset and condition label ids),
    every window with a next transition encoded by ``model``, the model of ``bundle``."""
    learner = ContinualLearner(bundle.vehicle, config, bundle)
    learner.ingest(records)
    dataset = replay_dataset(
        learner.replay, config, learner.label_ids, model.prior, model.config.action_delay_ticks
    )
    return dataset, model.encode_all(dataset, horizon=1), learner.label_ids


def rollout_accels(
    model: VNDModel,
    bundle_policy: PolicyNet,
    vehicle: VehicleParams,
    config: LearnerConfig,
    dataset_bound: torch.Tensor,
    region: TrustRegion,
    latents: torch.Tensor,
    wind_mps: torch.Tensor,
) -> dict:
    """Mean residual and plant drag accelerations (3,) over the training rollouts of a copy
    of the policy, latents drawn from ``latents`` (M, nz)."""
    inner = anchored_dynamics(model, dataset_bound, config.residual_components, trust_region=region)
    if not isinstance(inner, LatentBoundDynamics):
        raise TypeError("the training dynamics bind their latent once per window")
    dt_s = model.prior.config.dt_s
    applied: list[torch.Tensor] = []
    plant: list[torch.Tensor] = []

    def bind(z: torch.Tensor) -> Step:
        step = inner.bind_latent(z)

        def recorded(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
            out = step(state, action)
            with torch.no_grad():
                prior_vel = model.prior(state, action)[:, VEL]
                applied.append((out[:, VEL] - prior_vel) / dt_s)
                plant.append(drag_accel_mps2(vehicle, state[:, QUAT], state[:, VEL], wind_mps))
            return out

        return recorded

    policy = copy.deepcopy(bundle_policy)
    trainer_config = on_model_environment(config.trainer)
    sampler = anchored_latent(model.latent_dim, 0.0, latents, 1.0)
    trainer = PolicyTrainer(policy, LatentBoundDynamics(bind), vehicle, trainer_config, sampler)
    for _ in range(ROLLOUT_WINDOWS):
        trainer.train_iteration()
    skip = WARMUP_WINDOWS * trainer_config.horizon_ticks
    residual = torch.cat(applied[skip:])
    truth = torch.cat(plant[skip:])
    return {
        "residual_mps2": residual.mean(0).tolist(),
        "plant_mps2": truth.mean(0).tolist(),
        "rms_difference_mps2": float((residual - truth).norm(dim=-1).square().mean().sqrt()),
    }


def main() -> None:
    """Fly, then measure the gap; print the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="hover_wind_long")
    parser.add_argument("--condition", default="wind_large", help="phase of a constant wind")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    scenario = load_scenario(args.scenario)
    wind_mps = constant_wind(scenario, args.condition)
    base = load_bundle(shipped_bundle_path())
    config = LearnerConfig.standard()
    method = VNDMethod(base, config)
    run = run_method(method, scenario, args.seed, fly_runtime)
    print(f"flown in {run.wall_s:.0f} s", file=sys.stderr)
    bundle = run.final_bundle
    model = bundle.model
    result: dict = {
        "scenario": args.scenario,
        "seed": args.seed,
        "rmse_m": phase_rmse(scenario, run.time_s, run.error_m),
        "updates": [dataclasses.asdict(u) for u in run.updates],
    }
    if model is None:
        print(json.dumps(result))
        return
    dataset, latents, label_ids = encoded_replay(bundle, model, config, run.records)
    label = label_ids[args.condition]
    chosen = latents.labels == label
    rows = (latents.starts + model.context_len)[chosen]
    tensors = dataset.tensors()
    dt_s = model.prior.config.dt_s
    with torch.no_grad():
        predicted = model.residual(tensors["inputs"][rows], latents.z[chosen])
    state = tensors["state"][rows]
    result["data_mps2"] = {
        "target": (tensors["targets"][rows, 6:9].mean(0) / dt_s).tolist(),
        "model": (predicted[:, 6:9].mean(0) / dt_s).tolist(),
        "plant": drag_accel_mps2(bundle.vehicle, state[:, QUAT], state[:, VEL], wind_mps)
        .mean(0)
        .tolist(),
    }
    result["rollouts_mps2"] = rollout_accels(
        model,
        bundle.policy,
        bundle.vehicle,
        config,
        residual_bound(dataset),
        TrustRegion.of_dataset(dataset),
        latents.z[chosen],
        wind_mps,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
