"""One training window's roll-out: the tick (observe, command, delay, lag, step, drag), the
window of ticks, and the tracking cost it sums (differentiable throughout).

A policy with a force input reads, every tick, the force a disturbance observer on the prior
would report there (:class:`ForceReading`): the force the prior does not explain over the
last tick (the roll-out's step against the prior's), low-pass filtered as the flight's
observer filters it. It therefore trains on the reading it gets in flight, the swing of a
wind's drag with the vehicle's velocity and the filter's lag included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vnd_core.dynamics import NominalModel
from vnd_core.force_observer import ObserverConfig
from vnd_core.policy import ObservationBuilder, PolicyNet
from vnd_core.state import POS, QUAT, VEL
from vnd_core.trainer_config import TrainerConfig


@dataclass(frozen=True)
class ForceReading:
    """How a policy with a force input reads the force during training (module docstring):
    its first three condition columns are replaced by the carried reading."""

    prior: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # the prior's step (B, 13)
    mass_kg: float  # nominal mass: acceleration to force
    dt_s: float  # control period
    alpha: float  # low-pass gain per tick (1 - exp(-dt / time constant))

    @classmethod
    def of_observer(cls, prior: NominalModel) -> ForceReading:
        """The reading of the flight's observer (its default settings) on ``prior``."""
        dt_s = prior.config.dt_s
        alpha = 1.0 - math.exp(-dt_s / ObserverConfig().time_constant_s)
        return cls(prior=prior, mass_kg=prior.vehicle.mass_kg, dt_s=dt_s, alpha=alpha)


@dataclass
class WindowState:
    """What a window's roll-out carries and reads per environment (tensors batched on dim 0)."""

    state: torch.Tensor  # (B, 13) state at the window's start
    history: torch.Tensor  # (B, 4 K) past normalised commands, newest first
    applied: torch.Tensor  # (B, 4) physical command last applied
    z: torch.Tensor  # (B, nz) latent the policy observes
    lag_alpha: torch.Tensor | None  # (B, 4) command filter gain per tick; None: no lag
    drag: torch.Tensor | None  # (B, 13) velocity decrement per unit state; None: no drag
    reading: torch.Tensor | None = None  # (B, 3) force read now, N; None: condition as drawn
    force_reading: ForceReading | None = None  # how the reading follows the roll-out


@dataclass
class WindowTerms:
    """Per-window inputs of a roll-out that need no gradient."""

    ref_state: torch.Tensor  # (H + 1, B, 13) reference state per tick (see reference_features)
    ref_head: torch.Tensor  # (H + 1, B, head_dim) reference part of the observation per tick
    noise: torch.Tensor  # (H, B, 13) observation noise per tick, in state units
    delay_index: torch.Tensor  # (B, 1, 4) command age per environment, a gather index
    cost_weights: torch.Tensor  # (13,) weights of the squared tracking error


def rollout_window(
    policy: PolicyNet,
    builder: ObservationBuilder,
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    env: WindowState,
    terms: WindowTerms,
    config: TrainerConfig,
    tick: Callable | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Roll ``env`` through H = ``terms.noise.shape[0]`` ticks of :func:`window_tick` (or the
    given ``tick``, e.g. its compiled form) under ``policy``; the tracking cost is evaluated
    once over the stacked window.

    Returns the summed cost per environment (B,) and the final state (B, 13), command history
    (B, 4 K), applied command (B, 4) and force reading (B, 3; None without one), all
    differentiable.
    """
    tick = tick or window_tick
    state, history, applied, reading = env.state, env.history, env.applied, env.reading
    first_prev = history[:, :4]
    states, commands_norm = [], []
    for h in range(terms.noise.shape[0]):
        state, u, history, applied, reading = tick(
            policy,
            builder,
            step,
            state,
            history,
            applied,
            reading,
            env,
            terms.noise[h],
            terms.ref_state[h],
            terms.ref_head[h],
            terms.delay_index,
        )
        states.append(state)
        commands_norm.append(u)
    u_all = torch.stack(commands_norm)  # (H, B, 4)
    du = u_all - torch.cat([first_prev.unsqueeze(0), u_all[:-1]])
    cost = tracking_cost(
        torch.stack(states) - terms.ref_state[1:], du, state_q(states), terms.cost_weights, config
    )
    return cost.sum(0), state, history, applied, reading


def window_tick(
    policy: PolicyNet,
    builder: ObservationBuilder,
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    state: torch.Tensor,
    history: torch.Tensor,
    applied: torch.Tensor,
    reading: torch.Tensor | None,
    env: WindowState,
    noise: torch.Tensor,
    ref_state: torch.Tensor,
    ref_head: torch.Tensor,
    delay_index: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One tick: observe the noisy state, command, pick the delayed command, filter it through
    the lag (when ``env.lag_alpha`` is given), advance ``step(state, applied)``, apply the drag
    (when ``env.drag`` is given), follow the force reading (when one is carried).

    ``state`` (B, 13), ``history`` (B, 4 K), ``applied`` (B, 4), ``reading`` (B, 3) carried;
    ``noise`` (B, 13) in state units, ``ref_state`` (B, 13), ``ref_head`` (B, head_dim) of
    this tick; ``delay_index`` (B, 1, 4). Returns the next state, the normalised command u
    (B, 4), the next history, the applied command and the next reading.
    """
    history_len = history.shape[1] // 4
    prev = history[:, : 4 * policy.config.n_prev_actions]
    condition = env.z
    if reading is not None:
        condition = torch.cat([reading, env.z[:, reading.shape[1] :]], dim=1)
    obs = builder.build(state + noise, ref_state, ref_head, prev, condition)
    u = policy.forward_normalised(obs)  # (B, 4) in [-1, 1]
    commands = torch.cat([u, history], dim=1)  # ages 0..K, newest first
    # picking the delayed command by index equals the one-hot product, with fewer ops
    delayed = commands.view(-1, history_len + 1, 4).gather(1, delay_index)
    target = policy.to_physical(delayed.squeeze(1))
    if env.lag_alpha is None:
        applied = target
    else:
        applied = torch.addcmul(applied, env.lag_alpha, target - applied)
    nxt = step(state, applied)
    if env.drag is not None:
        nxt = torch.addcmul(nxt, env.drag, state, value=-1.0)  # linear drag, not in prior
    if reading is not None and env.force_reading is not None:
        reading = next_reading(env.force_reading, reading, state, applied, nxt)
    return nxt, u, commands[:, : 4 * history_len], applied, reading


def next_reading(
    force_reading: ForceReading,
    reading: torch.Tensor,
    state: torch.Tensor,
    applied: torch.Tensor,
    nxt: torch.Tensor,
) -> torch.Tensor:
    """The reading (B, 3) in N after the tick from ``state`` (B, 13) under ``applied`` (B, 4)
    to ``nxt`` (B, 13): one low-pass step towards the force the prior does not explain."""
    r = force_reading
    unexplained_n = (r.mass_kg / r.dt_s) * (nxt[:, VEL] - r.prior(state, applied)[:, VEL])
    return torch.lerp(reading, unexplained_n, r.alpha)


def state_q(states: list[torch.Tensor]) -> torch.Tensor:
    """Attitudes (H, B, 4) of a list of H states (B, 13)."""
    return torch.stack([s[:, QUAT] for s in states])


def tracking_cost(
    error: torch.Tensor,
    du: torch.Tensor,
    q: torch.Tensor,
    cost_weights: torch.Tensor,
    config: TrainerConfig,
) -> torch.Tensor:
    """Per-tick, per-environment cost (...,).

    ``error`` (..., 13) state minus reference state (rates against zero), ``du`` (..., 4)
    change of the normalised command, ``q`` (..., 4) attitude (reference heading is zero yaw),
    ``cost_weights`` (13,) weights of the squared error.
    """
    c = config
    sq = error.square()
    pos_sq = sq[..., POS].sum(-1)
    heading_sin = 2.0 * (q[..., 1] * q[..., 2] + q[..., 0] * q[..., 3])  # R10: body x towards y
    return (
        sq @ cost_weights
        + c.w_pos_abs * torch.sqrt(pos_sq + 1e-6)
        + c.w_smooth * du.square().sum(-1)
        + c.w_yaw * heading_sin.square()
    )
