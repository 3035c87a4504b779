"""Forward + backward environment steps per second of the policy trainer.

1024 environments, one torch thread, the nominal model as dynamics: times whole training
iterations (roll-out of one BPTT window, backward, Adam step, resets) after a warm-up.
Prints one JSON object as the last line: {"env_steps_per_s": ...} (wall clock, mean over the
timed iterations), plus the best iteration and CPU-time based rates (mean and best iteration) for
shared machines, and the 1-minute load average so a loaded run can be recognised.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from vnd_core.dynamics import NominalModel
from vnd_core.policy import PolicyNet
from vnd_core.trainer import PolicyTrainer, TrainerConfig, prior_dynamics
from vnd_core.vehicle import load_vehicle


def main() -> None:
    """Measure and print the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=1024, help="parallel environments")
    parser.add_argument("--iterations", type=int, default=16, help="timed iterations")
    parser.add_argument("--vehicle", default="agile", help="vehicle name")
    args = parser.parse_args()
    torch.set_num_threads(1)
    vehicle = load_vehicle(args.vehicle)
    config = TrainerConfig(num_envs=args.envs)
    trainer = PolicyTrainer(
        PolicyNet(vehicle), prior_dynamics(NominalModel(vehicle)), vehicle, config
    )
    for _ in range(2):  # warm-up: allocator and autograd caches
        trainer.train_iteration()
    times, cpu_times = [], []
    cpu_start = time.process_time()
    for _ in range(args.iterations):
        start, cpu_iter_start = time.perf_counter(), time.process_time()
        trainer.train_iteration()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_iter_start)
    cpu_s = time.process_time() - cpu_start
    steps = args.envs * config.horizon_ticks
    times.sort()
    result = {
        "env_steps_per_s": round(steps / (sum(times) / len(times)), 1),
        "env_steps_per_s_best": round(steps / times[0], 1),
        # CPU-time based figure: what a quiet machine would give when this one is shared
        "env_steps_per_cpu_s": round(steps * args.iterations / cpu_s, 1),
        "env_steps_per_cpu_s_best": round(steps / min(cpu_times), 1),  # least-disturbed iteration
        "load_average_1min": round(os.getloadavg()[0], 2),  # > 1 means the core was shared
        "num_envs": args.envs,
        "horizon_ticks": config.horizon_ticks,
        "threads": 1,
        "iterations": args.iterations,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
