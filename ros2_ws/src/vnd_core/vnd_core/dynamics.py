"""The physics prior: a rigid-body quadrotor driven by collective thrust and body rates.

This is the textbook model the policy is trained on and the residual corrects. It has no drag,
no motor dynamics and no latency: the true plant (``plant.py``) has all three.

The state derivative is written as one matrix product (see :func:`_derivative_map`): every term
of it is linear in the state and action or bilinear in the quaternion and (thrust * quaternion,
body rates). That keeps the op count of an RK4 step small, which is what limits the training
throughput on a CPU, not the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.state import ACTION_DIM, GRAVITY_MPS2, OMEGA, POS, QUAT, RATES, STATE_DIM, THRUST, VEL
from vnd_core.vehicle import VehicleParams

CONTROL_PERIOD_S = 0.02  # 50 Hz control tick

# bilinear features: q_i * y_j with y = (thrust * q (4), omega (3)), row-major (4 x 7)
_Y_DIM = 4 + 3
_FEATURE_DIM = STATE_DIM + ACTION_DIM + 4 * _Y_DIM


@dataclass(frozen=True)
class NominalModelConfig:
    """Integration settings of the nominal model."""

    dt_s: float = CONTROL_PERIOD_S  # one call advances this much time
    substeps: int = 1  # RK4 steps per call


class NominalModel:
    """Differentiable prior ``f(state, action) -> next state`` over one control period.

    ``state`` (..., 13) and ``action`` (..., 4) batch over any leading dims; the action is held
    for the whole period (zero-order hold). The quaternion is renormalised after every step.
    """

    def __init__(self, vehicle: VehicleParams, config: NominalModelConfig | None = None) -> None:
        self.vehicle = vehicle
        self.config = config or NominalModelConfig()
        self.inv_mass = 1.0 / vehicle.mass_kg
        self.inv_tau_rate = 1.0 / vehicle.body_rate_time_constant_s
        map64, offset64 = _derivative_map(self.inv_mass, self.inv_tau_rate)
        self._map64, self._offset64 = map64, offset64
        self._cache: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, ...]] = {}
        # The float32 CPU constants exist from the start: a compiled graph that reads them
        # then never depends on whether this model has stepped before (dynamo guards on it).
        self._constants(torch.empty(0))

    def _constants(self, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Transposed maps in ``like``'s dtype: state (13, 13), action (13, 4), bilinear (13, 28),
        and the offset (13, 1)."""
        key = (like.dtype, like.device)
        if key not in self._cache:
            full_t = self._map64.t().to(dtype=like.dtype, device=like.device)
            offset = self._offset64.to(dtype=like.dtype, device=like.device)
            bil = STATE_DIM + ACTION_DIM
            self._cache[key] = (
                full_t[:, :STATE_DIM].contiguous(),
                full_t[:, STATE_DIM:bil].contiguous(),
                full_t[:, bil:].contiguous(),
                offset.unsqueeze(1),
            )
        return self._cache[key]

    def _prepare(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
        """Feature-major copies: state (13, B), thrust (1, B), action-only derivative (13, B).

        Feature-major rows are contiguous, so the slices and products below run on contiguous
        memory (batch-major column slices are strided and several times slower).
        """
        state, action, lead = _flatten(state, action)
        _, action_map, _, offset = self._constants(state)
        x = state.t().contiguous()
        a = action.t()
        base = torch.addmm(offset, action_map, a)  # action share + gravity
        return x, a[THRUST], base, lead

    def _derivative_t(
        self, x: torch.Tensor, thrust: torch.Tensor, base: torch.Tensor
    ) -> torch.Tensor:
        """Derivative (13, B) of the feature-major state ``x`` (13, B)."""
        state_map, _, bilinear_map, _ = self._constants(x)
        q = x[QUAT]
        y = torch.cat([thrust * q, x[OMEGA]], dim=0)  # (7, B)
        bilinear = (q.unsqueeze(1) * y.unsqueeze(0)).reshape(4 * _Y_DIM, -1)  # (28, B)
        return torch.addmm(torch.addmm(base, state_map, x), bilinear_map, bilinear)

    def derivative(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Time derivative of the state (..., 13) under ``action`` (..., 4).

        p' = v; q' = q * (0, omega) / 2; v' = thrust / m * body_z(q) - g e_z;
        omega' = (rate command - omega) / tau.
        """
        x, thrust, base, lead = self._prepare(state, action)
        return self._derivative_t(x, thrust, base).t().contiguous().reshape(*lead, STATE_DIM)

    def step(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Advance ``state`` by ``dt_s`` with RK4 sub-steps; returns (..., 13)."""
        # the action is held over the step: its share of the derivative is computed once
        x, thrust, base, lead = self._prepare(state, action)
        h = self.config.dt_s / self.config.substeps
        for _ in range(self.config.substeps):
            k1 = self._derivative_t(x, thrust, base)
            k2 = self._derivative_t(torch.add(x, k1, alpha=0.5 * h), thrust, base)
            k3 = self._derivative_t(torch.add(x, k2, alpha=0.5 * h), thrust, base)
            k4 = self._derivative_t(torch.add(x, k3, alpha=h), thrust, base)
            weighted = torch.add(torch.add(k1, k2, alpha=2.0), torch.add(k4, k3, alpha=2.0))
            x = _renormalise_t(torch.add(x, weighted, alpha=h / 6.0))
        # contiguous batch-major output, so callers may .view() it like any fresh tensor
        return x.t().contiguous().reshape(*lead, STATE_DIM)

    __call__ = step


def constant_accel_delta(accel_mps2: torch.Tensor, dt_s: float) -> torch.Tensor:
    """State increment (B, 13) of a world-frame acceleration ``accel_mps2`` (B, 3) held
    constant over one tick of ``dt_s``: position 0.5 a dt^2, velocity a dt, nothing else."""
    zeros = accel_mps2.new_zeros(accel_mps2.shape[0], 4)
    return torch.cat(
        [0.5 * dt_s * dt_s * accel_mps2, zeros, dt_s * accel_mps2, zeros[:, :3]], dim=1
    )


def _flatten(
    state: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Broadcast the leading dims of ``state`` (..., 13) and ``action`` (..., 4) and flatten
    them: returns (B, 13), (B, 4) and the leading shape."""
    if state.shape[-1] != STATE_DIM or action.shape[-1] != ACTION_DIM:
        raise ValueError(
            f"state must be (..., {STATE_DIM}) and action (..., {ACTION_DIM}), "
            f"got {tuple(state.shape)} and {tuple(action.shape)}"
        )
    # numpy's rule is the same; torch's first call imports ~500 modules (1 s under the GIL,
    # stalling the control thread of a node that loads its first model-carrying bundle)
    lead = torch.Size(np.broadcast_shapes(state.shape[:-1], action.shape[:-1]))
    if state.shape[:-1] != lead:
        state = state.expand(*lead, STATE_DIM)
    if action.shape[:-1] != lead:
        action = action.expand(*lead, ACTION_DIM)
    return state.reshape(-1, STATE_DIM), action.reshape(-1, ACTION_DIM), tuple(lead)


def _derivative_map(inv_mass: float, inv_tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Matrix (45, 13) and offset (13,) with derivative = [state, action, q (x) y] @ M + offset.

    ``q (x) y`` is the flattened outer product of q = (w, x, y, z) with y = (T q, omega), T the
    collective thrust. Built in float64 and cast once per dtype.
    """
    m = torch.zeros(_FEATURE_DIM, STATE_DIM, dtype=torch.float64)
    offset = torch.zeros(STATE_DIM, dtype=torch.float64)
    act, bil = STATE_DIM, STATE_DIM + ACTION_DIM

    def tq(i: int, j: int) -> int:  # row of q_i * (T q_j)
        return bil + _Y_DIM * i + j

    def qw(i: int, j: int) -> int:  # row of q_i * omega_j
        return bil + _Y_DIM * i + 4 + j

    for k in range(3):
        m[VEL.start + k, POS.start + k] = 1.0  # p' = v
        m[OMEGA.start + k, OMEGA.start + k] = -inv_tau  # omega' = (cmd - omega) / tau
        m[act + RATES.start + k, OMEGA.start + k] = inv_tau
    # q' = 0.5 q * (0, omega): rows (w, x, y, z) of the Hamilton product
    w, x, y, z = range(4)
    quat_terms = [
        {(x, 0): -0.5, (y, 1): -0.5, (z, 2): -0.5},
        {(w, 0): 0.5, (y, 2): 0.5, (z, 1): -0.5},
        {(w, 1): 0.5, (x, 2): -0.5, (z, 0): 0.5},
        {(w, 2): 0.5, (x, 1): 0.5, (y, 0): -0.5},
    ]
    for row, terms in enumerate(quat_terms):
        for (i, j), coef in terms.items():
            m[qw(i, j), QUAT.start + row] = coef
    # v' = T / m * body_z(q) - g e_z, body_z = (2(xz + wy), 2(yz - wx), 1 - 2(xx + yy))
    ax, ay, az = VEL.start, VEL.start + 1, VEL.start + 2
    m[tq(x, z), ax] = m[tq(w, y), ax] = 2.0 * inv_mass
    m[tq(y, z), ay], m[tq(w, x), ay] = 2.0 * inv_mass, -2.0 * inv_mass
    m[act + THRUST.start, az] = inv_mass
    m[tq(x, x), az] = m[tq(y, y), az] = -2.0 * inv_mass
    offset[az] = -GRAVITY_MPS2
    return m, offset


def _renormalise_t(x: torch.Tensor) -> torch.Tensor:
    """Return the feature-major state ``x`` (13, B) with its quaternion back at unit norm."""
    q = x[QUAT]
    # sqrt of a row sum: torch's norm over a non-innermost dim is ~15x slower here
    # (clamping the squared norm at 1e-24 equals clamping the norm at 1e-12, finite gradient)
    norm = q.square().sum(dim=0, keepdim=True).clamp_min(1e-24).sqrt()
    return torch.cat([x[POS], q / norm, x[VEL.start :]])
