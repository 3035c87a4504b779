"""The RMA baseline of ``vnd eval`` (rapid motor adaptation): a privileged teacher and an
adaptation module that estimates the teacher's disturbance input from recent history.

- Teacher (phase 1): a policy that sees the true disturbance vector as its z; the suite uses
  the oracle's training for it (the plant-matched randomised simulation
  :class:`~vnd_core.evaluation.baselines.DisturbedPrior`, ranges of
  :meth:`RandomisationConfig.oracle`, dr's trainer budget).
- Adaptation module (phase 2, :class:`AdaptationModule`): a small 1-D convolution over the last
  ``history_ticks`` ticks (0.5 s) of (measured velocity, attitude, body rates, previous
  command), regressing the normalised disturbance vector. It is trained by supervised
  regression in the same randomised simulation (:func:`train_adaptation_module`): the first
  round of rollouts flies the teacher with the true z, every later round flies it with the
  module's own estimate (as RMA's phase 2 does, so the module learns on the states its
  estimates lead to), and the data of all rounds is kept.
- Deployment (:class:`RMAMethod`): teacher + module, the module's estimate as z every tick;
  nothing is learned in flight.

The rollout simulation adds what the trainer's environment adds to the prior (a command delay
of 1-3 ticks, a thrust lag of up to 50 ms, measurement noise of the plant's size).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from vnd_core.bundle import Bundle
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.evaluation.baselines import (
    DISTURBANCE_DIM,
    RandomisationConfig,
    disturbance_dynamics,
    sample_disturbance,
)
from vnd_core.evaluation.continual_loop import LATENT_ONLINE, LatentSource, Method
from vnd_core.policy import PolicyNet
from vnd_core.reference import Trajectory
from vnd_core.so3 import rotmat_6d
from vnd_core.state import OMEGA, POS, QUAT, VEL, hover_state
from vnd_core.vehicle import VehicleParams

# Per-tick input of the module: velocity (3, world), the first two columns of the rotation
# matrix (6), body rates (3), previous command normalised (4).
FEATURE_DIM = 16
VELOCITY_SCALE_MPS = 2.0  # velocity features are divided by this
RATE_SCALE_RADPS = 2.0  # body-rate features are divided by this


@dataclass(frozen=True)
class RMAConfig:
    """Adaptation-module architecture and phase-2 training budget."""

    history_ticks: int = 25  # ticks of history the module reads (0.5 s at 50 Hz)
    channels: int = 32  # width of both convolution layers
    rollout_envs: int = 64  # parallel rollouts per round
    rollout_ticks: int = 250  # ticks per rollout (one disturbance per rollout)
    rounds: int = 3  # rollout rounds; the first with the true z, the rest with the module's
    epochs: int = 15  # passes over all data gathered so far, per round
    batch_size: int = 256  # windows per optimiser step
    learning_rate: float = 1e-3  # Adam step size
    seed: int = 0  # seeds rollouts, draws and the module's weights

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        if self.history_ticks < 9:
            raise ValueError(f"history_ticks must be >= 9, got {self.history_ticks}")
        if self.rollout_ticks <= self.history_ticks:
            raise ValueError("rollout_ticks must exceed history_ticks")
        for name in ("channels", "rollout_envs", "rounds", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class AdaptationModule(nn.Module):
    """``forward(history (B, history_ticks, FEATURE_DIM)) -> z (B, 8)`` (normalised
    disturbance units): two strided 1-D convolutions over time and a linear read-out."""

    def __init__(self, config: RMAConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        c = config.channels
        self.conv = nn.Sequential(
            nn.Conv1d(FEATURE_DIM, c, kernel_size=5, stride=2),
            nn.ELU(),
            nn.Conv1d(c, c, kernel_size=3, stride=2),
            nn.ELU(),
        )
        length = ((config.history_ticks - 5) // 2 + 1 - 3) // 2 + 1
        self.head = nn.Linear(c * length, DISTURBANCE_DIM)

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        """z (B, 8) of ``history`` (B, history_ticks, FEATURE_DIM), oldest tick first."""
        return self.head(self.conv(history.transpose(1, 2)).flatten(1))


def tick_features(measured: torch.Tensor, previous_command_norm: torch.Tensor) -> torch.Tensor:
    """Module input of one tick (B, FEATURE_DIM) from measured states (B, 13) and the
    normalised command sent at the tick before (B, 4)."""
    return torch.cat(
        [
            measured[:, VEL] / VELOCITY_SCALE_MPS,
            rotmat_6d(measured[:, QUAT]),
            measured[:, OMEGA] / RATE_SCALE_RADPS,
            previous_command_norm,
        ],
        dim=1,
    )


@torch.no_grad()
def collect_rollouts(
    teacher: PolicyNet,
    vehicle: VehicleParams,
    randomisation: RandomisationConfig,
    config: RMAConfig,
    generator: torch.Generator,
    module: AdaptationModule | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fly ``config.rollout_envs`` randomised rollouts of ``teacher`` (z: the true vector, or
    ``module``'s estimate once a full history exists); returns features (B, T, FEATURE_DIM),
    the true normalised z (B, 8) and alive (B, T) (False from the tick a rollout strayed more
    than 2 m from its reference on)."""
    n, ticks = config.rollout_envs, config.rollout_ticks
    dt_s = CONTROL_PERIOD_S
    dynamics = disturbance_dynamics(vehicle, randomisation)
    z_true = sample_disturbance(n, generator, vehicle, randomisation)
    trajectory = Trajectory.random(n, generator=generator)
    builder = teacher.observation
    t_s = torch.zeros(n)
    state = hover_state((n,))
    state[:, POS] = trajectory.sample(t_s).position_m + 0.1 * torch.randn(n, 3, generator=generator)
    delay = torch.randint(1, 4, (n,), generator=generator)
    tau_s = 0.05 * torch.rand(n, 1, generator=generator)
    lag_alpha = 1.0 - torch.exp(-dt_s / tau_s.clamp_min(1e-6))
    hover = teacher.action_offset.expand(n, 4).clone()
    sent = [hover.clone() for _ in range(4)]  # physical commands, newest first
    applied = hover.clone()
    n_prev = teacher.config.n_prev_actions
    noise_std = torch.zeros(13)
    noise_std[POS], noise_std[VEL], noise_std[OMEGA] = 0.001, 0.02, 0.03
    features = torch.zeros(n, ticks, FEATURE_DIM)
    alive = torch.ones(n, ticks, dtype=torch.bool)
    ok = torch.ones(n, dtype=torch.bool)
    for k in range(ticks):
        measured = state + noise_std * torch.randn(n, 13, generator=generator)
        features[:, k] = tick_features(measured, builder.normalise_action(sent[0]))
        z = z_true
        if module is not None and k + 1 >= config.history_ticks:
            z = module(features[:, k + 1 - config.history_ticks : k + 1])
        prev = torch.stack(sent[:n_prev], dim=1) if n_prev else torch.zeros(n, 0, 4)
        obs = builder.build_from(measured, trajectory, t_s, prev, z)
        action = teacher(obs)
        sent = [action, *sent[:-1]]
        delayed = torch.stack(sent, dim=1)[torch.arange(n), delay.clamp_max(len(sent) - 1)]
        thrust_lagged = applied + lag_alpha * (delayed - applied)
        applied = torch.cat([thrust_lagged[:, :1], delayed[:, 1:]], dim=1)
        state = dynamics(state, applied, z_true)
        t_s = t_s + dt_s
        distance = (state[:, POS] - trajectory.sample(t_s).position_m).norm(dim=1)
        ok = ok & (distance < 2.0) & torch.isfinite(state).all(dim=1)
        alive[:, k] = ok
        state = torch.where(ok[:, None], state, hover_state((n,)))
    return features, z_true, alive


def history_windows(
    features: torch.Tensor, z: torch.Tensor, alive: torch.Tensor, history_ticks: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every full window of live ticks: histories (M, history_ticks, F) and targets (M, 8)."""
    windows = features.unfold(1, history_ticks, 1).permute(0, 1, 3, 2)  # (B, W, H, F)
    live = alive[:, history_ticks - 1 :]  # a window counts when its last tick is alive
    targets = z[:, None, :].expand(-1, windows.shape[1], -1)
    return windows[live], targets[live]


def train_adaptation_module(
    teacher: PolicyNet,
    vehicle: VehicleParams,
    randomisation: RandomisationConfig,
    config: RMAConfig | None = None,
) -> tuple[AdaptationModule, dict]:
    """RMA phase 2 (see the module docstring): the trained module and a JSON-able summary
    (budget, windows, final training loss, wall time)."""
    config = config or RMAConfig()
    config.validate()
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(config.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        module = AdaptationModule(config)
    optimizer = torch.optim.Adam(module.parameters(), lr=config.learning_rate)
    histories, targets = [], []
    losses: list[float] = []
    for round_index in range(config.rounds):
        module.eval()
        rollout = collect_rollouts(
            teacher,
            vehicle,
            randomisation,
            config,
            generator,
            module if round_index > 0 else None,
        )
        window, target = history_windows(*rollout, config.history_ticks)
        histories.append(window)
        targets.append(target)
        x, y = torch.cat(histories), torch.cat(targets)
        module.train()
        for _ in range(config.epochs):
            order = torch.randperm(len(x), generator=generator)
            for begin in range(0, len(x), config.batch_size):
                index = order[begin : begin + config.batch_size]
                loss = (module(x[index]) - y[index]).square().mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
    module.eval()
    tail = losses[-max(1, len(losses) // 20) :]
    summary = {
        "rma": asdict(config),
        "windows": int(sum(len(h) for h in histories)),
        "final_loss": sum(tail) / len(tail),
        "wall_time_s": round(time.perf_counter() - start, 2),
    }
    return module, summary


class _ModuleSource(LatentSource):
    """Teacher's z from the adaptation module over the run's last ``history_ticks`` ticks."""

    def __init__(self, module: AdaptationModule, teacher: PolicyNet) -> None:
        self.module = module
        self.builder = teacher.observation
        self.history: deque[torch.Tensor] = deque(maxlen=module.config.history_ticks)
        self.previous = teacher.action_offset.clone()[None]

    def latent(self, stamp_ns: int, measured: np.ndarray) -> np.ndarray:
        """Module estimate; before the history is full the first tick's features pad it."""
        state = torch.as_tensor(np.asarray(measured), dtype=torch.float32)[None]
        feature = tick_features(state, self.builder.normalise_action(self.previous))
        if not self.history:
            self.history.extend([feature] * (self.module.config.history_ticks - 1))
        self.history.append(feature)
        with torch.no_grad():
            z = self.module(torch.cat(list(self.history))[None])[0]
        return z.numpy().astype(np.float32)

    def command(self, stamp_ns: int, action: np.ndarray) -> None:
        """The command is the next tick's "previous command" feature."""
        self.previous = torch.as_tensor(np.asarray(action), dtype=torch.float32)[None]


class RMAMethod(Method):
    """rma: the teacher policy of ``bundle`` with z from ``module`` every tick; no learner.
    ``summary`` is the module's training summary (:func:`train_adaptation_module`)."""

    def __init__(
        self, bundle: Bundle, module: AdaptationModule, summary: dict | None = None
    ) -> None:
        super().__init__("rma", bundle, LATENT_ONLINE)
        self.module = module.eval()
        self.summary = summary or {}

    def latent_source(self) -> LatentSource:
        """A fresh, empty history."""
        return _ModuleSource(self.module, self.initial.policy)
