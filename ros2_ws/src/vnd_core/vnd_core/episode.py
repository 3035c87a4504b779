"""Closed-loop episodes of a policy on the true plant, in simulated time.

The policy runs at 50 Hz on the plant's noisy measurement, exactly as deployed; B environments
(one noise stream each) fly the same scenario in one batch. Used by ``vnd sim`` and ``vnd eval``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.force_observer import ForceObserver
from vnd_core.plant import TruePlant
from vnd_core.plant_parts import PlantConfig
from vnd_core.policy import PolicyNet
from vnd_core.scenario import Scenario
from vnd_core.state import POS, QUAT

# latent_source(measured state (B, 13), previous command (B, 4)) -> z (B, nz), once per tick
LatentSource = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class EpisodeResult:
    """Per-tick record of a batch of B episodes of T ticks, plus summary metrics."""

    time_s: np.ndarray  # (T,) scenario time at the end of each tick
    position_m: np.ndarray  # (T, B, 3) true position
    reference_m: np.ndarray  # (T, B, 3) reference position at the same time
    error_m: np.ndarray  # (T, B) position error norm
    actions: np.ndarray  # (T, B, 4) CTBR commands sent
    condition: list[str]  # (T,) scenario phase name
    crashed: np.ndarray  # (B,) bool, sticky crash flag at the end
    metrics: dict = field(default_factory=dict)  # see :func:`episode_metrics`


def episode_metrics(error_m: np.ndarray, crashed: np.ndarray, dt_s: float) -> dict:
    """Summary of errors (T, B): RMSE and max over all ticks and environments, crash flag, mean
    error of each whole second (list), and per-environment RMSE."""
    ticks_per_s = round(1.0 / dt_s)
    n_seconds = error_m.shape[0] // ticks_per_s
    per_second = error_m[: n_seconds * ticks_per_s].reshape(n_seconds, ticks_per_s, -1)
    return {
        "rmse_m": float(np.sqrt(np.mean(error_m**2))),
        "max_error_m": float(np.max(error_m)),
        "crashed": bool(np.any(crashed)),
        "crash_count": int(np.sum(crashed)),
        "per_second_error_m": [float(x) for x in per_second.mean(axis=(1, 2))],
        "per_env_rmse_m": [float(x) for x in np.sqrt(np.mean(error_m**2, axis=0))],
    }


def run_episode(
    policy: PolicyNet,
    scenario: Scenario,
    duration_s: float | None = None,
    batch_size: int = 1,
    seed: int = 0,
    plant_config: PlantConfig | None = None,
    latent_source: LatentSource | None = None,
) -> EpisodeResult:
    """Fly ``scenario`` for ``duration_s`` (default: the scenario's) with ``policy``.

    ``latent_source`` supplies z each tick (the encoder, later); without it z = 0 (base policy).
    A policy with a force input flies as the policy node flies it: a
    :class:`~vnd_core.force_observer.ForceObserver` gives it the force and its commands go out
    with the observer's body-rate compensation (one environment only: ValueError otherwise).
    """
    if policy.force_dim and batch_size != 1:
        raise ValueError(
            f"a policy with a force input flies one environment (its observer's), got {batch_size}"
        )
    observer = ForceObserver(policy.vehicle) if policy.force_dim else None
    duration_s = scenario.duration_s if duration_s is None else duration_s
    n_ticks = round(duration_s / CONTROL_PERIOD_S)
    plant = TruePlant(policy.vehicle, scenario, batch_size, plant_config, seed=seed)
    plant.reset(scenario.start_state(batch_size))
    trajectory = scenario.trajectory(batch_size)
    builder = policy.observation
    n_prev = policy.config.n_prev_actions
    prev = policy.action_offset.expand(batch_size, max(n_prev, 1), 4).clone()
    z = torch.zeros(batch_size, policy.latent_dim)
    record: dict[str, list] = {"t": [], "p": [], "ref": [], "act": [], "cond": []}
    policy.eval()
    with torch.inference_mode():
        for _ in range(n_ticks):
            t_now = torch.full((batch_size,), plant.time_s)
            measured = plant.measure()
            if latent_source is not None:
                z = latent_source(measured, prev[:, 0])
            force_n = None
            if observer is not None:
                observer.observe(measured[0].double().numpy())
                force_n = torch.from_numpy(observer.policy_force_n()).float()[None]
            condition = builder.condition(z, force_n)
            obs = builder.build_from(measured, trajectory, t_now, prev[:, :n_prev], condition)
            action = policy(obs)
            sent = action
            if observer is not None:  # the policy's history keeps what it asked for
                compensated = observer.compensate(
                    action[0].double().numpy(), measured[0, QUAT].double().numpy()
                )
                observer.command(compensated)
                sent = torch.from_numpy(compensated).float()[None]
            state = plant.step(sent)
            prev = torch.cat([action.unsqueeze(1), prev[:, :-1]], dim=1)
            t_s = plant.time_s
            ref = trajectory.sample(torch.full((batch_size,), t_s)).position_m
            record["t"].append(t_s)
            record["p"].append(state[:, POS].numpy())
            record["ref"].append(ref.numpy())
            record["act"].append(sent.numpy())
            record["cond"].append(plant.condition())
    position = np.stack(record["p"])
    reference = np.stack(record["ref"])
    error = np.linalg.norm(position - reference, axis=-1)
    crashed = plant.crashed.numpy()
    return EpisodeResult(
        time_s=np.asarray(record["t"]),
        position_m=position,
        reference_m=reference,
        error_m=error,
        actions=np.stack(record["act"]),
        condition=record["cond"],
        crashed=crashed,
        metrics=episode_metrics(error, crashed, CONTROL_PERIOD_S),
    )
