"""Forward + backward environment steps per second of the policy trainer, eager and compiled.

Two configurations, one torch thread, in one run:

- ``learner``: the learner's policy training as ``train_policy_on_model`` runs it (the
  standard preset's 256 environments and 32-tick windows; prior plus the FiLM residual of a
  VND model fitted on a short synthetic two-condition flight, anchors, clip, trust region,
  forces only, z drawn from the replay latents);
- ``prior``: the base policy's training on the nominal model alone (1024 environments, the full
  training environment with lags and drag).

Each is timed eager and with ``TrainerConfig.compile`` (the first compiled iteration pays the
compilation; it is reported apart, then the timed iterations follow a warm-up). Whole training
iterations are timed: roll-out of one BPTT window, backward, Adam step, resets.

Prints one JSON object as the last line: per configuration and mode the env-steps per wall
second and per CPU second (mean over the timed iterations and the best iteration: the best is
what a quiet core gives when the machine is shared), the compile time, and the 1-minute load
average before and after (above 1 the core was shared).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Callable

import torch
from vnd_core.dynamics import NominalModel
from vnd_core.learner.continual import LearnerConfig
from vnd_core.learner.policy_update import TrustRegion, on_model_trainer, residual_bound
from vnd_core.policy import PolicyNet
from vnd_core.trainer import PolicyTrainer, TrainerConfig, compiled_graphs, prior_dynamics
from vnd_core.vehicle import VehicleParams, load_vehicle
from vnd_core.vnd.fit import FitConfig, fit_vnd
from vnd_core.vnd.model import VNDModel
from vnd_core.vnd.synthetic import two_condition_segments

TrainerFactory = Callable[[TrainerConfig], PolicyTrainer]


def learner_factory(vehicle: VehicleParams, envs: int) -> tuple[TrainerFactory, TrainerConfig]:
    """Trainers of the learner's policy update on a freshly fitted model, and their config."""
    torch.manual_seed(0)
    model = VNDModel(vehicle)
    dataset = model.new_dataset(
        two_condition_segments(model.prior, (0.0, 0.0, 0.0), (3.0, 0.0, 0.0), 4, 200, seed=0)
    )
    fit = fit_vnd(model, dataset, FitConfig(steps=40, batch_size=64), warm_start=False)
    learner = LearnerConfig.standard()
    config = dataclasses.replace(learner.trainer, num_envs=envs)
    bound, region = residual_bound(dataset), TrustRegion.of_dataset(dataset)
    pool = fit.latents.z if fit.latents is not None else None

    def make(trainer_config: TrainerConfig) -> PolicyTrainer:
        torch.manual_seed(0)
        return on_model_trainer(
            PolicyNet(vehicle),
            model,
            vehicle,
            trainer_config,
            anchor_fraction=learner.anchor_fraction,
            residual_bound=bound,
            latent_pool=pool,
            pool_fraction=learner.pool_fraction,
            pool_weights=None,
            components=learner.residual_components,
            trust_region=region,
        )

    return make, config


def prior_factory(vehicle: VehicleParams, envs: int) -> tuple[TrainerFactory, TrainerConfig]:
    """Trainers of the base policy on the nominal model, and their config."""
    config = TrainerConfig(num_envs=envs)

    def make(trainer_config: TrainerConfig) -> PolicyTrainer:
        torch.manual_seed(0)
        return PolicyTrainer(
            PolicyNet(vehicle), prior_dynamics(NominalModel(vehicle)), vehicle, trainer_config
        )

    return make, config


def time_iterations(trainer: PolicyTrainer, iterations: int) -> dict:
    """Env-steps per wall and CPU second of ``iterations`` training iterations."""
    walls, cpus = [], []
    for _ in range(iterations):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        trainer.train_iteration()
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    steps = trainer.config.num_envs * trainer.config.horizon_ticks
    return {
        "env_steps_per_s": round(steps * len(walls) / sum(walls), 1),
        "env_steps_per_s_best": round(steps / min(walls), 1),
        "env_steps_per_cpu_s": round(steps * len(cpus) / sum(cpus), 1),
        "env_steps_per_cpu_s_best": round(steps / min(cpus), 1),
    }


def measure(make: TrainerFactory, config: TrainerConfig, iterations: int) -> dict:
    """Eager and compiled figures of one configuration."""
    eager = make(dataclasses.replace(config, compile=False))
    for _ in range(2):  # warm-up: allocator and autograd caches
        eager.train_iteration()
    result = {"num_envs": config.num_envs, "eager": time_iterations(eager, iterations)}
    compiled = make(dataclasses.replace(config, compile=True))
    graphs = compiled_graphs()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    compiled.train_iteration()  # compiles (or loads from inductor's on-disk cache)
    first_wall_s, first_cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    compiled.train_iteration()
    result["compiled"] = time_iterations(compiled, iterations)
    result["compiled"].update(
        first_iteration_wall_s=round(first_wall_s, 2),
        first_iteration_cpu_s=round(first_cpu_s, 2),
        graphs_compiled=compiled_graphs() - graphs,
    )
    # a second trainer (the learner's next update) must run the same graphs
    again = make(dataclasses.replace(config, compile=True))
    wall0 = time.perf_counter()
    again.train_iteration()
    result["compiled"]["second_trainer_first_iteration_wall_s"] = round(
        time.perf_counter() - wall0, 2
    )
    result["compiled"]["graphs_after_second_trainer"] = compiled_graphs() - graphs
    result["speedup_cpu_s"] = round(
        result["compiled"]["env_steps_per_cpu_s"] / result["eager"]["env_steps_per_cpu_s"], 2
    )
    return result


def main() -> None:
    """Measure and print the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner-envs", type=int, default=256, help="learner environments")
    parser.add_argument("--prior-envs", type=int, default=1024, help="prior-only environments")
    parser.add_argument("--iterations", type=int, default=10, help="timed iterations per mode")
    parser.add_argument("--vehicle", default="agile", help="vehicle name")
    parser.add_argument(
        "--only", choices=["learner", "prior"], default=None, help="time one configuration"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    vehicle = load_vehicle(args.vehicle)
    load_before = os.getloadavg()[0]
    result: dict = {"threads": 1, "iterations": args.iterations, "torch": torch.__version__}
    if args.only in (None, "learner"):
        make, config = learner_factory(vehicle, args.learner_envs)
        result["learner"] = measure(make, config, args.iterations)
        result["learner"]["horizon_ticks"] = config.horizon_ticks
    if args.only in (None, "prior"):
        make, config = prior_factory(vehicle, args.prior_envs)
        result["prior"] = measure(make, config, args.iterations)
        result["prior"]["horizon_ticks"] = config.horizon_ticks
    result["load_average_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
