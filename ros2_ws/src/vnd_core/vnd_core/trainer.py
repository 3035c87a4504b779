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

from vnd_core.policy import PolicyNet
from vnd_core.reference import Trajectory
from vnd_core.so3 import exp_map, quat_mul
from vnd_core.state import OMEGA, POS, QUAT, STATE_DIM, VEL, hover_state
from vnd_core.vehicle import VehicleParams

# dynamics(state (B, 13), action (B, 4), z (B, nz)) -> next state (B, 13), differentiable
Dynamics = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# z_sampler(batch_size, generator) -> z (B, nz), drawn once per episode
ZSampler = Callable[[int, torch.Generator], torch.Tensor]
# progress(iteration, total, metrics)
Progress = Callable[[int, int, dict], None]


@dataclass(frozen=True)
class TrainerConfig:
    """Hyper-parameters of the differentiable-simulation trainer."""

    num_envs: int = 512  # environments simulated in parallel
    horizon_ticks: int = 32  # BPTT window length; state is detached between windows
    episode_ticks: int = 300  # an environment is reset after this many ticks (6 s)
    iterations: int = 400  # optimiser steps (one per window)
    learning_rate: float = 2e-3  # Adam step size at the start
    final_lr_fraction: float = 0.05  # learning rate decays linearly to this fraction
    grad_clip_norm: float = 1.0  # global gradient-norm clip
    seed: int = 0  # seeds every random draw of the run
    dt_s: float = 0.02  # control period of the dynamics callable
    # tracking cost weights (per tick, averaged over environments)
    # Position weights shared by the base and the learner's policy training: with them the base
    # policy flies a 4 m/s wind at 0.114 m and calm air at 0.022 m, against 0.164 m and 0.025 m
    # with a third of them. Stiffer weights (4.5, 6) track calm air closer still, but the
    # demo's returning wind A flies no better with them (0.044 and 0.048 m).
    w_pos: float = 3.0  # squared position error, per m^2
    w_pos_abs: float = 1.5  # position error norm, per m (sharpens the optimum near zero)
    w_vel: float = 0.05  # squared velocity error, per (m/s)^2
    w_rate: float = 0.005  # squared body rates, per (rad/s)^2
    w_smooth: float = 0.3  # squared change of the normalised command between ticks
    w_yaw: float = 1.0  # squared sine of the heading error (reference heading is 0)
    reference_kind_probs: tuple[float, float, float] = (0.3, 0.4, 0.3)  # hover, figure8, circle
    # initial states: perturbations around the reference
    init_pos_std_m: float = 0.3  # position offset, per axis
    init_vel_std_mps: float = 0.3  # velocity offset, per axis
    init_tilt_std_rad: float = 0.2  # attitude offset, per axis (rotation vector)
    init_rate_std_radps: float = 0.5  # body rates, per axis
    crash_distance_m: float = 2.0  # an environment this far from the reference is reset
    # robustness of the training environment to the real plant
    # the plant's 1-2 ticks of latency plus its motor and rate-loop dynamics act like 1-3 ticks
    delay_ticks_min: int = 1  # smallest command delay drawn per episode
    delay_ticks_max: int = 3  # largest command delay drawn per episode
    thrust_lag_max_s: float = 0.05  # thrust first-order lag, uniform in [0, this]
    rate_lag_max_s: float = 0.05  # extra body-rate command lag (motors), uniform in [0, this]
    drag_max_per_s: float = 0.4  # linear drag acceleration per m/s, uniform in [0, this]
    obs_noise_pos_m: float = 0.002  # observation noise on position
    obs_noise_vel_mps: float = 0.02  # observation noise on velocity
    obs_noise_rate_radps: float = 0.05  # observation noise on body rates
    obs_noise_attitude_rad: float = 0.005  # observation noise on attitude (rotation angle)

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        for name in ("num_envs", "horizon_ticks", "episode_ticks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.delay_ticks_min <= self.delay_ticks_max:
            raise ValueError(
                "command delays must satisfy 0 <= delay_ticks_min <= delay_ticks_max, got "
                f"{self.delay_ticks_min} and {self.delay_ticks_max}"
            )


def prior_dynamics(model: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Dynamics:
    """Adapt a z-free model ``f(state, action)`` (e.g. NominalModel) to the dynamics signature."""

    def dynamics(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return model(state, action)

    return dynamics


def zero_latent(latent_dim: int) -> ZSampler:
    """z-sampler of the base policy: z = 0."""
    return lambda batch, generator: torch.zeros(batch, latent_dim)


def normal_latent(latent_dim: int) -> ZSampler:
    """z ~ N(0, I), one draw per episode (data-driven domain randomisation)."""
    return lambda batch, generator: torch.randn(batch, latent_dim, generator=generator)


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
    ):
        self.policy = policy
        self.dynamics = dynamics
        self.vehicle = vehicle
        self.config = config or TrainerConfig()
        self.config.validate()
        self.z_sampler = z_sampler or zero_latent(policy.latent_dim)
        self.generator = torch.Generator().manual_seed(self.config.seed)
        torch.manual_seed(self.config.seed)
        self.builder = policy.observation
        self.n_prev_cols = 4 * policy.config.n_prev_actions
        self.history_len = max(policy.config.n_prev_actions, self.config.delay_ticks_max, 1)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.config.learning_rate)
        self.iteration = 0
        self.noise_std = self._noise_std()
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

    def _step(
        self,
        ref_state: torch.Tensor,
        ref_head: torch.Tensor,
        ref_state_next: torch.Tensor,
        noise: torch.Tensor,
        delay_index: torch.Tensor,
    ) -> torch.Tensor:
        """Advance every environment one tick; returns the per-environment cost (B,).

        ``noise`` (B, 13) standard-normal draws of this tick's observation noise;
        ``delay_index`` (B, 1, 4) command age of each environment (see :meth:`_delay_index`).
        """
        env = self.env
        noisy = torch.addcmul(env.state, self.noise_std, noise)
        prev_obs = env.history[:, : self.n_prev_cols]
        obs = self.builder.build(noisy, ref_state, ref_head, prev_obs, env.z)
        u = self.policy.forward_normalised(obs)  # (B, 4) in [-1, 1]
        commands = torch.cat([u, env.history], dim=1)  # ages 0..K, newest first
        # picking the delayed command by index equals the one-hot product, with fewer ops
        delayed = commands.view(-1, self.history_len + 1, 4).gather(1, delay_index)
        target = self.policy.to_physical(delayed.squeeze(1))
        applied = torch.addcmul(env.applied, env.lag_alpha, target - env.applied)
        nxt = self.dynamics(env.state, applied, env.z)
        nxt = torch.addcmul(nxt, env.drag, env.state, value=-1.0)  # linear drag, not in prior
        cost = self._cost(nxt - ref_state_next, u - env.history[:, :4], nxt[:, QUAT])
        env.state, env.applied = nxt, applied
        env.history = commands[:, : 4 * self.history_len]
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

    def _cost(self, error: torch.Tensor, du: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Per-environment cost (B,).

        ``error`` (B, 13) state minus reference state (rates against zero), ``du`` (B, 4) change
        of the normalised command, ``q`` (B, 4) attitude (reference heading is zero yaw).
        """
        c = self.config
        sq = error.square()
        pos_sq = sq[:, POS].sum(-1)
        heading_sin = 2.0 * (q[:, 1] * q[:, 2] + q[:, 0] * q[:, 3])  # R10: body x towards y
        return (
            sq @ self.cost_weights
            + c.w_pos_abs * torch.sqrt(pos_sq + 1e-6)
            + c.w_smooth * du.square().sum(-1)
            + c.w_yaw * heading_sin.square()
        )

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
        delay_index = self._delay_index()
        total = torch.zeros(batch)
        for h in range(c.horizon_ticks):
            total = total + self._step(
                ref_state[h], ref_head[h], ref_state[h + 1], noise[h], delay_index
            )
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
