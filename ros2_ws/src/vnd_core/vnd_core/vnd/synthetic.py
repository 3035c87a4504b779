"""Synthetic flight data: the nominal model plus a known constant external force.

Used by tests and benchmarks of the VND fit (and available to the learner's tests): because the
plant differs from the prior only by a constant world-frame acceleration, the exact residual is
known, and conditions (force directions) are perfectly labelled.
"""

from __future__ import annotations

import torch

from vnd_core import so3
from vnd_core.dynamics import NominalModel
from vnd_core.state import ACTION_DIM, OMEGA, POS, QUAT, VEL, hover_state
from vnd_core.vnd.data import Segment


def smooth_noise(
    shape: tuple[int, ...], generator: torch.Generator, smoothing: float = 0.9
) -> torch.Tensor:
    """First-order filtered unit Gaussian noise of ``shape`` (ticks first), unit variance."""
    white = torch.randn(shape, generator=generator)
    out = torch.empty_like(white)
    value = white[0]
    gain = (1.0 - smoothing**2) ** 0.5  # keeps the stationary variance at 1
    for t in range(shape[0]):
        value = smoothing * value + gain * white[t]
        out[t] = value
    return out


@torch.no_grad()
def simulate_with_forces(
    prior: NominalModel,
    forces_n: torch.Tensor,
    ticks: int,
    generator: torch.Generator,
    labels: list[int] | None = None,
    thrust_noise_n: float = 1.0,
    rate_noise_radps: float = 0.6,
    level_gain: float = 2.0,
    rate_kicks_radps: torch.Tensor | None = None,
) -> list[Segment]:
    """One segment of ``ticks`` states per row of ``forces_n`` (S, 3), flown in parallel by the
    prior plus that constant world force (N); segment i gets label ``labels[i]`` (default i).
    ``rate_kicks_radps`` (S, 3), when given, is added to the body rates after every step: what
    a constant torque leaves under the prior's rate loop.

    Actions: hover thrust plus smooth noise, body rates that pull the attitude back to level
    (gain ``level_gain`` 1/s on the body-frame tilt) plus smooth noise, so the vehicle explores
    attitudes and speeds without flipping. The force enters as a constant acceleration, which
    RK4 integrates exactly: next = prior(s, a) + (a_ext dt^2 / 2 in p, a_ext dt in v).
    """
    count = forces_n.shape[0]
    labels = list(range(count)) if labels is None else labels
    dt_s = prior.config.dt_s
    accel = forces_n.float() / prior.vehicle.mass_kg
    thrust = prior.vehicle.hover_thrust_n + thrust_noise_n * smooth_noise(
        (ticks, count, 1), generator
    )
    rate_noise = rate_noise_radps * smooth_noise((ticks, count, 3), generator)
    states = torch.empty(ticks, count, hover_state().shape[-1])
    actions = torch.empty(ticks - 1, count, ACTION_DIM)
    state = hover_state((count,))
    states[0] = state
    for t in range(ticks - 1):
        rates = -level_gain * so3.log_map(state[:, QUAT]) + rate_noise[t]
        actions[t] = torch.cat([thrust[t], rates], dim=-1)
        state = prior(state, actions[t])
        state[:, POS] += 0.5 * accel * dt_s**2
        state[:, VEL] += accel * dt_s
        if rate_kicks_radps is not None:
            state[:, OMEGA] += rate_kicks_radps.float()
        states[t + 1] = state
    return [
        Segment(states=states[:, i], actions=actions[:, i], labels=torch.full((ticks,), labels[i]))
        for i in range(count)
    ]


def two_condition_segments(
    prior: NominalModel,
    force_a_n: tuple[float, float, float],
    force_b_n: tuple[float, float, float],
    segments_per_condition: int,
    ticks_per_segment: int,
    seed: int = 0,
) -> list[Segment]:
    """Alternating segments of condition 0 (force a) and condition 1 (force b), seeded."""
    generator = torch.Generator().manual_seed(seed)
    forces = torch.tensor([force_a_n, force_b_n]).repeat(segments_per_condition, 1)
    labels = [0, 1] * segments_per_condition
    return simulate_with_forces(prior, forces, ticks_per_segment, generator, labels)
