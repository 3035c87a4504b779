"""The physics prior: a rigid-body quadrotor driven by collective thrust and body rates.

This is the textbook model the policy is trained on and the residual corrects. It has no drag,
no motor dynamics and no latency: the true plant (``plant.py``) has all three.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vnd_core.so3 import body_z_axis, quat_mul, quat_normalize
from vnd_core.state import GRAVITY_MPS2, OMEGA, POS, QUAT, RATES, THRUST, VEL
from vnd_core.vehicle import VehicleParams

CONTROL_PERIOD_S = 0.02  # 50 Hz control tick


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

    def __init__(self, vehicle: VehicleParams, config: NominalModelConfig | None = None):
        self.vehicle = vehicle
        self.config = config or NominalModelConfig()
        self.inv_mass = 1.0 / vehicle.mass_kg
        self.inv_tau_rate = 1.0 / vehicle.body_rate_time_constant_s

    def derivative(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Time derivative of the state (..., 13) under ``action`` (..., 4)."""
        q = state[..., QUAT]
        omega = state[..., OMEGA]
        thrust_n = action[..., THRUST]
        accel = (thrust_n * self.inv_mass) * body_z_axis(q)
        accel = accel - accel.new_tensor([0.0, 0.0, GRAVITY_MPS2])
        omega_quat = torch.cat([torch.zeros_like(omega[..., :1]), omega], dim=-1)
        q_dot = 0.5 * quat_mul(q, omega_quat)
        omega_dot = (action[..., RATES] - omega) * self.inv_tau_rate
        return torch.cat([state[..., VEL], q_dot, accel, omega_dot], dim=-1)

    def step(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Advance ``state`` by ``dt_s`` with RK4 sub-steps; returns (..., 13)."""
        h = self.config.dt_s / self.config.substeps
        for _ in range(self.config.substeps):
            k1 = self.derivative(state, action)
            k2 = self.derivative(state + 0.5 * h * k1, action)
            k3 = self.derivative(state + 0.5 * h * k2, action)
            k4 = self.derivative(state + h * k3, action)
            state = state + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
            state = _renormalise(state)
        return state

    __call__ = step


def _renormalise(state: torch.Tensor) -> torch.Tensor:
    """Return ``state`` with its quaternion projected back to unit norm."""
    return torch.cat(
        [state[..., POS], quat_normalize(state[..., QUAT]), state[..., QUAT.stop :]], dim=-1
    )
