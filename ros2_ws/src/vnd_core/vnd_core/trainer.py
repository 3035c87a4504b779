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
from typing import cast

import torch

from vnd_core.policy import ObservationBuilder, PolicyNet
from vnd_core.reference import Trajectory
from vnd_core.so3 import exp_map, quat_mul
from vnd_core.state import OMEGA, POS, QUAT, STATE_DIM, VEL, hover_state
from vnd_core.vehicle import VehicleParams

# dynamics(state (B, 13), action (B, 4), z (B, nz)) -> next state (B, 13), differentiable; it
# may carry bind_latent(z) -> step(state, action), which the trainer calls once per window
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
    # run each window's roll-out as one torch.compile graph (compiled once per process and
    # reused by every trainer of the same shapes; the first window pays the compilation)
    compile: bool = False

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
    ) -> None:
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
        cost, env.state, env.history, env.applied = rollout_window(
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


@dataclass
class WindowState:
    """What a window's roll-out carries and reads per environment (tensors batched on dim 0)."""

    state: torch.Tensor  # (B, 13) state at the window's start
    history: torch.Tensor  # (B, 4 K) past normalised commands, newest first
    applied: torch.Tensor  # (B, 4) physical command last applied
    z: torch.Tensor  # (B, nz) latent the policy observes
    lag_alpha: torch.Tensor | None  # (B, 4) command filter gain per tick; None: no lag
    drag: torch.Tensor | None  # (B, 13) velocity decrement per unit state; None: no drag


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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Roll ``env`` through H = ``terms.noise.shape[0]`` ticks of :func:`window_tick` (or the
    given ``tick``, e.g. its compiled form) under ``policy``; the tracking cost is evaluated
    once over the stacked window.

    Returns the summed cost per environment (B,) and the final state (B, 13), command history
    (B, 4 K) and applied command (B, 4), all differentiable.
    """
    tick = tick or window_tick
    state, history, applied = env.state, env.history, env.applied
    first_prev = history[:, :4]
    states, commands_norm = [], []
    for h in range(terms.noise.shape[0]):
        state, u, history, applied = tick(
            policy,
            builder,
            step,
            state,
            history,
            applied,
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
    return cost.sum(0), state, history, applied


def window_tick(
    policy: PolicyNet,
    builder: ObservationBuilder,
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    state: torch.Tensor,
    history: torch.Tensor,
    applied: torch.Tensor,
    env: WindowState,
    noise: torch.Tensor,
    ref_state: torch.Tensor,
    ref_head: torch.Tensor,
    delay_index: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One tick: observe the noisy state, command, pick the delayed command, filter it through
    the lag (when ``env.lag_alpha`` is given), advance ``step(state, applied)``, apply the drag
    (when ``env.drag`` is given).

    ``state`` (B, 13), ``history`` (B, 4 K), ``applied`` (B, 4) carried; ``noise`` (B, 13) in
    state units, ``ref_state`` (B, 13), ``ref_head`` (B, head_dim) of this tick;
    ``delay_index`` (B, 1, 4). Returns the next state, the normalised command u (B, 4), the
    next history and the applied command.
    """
    history_len = history.shape[1] // 4
    prev = history[:, : 4 * policy.config.n_prev_actions]
    obs = builder.build(state + noise, ref_state, ref_head, prev, env.z)
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
    return nxt, u, commands[:, : 4 * history_len], applied


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


_COMPILED: dict[str, Callable] = {}
_GRAPHS_COMPILED = [0]  # graphs the compiled roll-out has built in this process


def _counting_inductor(graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The inductor backend, counting the graphs it compiles (see :func:`compiled_graphs`)."""
    from torch._inductor.compile_fx import compile_fx

    _GRAPHS_COMPILED[0] += 1
    # torch annotates compile_fx's result more widely than the callable a backend returns
    return cast(Callable, compile_fx(graph, example_inputs))


def compiled_tick() -> Callable:
    """:func:`window_tick` under ``torch.compile``, created once per process.

    One tick, not the unrolled window: every tick of every window has the same shapes, so one
    small graph (forward and backward) serves them all and compiles in seconds to a minute,
    where the unrolled window takes many minutes. Dynamo keys its graphs by what changes them
    (tensor shapes and dtypes, the policy's and dynamics' structure, which of lag and drag are
    on), not by the tensors' values or identities: a new trainer with a new policy and model of
    the same shapes reuses the graph, so a learner process compiles on its first update only.
    Inductor's on-disk cache shortens the compilation of a restarted process.
    """
    if "tick" not in _COMPILED:
        _COMPILED["tick"] = torch.compile(window_tick, backend=_counting_inductor)
    return _COMPILED["tick"]


def compiled_graphs() -> int:
    """How many graphs :func:`compiled_tick` has compiled in this process."""
    return _GRAPHS_COMPILED[0]


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
