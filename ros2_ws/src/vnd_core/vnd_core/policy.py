"""The policy pi(observation, z) -> CTBR and the observation it reads.

Two observation paths share one layout (``ObservationBuilder.layout``):

- :meth:`ObservationBuilder.build`: batched torch, differentiable, used by the trainer and by the
  batched episode runner;
- :class:`PolicyRunner`: batch-1 numpy path for the 50 Hz control loop, where a few dozen small
  torch ops would cost more than the network itself. Tests check both paths agree.

The network output is bounded: thrust = hover + span * tanh(u0), rates = max_rate * tanh(u1..3),
so no input, however extreme, can command outside the vehicle limits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from vnd_core.nn import Normalizer, mlp
from vnd_core.reference import KINDS, ReferenceSample, ReferenceSpec, Trajectory
from vnd_core.state import ACTION_DIM, OMEGA, POS, QUAT, STATE_DIM, VEL
from vnd_core.vehicle import VehicleParams


@dataclass(frozen=True)
class PolicyConfig:
    """Architecture of the policy; stored in every bundle so the network can be rebuilt."""

    hidden: tuple[int, ...] = (128, 128)  # hidden layer widths of the MLP
    latent_dim: int = 8  # size of the latent condition z (zeros for the base policy)
    # size of the external-force input (world-frame force the policy's model does not explain,
    # newtons; 0: no such input, 3: a force observer feeds it in flight, see force_observer.py)
    force_dim: int = 0
    lookahead_s: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5)  # reference look-ahead times
    n_prev_actions: int = 2  # how many previous commands the policy sees (latency cover)
    thrust_span_fraction: float = 1.0  # thrust range around hover, as a fraction of hover
    rate_fraction: float = 1.0  # fraction of the vehicle body-rate limit the policy may use
    out_gain: float = 0.1  # initial scale of the last layer (starts near hover)

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if not self.hidden or any(h <= 0 for h in self.hidden):
            raise ValueError(f"hidden must be non-empty positive widths, got {self.hidden}")
        if self.latent_dim < 0 or self.n_prev_actions < 0:
            raise ValueError("latent_dim and n_prev_actions must be >= 0")
        if self.force_dim not in (0, 3):
            raise ValueError(f"force_dim must be 0 or 3, got {self.force_dim}")
        if any(not t > 0 for t in self.lookahead_s):
            raise ValueError(f"lookahead_s must be > 0, got {self.lookahead_s}")
        if not 0 < self.thrust_span_fraction <= 4 or not 0 < self.rate_fraction <= 1:
            raise ValueError("thrust_span_fraction must be in (0, 4], rate_fraction in (0, 1]")

    @property
    def condition_dim(self) -> int:
        """Size of the policy's condition: the force input, then z."""
        return self.force_dim + self.latent_dim

    def to_dict(self) -> dict:
        """JSON-able dict (tuples become lists); ``force_dim`` only when there is a force input,
        so policies without one describe themselves as before the field existed."""
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        if not self.force_dim:
            del data["force_dim"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PolicyConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise TypeError."""
        conv: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        config = cls(**conv)
        config.validate()
        return config


@dataclass(frozen=True)
class ActionScale:
    """Affine map between physical CTBR commands and the normalised [-1, 1] range."""

    hover_thrust_n: float  # centre of the thrust range
    thrust_span_n: float  # half-width of the thrust range
    rate_max_radps: tuple[float, float, float]  # body-rate bound per axis

    @classmethod
    def for_vehicle(cls, vehicle: VehicleParams, config: PolicyConfig) -> ActionScale:
        """Thrust span is the configured fraction of hover, clipped to the vehicle limits."""
        hover = vehicle.hover_thrust_n
        span = min(
            config.thrust_span_fraction * hover,
            hover - vehicle.thrust_min_n,
            vehicle.thrust_max_n - hover,
        )
        roll, pitch, yaw = (config.rate_fraction * r for r in vehicle.body_rate_max_radps)
        return cls(hover, span, (roll, pitch, yaw))

    def offset(self) -> torch.Tensor:
        """Physical action at normalised zero, (4,)."""
        return torch.tensor([self.hover_thrust_n, 0.0, 0.0, 0.0])

    def scale(self) -> torch.Tensor:
        """Physical size of one normalised unit, (4,)."""
        return torch.tensor([self.thrust_span_n, *self.rate_max_radps])


@dataclass(frozen=True)
class ObservationLayout:
    """Named blocks of the observation vector, in order."""

    blocks: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def dim(self) -> int:
        """Total observation size."""
        return sum(n for _, n in self.blocks)

    def to_list(self) -> list[list]:
        """JSON-able form [[name, size], ...]."""
        return [[name, n] for name, n in self.blocks]


class ObservationBuilder:
    """Builds the policy observation from state, reference, previous actions and z.

    Blocks (world frame, relative quantities so the policy is translation invariant):
    pos_error (p - p_ref, m), vel_error (v - v_ref, m/s), lookahead (p_ref(t + dt_k) - p, m,
    one triple per look-ahead time), ref_accel (m/s^2), attitude (6-D rotation), body_rates
    (rad/s), prev_actions (normalised, newest first), force (the external force input, N,
    only when ``force_dim`` > 0), latent (z). The force and z together are the policy's
    *condition* (``condition_dim`` entries, force first).
    """

    def __init__(self, vehicle: VehicleParams, config: PolicyConfig) -> None:
        self.config = config
        self.action_scale = ActionScale.for_vehicle(vehicle, config)
        self._a_offset = self.action_scale.offset()
        self._a_scale = self.action_scale.scale()
        self.lookahead_s = torch.tensor(config.lookahead_s)
        n_look = len(config.lookahead_s)
        self.layout = ObservationLayout(
            (
                ("pos_error", 3),
                ("vel_error", 3),
                ("lookahead", 3 * n_look),
                ("ref_accel", 3),
                ("attitude", 6),
                ("body_rates", 3),
                ("prev_actions", ACTION_DIM * config.n_prev_actions),
                *((("force", config.force_dim),) if config.force_dim else ()),
                ("latent", config.latent_dim),
            )
        )
        self.head_map = self._head_map()

    @property
    def dim(self) -> int:
        """Observation size."""
        return self.layout.dim

    def condition(self, z: torch.Tensor, force_n: torch.Tensor | None = None) -> torch.Tensor:
        """The policy's condition (B, condition_dim) of latents ``z`` (B, nz) and, for a policy
        with a force input, the force ``force_n`` (B, 3) in newtons (None: no force)."""
        if not self.config.force_dim:
            return z
        if force_n is None:
            force_n = z.new_zeros(z.shape[0], self.config.force_dim)
        return torch.cat([force_n, z], dim=-1)

    def sample_times(self, t_s: torch.Tensor) -> torch.Tensor:
        """Times at which the reference is needed: ``t_s`` (...,) -> (..., 1 + n_lookahead)."""
        offsets = torch.cat([torch.zeros(1), self.lookahead_s])
        return t_s.unsqueeze(-1) + offsets

    def normalise_action(self, action: torch.Tensor) -> torch.Tensor:
        """Physical CTBR (..., 4) -> normalised (..., 4) (within [-1, 1] for policy outputs)."""
        return (action - self._a_offset) / self._a_scale

    def reference_features(self, reference: ReferenceSample) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-tick reference terms of the observation, computed once (no gradient needed).

        ``reference`` fields (..., 1 + L, 3) at :meth:`sample_times` (index 0 is "now").
        Returns ``ref_state`` (..., 13): reference position and velocity in their state slots,
        zeros elsewhere; ``ref_head`` (..., head_dim): the look-ahead displacements
        p_ref(t + dt_k) - p_ref(t) and the acceleration feed-forward in their blocks.
        """
        pos, vel, acc = reference.position_m, reference.velocity_mps, reference.acceleration_mps2
        now = pos[..., 0, :]
        zeros3 = torch.zeros_like(now)
        ref_state = torch.cat([now, zeros3, zeros3[..., :1], vel[..., 0, :], zeros3], dim=-1)
        ahead = (pos[..., 1:, :] - now.unsqueeze(-2)).flatten(-2)
        ref_head = torch.cat(
            [zeros3, zeros3, ahead, acc[..., 0, :], now.new_zeros(*now.shape[:-1], 9)], dim=-1
        )
        return ref_state, ref_head

    def _head_map(self) -> torch.Tensor:
        """Linear map (29, head_dim) from [state - ref_state (13), q q^T (16)] to the head.

        The head blocks are linear in that input: position and velocity errors and body rates are
        selections, the look-ahead term subtracts the position error, and every entry of the
        rotation matrix is a quadratic form of the unit quaternion (R00 = w²+x²-y²-z², ...).
        One matrix product replaces some forty small ops per tick (training speed).
        """
        n_look = len(self.config.lookahead_s)
        head = torch.zeros(STATE_DIM + 16, self.head_dim)
        eye3 = torch.eye(3)
        head[POS, 0:3] = eye3
        head[VEL, 3:6] = eye3
        for k in range(n_look):
            head[POS, 6 + 3 * k : 9 + 3 * k] = -eye3
        col = 6 + 3 * n_look + 3  # attitude block after the acceleration feed-forward
        w, x, y, z = range(4)

        def qq(i: int, j: int) -> int:  # row of q_i q_j in the flattened outer product
            return STATE_DIM + 4 * i + j

        # first two columns of R (body to world), as quadratic forms of (w, x, y, z)
        columns = [
            {(w, w): 1, (x, x): 1, (y, y): -1, (z, z): -1},  # R00
            {(x, y): 2, (w, z): 2},  # R10
            {(x, z): 2, (w, y): -2},  # R20
            {(x, y): 2, (w, z): -2},  # R01
            {(w, w): 1, (x, x): -1, (y, y): 1, (z, z): -1},  # R11
            {(y, z): 2, (w, x): 2},  # R21
        ]
        for c, terms in enumerate(columns):
            for (i, j), coef in terms.items():
                head[qq(i, j), col + c] = coef
        head[OMEGA, col + 6 : col + 9] = eye3
        return head

    @property
    def head_dim(self) -> int:
        """Size of the state/reference part of the observation (before actions and z)."""
        return 3 + 3 + 3 * len(self.config.lookahead_s) + 3 + 6 + 3

    def build(
        self,
        state: torch.Tensor,
        ref_state: torch.Tensor,
        ref_head: torch.Tensor,
        prev_actions_norm: torch.Tensor,
        z: torch.Tensor,
    ) -> torch.Tensor:
        """Observation (B, dim); differentiable in ``state``.

        ``state`` (B, 13); ``ref_state`` (B, 13) and ``ref_head`` (B, head_dim) from
        :meth:`reference_features`; ``prev_actions_norm`` (B, 4 * n_prev) normalised previous
        commands, newest first; ``z`` (B, condition_dim): the policy's condition, which is z
        alone for a policy without a force input (:meth:`condition` builds it).
        """
        q = state[:, QUAT]
        features = torch.cat([state - ref_state, (q.unsqueeze(-1) * q.unsqueeze(-2)).flatten(1)], 1)
        head = torch.addmm(ref_head, features, self.head_map)
        return torch.cat([head, prev_actions_norm, self.seen_condition(z)], dim=-1)

    def seen_condition(self, condition: torch.Tensor) -> torch.Tensor:
        """The condition (B, condition_dim) as the policy reads it: as given. Training
        builders override it to hide or limit what the policy cannot read in flight."""
        return condition

    def build_from(
        self,
        state: torch.Tensor,
        trajectory: Trajectory,
        t_s: torch.Tensor,
        prev_actions: torch.Tensor,
        z: torch.Tensor,
    ) -> torch.Tensor:
        """Convenience: observation (B, dim) from a trajectory at times ``t_s`` (B,) and
        physical previous commands ``prev_actions`` (B, n_prev, 4), newest first."""
        ref_state, ref_head = self.reference_features(trajectory.sample(self.sample_times(t_s)))
        prev = self.normalise_action(prev_actions).flatten(1)
        return self.build(state, ref_state, ref_head, prev, z)

    def default_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Physical-scale normalisation (mean, std), each (dim,).

        Fixed scales rather than data statistics: the distribution the trainer sees shrinks as
        the policy improves, and fixed scales keep the input meaning stable across retraining.
        """
        stds = {
            "pos_error": 0.3,
            "vel_error": 0.8,
            "lookahead": 0.5,
            "ref_accel": 3.0,
            "attitude": 0.3,
            "body_rates": 2.0,
            "prev_actions": 0.5,
            "force": 1.0,
            "latent": 1.0,
        }
        means = {"attitude": torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])}
        mean_parts, std_parts = [], []
        for name, n in self.layout.blocks:
            mean_parts.append(means.get(name, torch.zeros(n)))
            std_parts.append(torch.full((n,), stds[name]))
        return torch.cat(mean_parts), torch.cat(std_parts)


class PolicyNet(nn.Module):
    """pi(observation) -> CTBR (B, 4): thrust (N) and body rates (rad/s), always within limits.

    The observation already carries z (see :class:`ObservationBuilder`); normalisation statistics
    are buffers, so they travel with the weights in a bundle.
    """

    action_offset: torch.Tensor  # (4,) buffer: the physical command of a zero output
    action_scale: torch.Tensor  # (4,) buffer: half the span of each command

    def __init__(self, vehicle: VehicleParams, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.config = config or PolicyConfig()
        self.config.validate()
        self.vehicle = vehicle
        self.observation = ObservationBuilder(vehicle, self.config)
        self.normalizer = Normalizer(self.observation.dim)
        self.normalizer.set_stats(*self.observation.default_stats())
        self.net = mlp(
            self.observation.dim, self.config.hidden, ACTION_DIM, out_gain=self.config.out_gain
        )
        self._silence_last(self.condition_dim)
        scale = self.observation.action_scale
        self.register_buffer("action_offset", scale.offset(), persistent=False)
        self.register_buffer("action_scale", scale.scale(), persistent=False)

    @property
    def latent_dim(self) -> int:
        """Size of z."""
        return self.config.latent_dim

    @property
    def force_dim(self) -> int:
        """Size of the external-force input (0: none)."""
        return self.config.force_dim

    @property
    def condition_dim(self) -> int:
        """Size of the condition the observation ends with: force input, then z."""
        return self.config.condition_dim

    def silence_latent(self) -> None:
        """Zero the first-layer weights on the z inputs (the last ``latent_dim`` observation
        entries), so z has no effect until training gives it one.

        Why: a policy trained with z = 0 (the base policy) leaves those weights at their random
        init; a z read later (N(0, I) in training, the encoder's in flight) then perturbs the
        command like noise. With zero columns the first gradient step starts from the policy's
        z = 0 behaviour instead. A new network starts with its force-input columns zero too.
        """
        self._silence_last(self.latent_dim)

    def _silence_last(self, columns: int) -> None:
        """Zero the first-layer weights on the last ``columns`` observation entries."""
        if columns == 0:
            return
        with torch.no_grad():
            first = self.net[0]
            assert isinstance(first, nn.Linear)  # mlp() starts with one
            first.weight[:, -columns:].zero_()

    def forward_normalised(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalised command (B, 4) in [-1, 1] of raw observations (B, dim)."""
        return torch.tanh(self.net(self.normalizer(obs)))

    def to_physical(self, action_norm: torch.Tensor) -> torch.Tensor:
        """Normalised command (..., 4) -> thrust (N) and body rates (rad/s)."""
        return torch.addcmul(self.action_offset, self.action_scale, action_norm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """CTBR (B, 4) of raw observations (B, dim)."""
        return self.to_physical(self.forward_normalised(obs))

    def architecture(self) -> dict:
        """JSON-able description: config, observation layout, action bounds."""
        scale = self.observation.action_scale
        return {
            "config": self.config.to_dict(),
            "observation_layout": self.observation.layout.to_list(),
            "action_scale": {
                "hover_thrust_n": scale.hover_thrust_n,
                "thrust_span_n": scale.thrust_span_n,
                "rate_max_radps": list(scale.rate_max_radps),
            },
        }

    def action_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) physical action bounds, each (4,)."""
        return self.action_offset - self.action_scale, self.action_offset + self.action_scale


def with_force_input(policy: PolicyNet) -> PolicyNet:
    """A copy of ``policy`` (no force input) given one (``force_dim`` = 3) whose weights start
    at zero: it flies as ``policy`` does until training gives the force a meaning."""
    if policy.force_dim:
        raise ValueError("the policy already has a force input")
    widened = PolicyNet(policy.vehicle, replace(policy.config, force_dim=3))
    head = policy.observation.dim - policy.latent_dim  # observation entries before z
    with torch.no_grad():
        for name, tensor in policy.state_dict().items():
            if name not in ("normalizer.mean", "normalizer.std", "net.0.weight"):
                widened.state_dict()[name].copy_(tensor)
        old, new = policy.net[0], widened.net[0]
        assert isinstance(old, nn.Linear) and isinstance(new, nn.Linear)  # mlp() starts so
        new.weight.zero_()
        new.weight[:, :head] = old.weight[:, :head]
        new.weight[:, head + 3 :] = old.weight[:, head:]
        for stat in ("mean", "std"):  # the force block keeps its default statistics
            kept, target = getattr(policy.normalizer, stat), getattr(widened.normalizer, stat)
            target[:head] = kept[:head]
            target[head + 3 :] = kept[head:]
    return widened.train(policy.training)


def reference_numpy(spec: ReferenceSpec, times_s: np.ndarray) -> np.ndarray:
    """Reference of ``spec`` at ``times_s`` (L,) -> (3, L, 3): position, velocity, acceleration.

    The batch-1 twin of :meth:`Trajectory.sample` (tests check they agree) for the control
    tick, where L is 1 + the look-ahead count: scalar arithmetic and one array at the end,
    because each small numpy call costs more than its arithmetic (several times more when the
    tick's code has left the CPU caches, see ``vnd_flight.rehearsal``).
    """
    kind = KINDS.index(spec.kind)
    omega = 2.0 * math.pi / spec.period_s
    amp = spec.amplitude_m
    cx, cy, cz = (float(c) for c in spec.center_m)
    pos, vel, acc = [], [], []
    for t in np.asarray(times_s, dtype=float).tolist():
        phi = omega * t + spec.phase_rad
        if kind == 1:  # figure-eight (lemniscate of Gerono)
            s1, c1, s2, c2 = math.sin(phi), math.cos(phi), math.sin(2 * phi), math.cos(2 * phi)
            pos.append((cx + amp * s1, cy + 0.5 * amp * s2, cz))
            vel.append((amp * omega * c1, amp * omega * c2, 0.0))
            acc.append((-amp * omega**2 * s1, -2.0 * amp * omega**2 * s2, 0.0))
        elif kind == 2:  # circle
            s1, c1 = math.sin(phi), math.cos(phi)
            pos.append((cx + amp * c1, cy + amp * s1, cz))
            vel.append((-amp * omega * s1, amp * omega * c1, 0.0))
            acc.append((-amp * omega**2 * c1, -amp * omega**2 * s1, 0.0))
        else:  # hover
            pos.append((cx, cy, cz))
            vel.append((0.0, 0.0, 0.0))
            acc.append((0.0, 0.0, 0.0))
    return np.array([pos, vel, acc]).reshape(3, len(pos), 3)


class PolicyRunner:
    """Batch-1 control-loop wrapper: numpy state in, numpy CTBR out, previous actions kept.

    ``act`` builds the same observation as :meth:`ObservationBuilder.build` with numpy and
    scalar arithmetic and evaluates the network from a float64 numpy export of its weights, taken at
    construction (create a new runner after changing the weights, e.g. on a bundle swap). At
    batch 1 a numpy matrix-vector product costs about a microsecond, a torch op several; the
    tests check the export against the torch module.
    """

    def __init__(self, policy: PolicyNet, reference: ReferenceSpec) -> None:
        self.policy = policy.eval()
        self.reference = reference
        builder = policy.observation
        self._offsets_s = np.concatenate([[0.0], builder.lookahead_s.numpy()])
        self._a_offset = builder._a_offset.numpy().astype(np.float64)
        self._a_scale = builder._a_scale.numpy().astype(np.float64)
        self._a_offset_list = self._a_offset.tolist()
        self._a_scale_list = self._a_scale.tolist()
        self._layers = _export_layers(policy)
        self.reset()

    def reset(self) -> None:
        """Forget previous actions (they restart at hover)."""
        hover = self._a_offset.copy()
        self.prev_actions = [hover.copy() for _ in range(self.policy.config.n_prev_actions)]

    def reference_at(self, t_s: float) -> np.ndarray:
        """Reference (3, 1 + L, 3): position, velocity, acceleration now and at each
        look-ahead time, for reference time ``t_s`` (subclasses may take it from elsewhere)."""
        return reference_numpy(self.reference, t_s + self._offsets_s)

    def observe(
        self,
        state: np.ndarray,
        t_s: float,
        z: np.ndarray | None = None,
        force_n: np.ndarray | None = None,
    ) -> np.ndarray:
        """Observation (dim,) for ``state`` (13,) at reference time ``t_s`` with latent ``z``
        (None: zeros) and, for a policy with a force input, the external force ``force_n`` (3,)
        in newtons (None: zeros; ignored without a force input).

        Built as one list of floats and converted once (see :func:`reference_numpy` for why).
        """
        ref_pos, ref_vel, ref_acc = self.reference_at(t_s).tolist()
        s = np.asarray(state, dtype=float).tolist()
        p = s[POS]
        obs = [a - b for a, b in zip(p, ref_pos[0], strict=True)]
        obs += [a - b for a, b in zip(s[VEL], ref_vel[0], strict=True)]
        for ahead in ref_pos[1:]:
            obs += [a - b for a, b in zip(ahead, p, strict=True)]
        obs += ref_acc[0]
        obs += _attitude_columns(s[QUAT])
        obs += s[OMEGA]
        offset, scale = self._a_offset_list, self._a_scale_list
        for action in self.prev_actions:
            obs += [(a - o) / c for a, o, c in zip(action.tolist(), offset, scale, strict=True)]
        if self.policy.force_dim:
            obs += [0.0] * 3 if force_n is None else np.asarray(force_n, dtype=float).tolist()
        if z is None:
            obs += [0.0] * self.policy.latent_dim
        else:
            obs += np.asarray(z, dtype=float).tolist()
        return np.array(obs)

    def forward(self, obs: np.ndarray) -> np.ndarray:
        """CTBR (4,) of a raw observation (dim,), from the exported weights."""
        x = obs
        for i, (weight, bias) in enumerate(self._layers):
            x = weight @ x + bias
            if i < len(self._layers) - 1:  # ELU between layers, as built by vnd_core.nn.mlp
                x = np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0)))
        return self._a_offset + self._a_scale * np.tanh(x)

    def act(
        self,
        state: np.ndarray,
        t_s: float,
        z: np.ndarray | None = None,
        force_n: np.ndarray | None = None,
    ) -> np.ndarray:
        """CTBR (4,) for ``state`` (13,) at reference time ``t_s`` (``z``, ``force_n`` as for
        :meth:`observe`); remembers the command."""
        state = np.asarray(state, dtype=np.float64)
        action = self.forward(self.observe(state, t_s, z, force_n))
        if self.prev_actions:
            self.prev_actions = [action, *self.prev_actions[:-1]]
        return action


def _attitude_columns(quat: Sequence[float]) -> list[float]:
    """First two columns (6 floats) of the rotation matrix of quaternion ``quat`` (4 values
    w x y z, normalised here), as ``transforms3d.quaternions.quat2mat(q)[:, :2]`` column by
    column, from scalar arithmetic (tests check they agree)."""
    w, x, y, z = (float(v) for v in quat)
    norm2 = w * w + x * x + y * y + z * z
    s = 2.0 / norm2 if norm2 > 0.0 else math.nan  # no rotation: the policy output is NaN
    return [
        1.0 - s * (y * y + z * z),
        s * (x * y + w * z),
        s * (x * z - w * y),
        s * (x * y - w * z),
        1.0 - s * (x * x + z * z),
        s * (y * z + w * x),
    ]


def _export_layers(policy: PolicyNet) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight, bias) float64 arrays of the policy MLP with the input normalisation folded into
    the first layer: W (x - m) / s + b = (W / s) x + (b - (W / s) m)."""
    linears = [m for m in policy.net if isinstance(m, nn.Linear)]
    activations = [m for m in policy.net if not isinstance(m, nn.Linear)]
    if any(not isinstance(m, nn.ELU) or m.alpha != 1.0 for m in activations):
        raise TypeError("policy export supports ELU(alpha=1) hidden activations only")
    with torch.no_grad():
        layers = [
            (m.weight.double().numpy().copy(), m.bias.double().numpy().copy()) for m in linears
        ]
        std = policy.normalizer.std.double().numpy()
        mean = policy.normalizer.mean.double().numpy()
    first_w = layers[0][0] / std
    layers[0] = (first_w, layers[0][1] - first_w @ mean)
    return layers
