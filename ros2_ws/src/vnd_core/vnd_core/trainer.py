"""Differentiable-simulation policy trainer (short-horizon back-propagation through time).

Each iteration rolls every environment forward ``horizon_ticks`` control ticks through a
differentiable ``dynamics(state, action, z)``, sums the tracking cost, back-propagates through the
whole window and takes one Adam step (SHAC-style short horizons, without the learned value tail).
Between windows the environment state is detached: that is where BPTT is cut
(:meth:`PolicyTrainer._cut_bptt`).

The training environment wraps the dynamics with what the deployed plant has and the prior lacks,
so the policy learns to fly the true vehicle: a random command delay of 1..3 ticks, random
first-order lags on thrust and body-rate commands (motors), a random linear drag, and observation
noise. None of that is put into the
dynamics callable itself: the prior stays the prior.

The latent z of an episode is drawn once by the caller's sampler.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from vnd_core.compiled_rollout import compiled_graphs, compiled_tick
from vnd_core.policy import PolicyNet
from vnd_core.reference import Trajectory
from vnd_core.rollout import (
    ForceReading,
    WindowState,
    WindowTerms,
    rollout_window,
    window_tick,
)
from vnd_core.so3 import exp_map, quat_mul
from vnd_core.state import OMEGA, POS, QUAT, STATE_DIM, VEL, hover_state
from vnd_core.trainer_config import (
    Dynamics,
    Progress,
    TrainerConfig,
    ZSampler,
    normal_latent,
    prior_dynamics,
    zero_latent,
)
from vnd_core.vehicle import VehicleParams

# The trainer's configuration, roll-out and compile wrapper live in their own modules; the
# names importers use stay importable from here.
__all__ = [
    "Dynamics",
    "EnvBatch",
    "PolicyTrainer",
    "Progress",
    "TrainerConfig",
    "ZSampler",
    "compiled_graphs",
    "normal_latent",
    "prior_dynamics",
    "zero_latent",
]


@dataclass
class EnvBatch:
    """State of the B training environments (tensors batched on dim 0)."""

    state: torch.Tensor  # (B, 13) true state of the training environment
    tick: torch.Tensor  # (B,) ticks since the episode started
    t_s: torch.Tensor  # (B,) reference time
    history: torch.Tensor  # (B, 4 K) past normalised commands, newest first
    applied: torch.Tensor  # (B, 4) physical command after delay and thrust lag
    z: torch.Tensor  # (B, nz) latent of the episode's condition (dynamics and observation)
    delay_weights: torch.Tensor  # (B, 1, K + 1) one-hot over command age 0..K
    lag_alpha: torch.Tensor  # (B, 4) command filter gain per tick (1 = no lag)
    drag: torch.Tensor  # (B, 13) velocity decrement per unit state (drag * dt in VEL slots)
    reading: torch.Tensor  # (B, 3) force a force-input policy reads now, N (zeros: none)
    trajectory: Trajectory  # per-environment reference


class PolicyTrainer:
    """Trains ``policy`` by back-propagating tracking cost through ``dynamics`` rollouts."""

    def __init__(
        self,
        policy: PolicyNet,
        dynamics: Dynamics,
        vehicle: VehicleParams,
        config: TrainerConfig | None = None,
        z_sampler: ZSampler | None = None,
        force_reading: ForceReading | None = None,
    ) -> None:
        self.policy = policy
        # a force-input policy's per-tick reading (rollout.ForceReading); None: the condition's
        # force columns are read as drawn
        self.force_reading = force_reading
        self.dynamics = dynamics
        self.vehicle = vehicle
        self.config = config or TrainerConfig()
        self.config.validate()
        self.z_sampler = z_sampler or zero_latent(policy.condition_dim)
        self.generator = torch.Generator().manual_seed(self.config.seed)
        torch.manual_seed(self.config.seed)
        self.builder = policy.observation
        self.n_prev_cols = 4 * policy.config.n_prev_actions
        self.history_len = max(policy.config.n_prev_actions, self.config.delay_ticks_max, 1)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.config.learning_rate)
        self.iteration = 0
        self.noise_std = self._noise_std()
        c = self.config
        # lags and drag drawn as 0 leave the command and state as they are: skip their ops
        self.has_lag = c.thrust_lag_max_s > 0.0 or c.rate_lag_max_s > 0.0
        self.has_drag = c.drag_max_per_s > 0.0
        self.cost_weights = self._cost_weights()
        self.env = self._new_envs(self.config.num_envs)
        # stagger episodes so resets do not all land on the same window
        self.env.tick = torch.randint(
            0, self.config.episode_ticks, (self.config.num_envs,), generator=self.generator
        )

    # ---- environments -------------------------------------------------------------------
    def _uniform(self, low: float, high: float, *shape: int) -> torch.Tensor:
        return low + (high - low) * torch.rand(*shape, generator=self.generator)

    def _randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator)

    def _noise_std(self) -> torch.Tensor:
        c = self.config
        std = torch.zeros(STATE_DIM)
        std[POS] = c.obs_noise_pos_m
        std[VEL] = c.obs_noise_vel_mps
        std[OMEGA] = c.obs_noise_rate_radps
        std[QUAT.start + 1 : QUAT.stop] = 0.5 * c.obs_noise_attitude_rad  # small-angle q = (1, θ/2)
        return std

    def _new_envs(self, batch: int) -> EnvBatch:
        """Fresh episodes: random reference, perturbed state, plant quirks."""
        c = self.config
        trajectory = Trajectory.random(
            batch, generator=self.generator, kind_probs=c.reference_kind_probs
        )
        t_s = torch.zeros(batch)
        ref = trajectory.sample(t_s)
        state = hover_state((batch,))
        state[:, POS] = ref.position_m + c.init_pos_std_m * self._randn(batch, 3)
        state[:, VEL] = ref.velocity_mps + c.init_vel_std_mps * self._randn(batch, 3)
        tilt = exp_map(c.init_tilt_std_rad * self._randn(batch, 3))
        state[:, QUAT] = quat_mul(state[:, QUAT], tilt)
        state[:, OMEGA] = c.init_rate_std_radps * self._randn(batch, 3)
        delay = torch.randint(
            c.delay_ticks_min, c.delay_ticks_max + 1, (batch,), generator=self.generator
        )
        delay_weights = torch.nn.functional.one_hot(delay, self.history_len + 1).float()
        tau_s = torch.cat(
            [
                self._uniform(0.0, c.thrust_lag_max_s, batch, 1),
                self._uniform(0.0, c.rate_lag_max_s, batch, 1).expand(batch, 3),
            ],
            dim=1,
        )
        lag_alpha = 1.0 - torch.exp(-c.dt_s / tau_s.clamp_min(1e-6))
        drag = torch.zeros(batch, STATE_DIM)
        drag[:, VEL] = c.dt_s * self._uniform(0.0, c.drag_max_per_s, batch, 1)
        z = self.z_sampler(batch, self.generator)
        # an episode starts with the observer settled on the condition's force
        reading = z[:, :3].clone() if self.force_reading is not None else torch.zeros(batch, 3)
        return EnvBatch(
            state=state,
            tick=torch.zeros(batch, dtype=torch.long),
            t_s=t_s,
            history=torch.zeros(batch, 4 * self.history_len),
            applied=self.policy.action_offset.expand(batch, 4).clone(),
            z=z,
            delay_weights=delay_weights.unsqueeze(1),
            lag_alpha=lag_alpha,
            drag=drag,
            reading=reading,
            trajectory=trajectory,
        )

    def _reset_done(self) -> int:
        """Replace finished or diverged episodes by fresh ones; returns how many were reset."""
        env, c = self.env, self.config
        ref_p = env.trajectory.sample(env.t_s).position_m
        dist = (env.state[:, POS] - ref_p).norm(dim=-1)
        done = (env.tick >= c.episode_ticks) | ~(dist < c.crash_distance_m)
        n_done = int(done.sum())
        if n_done:
            fresh = self._new_envs(env.state.shape[0])
            self.env = _merge(env, fresh, done)
        return n_done

    def _cut_bptt(self) -> None:
        """Detach the carried environment state: gradients never cross a window boundary."""
        env = self.env
        env.state = env.state.detach()
        env.history = env.history.detach()
        env.applied = env.applied.detach()
        env.reading = env.reading.detach()

    # ---- one window ---------------------------------------------------------------------
    def _window_references(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Reference terms of the whole window in one call (they need no gradient).

        Returns ``ref_state`` (H + 1, B, 13) and ``ref_head`` (H + 1, B, head_dim), tick-major
        so each tick reads a contiguous slice.
        """
        c = self.config
        steps = torch.arange(c.horizon_ticks + 1) * c.dt_s
        times = self.builder.sample_times(self.env.t_s.unsqueeze(0) + steps.unsqueeze(1))
        ref = self.env.trajectory.sample(times.transpose(0, 1))  # (B, H + 1, 1 + L, 3)
        ref_state, ref_head = self.builder.reference_features(ref)
        return ref_state.transpose(0, 1).contiguous(), ref_head.transpose(0, 1).contiguous()

    def _bound_dynamics(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The dynamics under this window's latents: ``step(state (B, 13), action (B, 4))``.

        A dynamics carrying ``bind_latent(z) -> step`` (``anchored_dynamics``) computes what
        depends on z alone once here instead of every tick; z is fixed through an episode.
        """
        z = self.env.z
        bind = getattr(self.dynamics, "bind_latent", None)
        if bind is not None:
            return bind(z)
        dynamics = self.dynamics
        return lambda state, action: dynamics(state, action, z)

    def _window_cost(
        self,
        ref_state: torch.Tensor,
        ref_head: torch.Tensor,
        noise: torch.Tensor,
        delay_index: torch.Tensor,
    ) -> torch.Tensor:
        """Roll every environment through the window; returns the summed cost (B,).

        ``ref_state`` (H + 1, B, 13), ``ref_head`` (H + 1, B, head_dim) from
        :meth:`_window_references`; ``noise`` (H, B, 13) standard-normal observation-noise
        draws; ``delay_index`` (B, 1, 4) from :meth:`_delay_index`. The carried state, command
        history and applied command advance to the window's end. With ``compile`` on, the
        tick runs as one graph compiled once per process (:func:`compiled_tick`).
        """
        env, c = self.env, self.config
        reads = self.force_reading is not None
        cost, env.state, env.history, env.applied, reading = rollout_window(
            self.policy,
            self.builder,
            self._bound_dynamics(),
            WindowState(
                state=env.state,
                history=env.history,
                applied=env.applied,
                z=env.z,
                lag_alpha=env.lag_alpha if self.has_lag else None,
                drag=env.drag if self.has_drag else None,
                reading=env.reading if reads else None,
                force_reading=self.force_reading,
            ),
            WindowTerms(
                ref_state=ref_state,
                ref_head=ref_head,
                noise=noise * self.noise_std,
                delay_index=delay_index,
                cost_weights=self.cost_weights,
            ),
            c,
            compiled_tick() if c.compile else window_tick,
        )
        if reading is not None:
            env.reading = reading
        return cost

    def _delay_index(self) -> torch.Tensor:
        """Command age per environment from the one-hot ``delay_weights``, as a (B, 1, 4) index
        for ``gather`` over the (B, K + 1, 4) command history."""
        age = self.env.delay_weights.argmax(dim=-1, keepdim=True)  # (B, 1, 1)
        return age.expand(-1, 1, 4)

    def _cost_weights(self) -> torch.Tensor:
        """Per-state-component weights (13,) of the squared tracking error."""
        c = self.config
        w = torch.zeros(STATE_DIM)
        w[POS], w[VEL], w[OMEGA] = c.w_pos, c.w_vel, c.w_rate
        return w

    def _learning_rate(self) -> float:
        c = self.config
        frac = min(self.iteration / max(c.iterations, 1), 1.0)
        return c.learning_rate * (1.0 - (1.0 - c.final_lr_fraction) * frac)

    def train_iteration(self) -> dict:
        """One window: roll out, back-propagate, clip, Adam step, reset finished episodes."""
        c = self.config
        self._cut_bptt()
        ref_state, ref_head = self._window_references()
        batch = self.env.state.shape[0]
        # one draw for the window: the same numbers, in the same order, as one draw per tick
        noise = self._randn(c.horizon_ticks, batch, STATE_DIM)
        total = self._window_cost(ref_state, ref_head, noise, self._delay_index())
        loss = total.mean() / c.horizon_ticks
        with torch.no_grad():
            pos_err = (self.env.state[:, POS] - ref_state[-1][:, POS]).norm(dim=-1).mean()
        for group in self.optimizer.param_groups:
            group["lr"] = self._learning_rate()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), c.grad_clip_norm)
        self.optimizer.step()
        self.env.tick = self.env.tick + c.horizon_ticks
        self.env.t_s = self.env.t_s + c.horizon_ticks * c.dt_s
        n_reset = self._reset_done()
        self.iteration += 1
        return {
            "loss": float(loss.detach()),
            "pos_error_m": float(pos_err),
            "grad_norm": float(grad_norm),
            "resets": n_reset,
        }

    def train(self, iterations: int | None = None, progress: Progress | None = None) -> dict:
        """Run ``iterations`` windows (default from config); returns a JSON-able summary."""
        iterations = self.config.iterations if iterations is None else iterations
        start = time.perf_counter()
        history: list[dict] = []
        for i in range(iterations):
            metrics = self.train_iteration()
            history.append(metrics)
            if progress is not None:
                progress(i + 1, iterations, metrics)
        wall_s = time.perf_counter() - start
        tail = history[-max(1, len(history) // 10) :]
        env_steps = iterations * self.config.num_envs * self.config.horizon_ticks
        return {
            "iterations": iterations,
            "env_steps": env_steps,
            "wall_time_s": round(wall_s, 2),
            "env_steps_per_s": round(env_steps / max(wall_s, 1e-9), 1),
            "first_loss": history[0]["loss"] if history else None,
            "final_loss": sum(m["loss"] for m in tail) / len(tail) if tail else None,
            "final_pos_error_m": sum(m["pos_error_m"] for m in tail) / len(tail) if tail else None,
            "config": asdict(self.config),
        }


def _merge(old: EnvBatch, new: EnvBatch, mask: torch.Tensor) -> EnvBatch:
    """Environments where ``mask`` (B,) is true come from ``new``, the rest from ``old``."""

    def pick(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(mask.view(-1, *([1] * (a.dim() - 1))), b, a)

    traj_old, traj_new = old.trajectory, new.trajectory
    trajectory = Trajectory.__new__(Trajectory)
    for name in ("kind", "center_m", "amplitude_m", "omega_radps", "phase_rad"):
        setattr(trajectory, name, pick(getattr(traj_old, name), getattr(traj_new, name)))
    fields = {
        name: pick(getattr(old, name), getattr(new, name))
        for name in EnvBatch.__dataclass_fields__
        if name != "trajectory"
    }
    return EnvBatch(**fields, trajectory=trajectory)
