"""Shared helpers of the vnd_core tests: one thread for torch and a simple reference controller."""

from __future__ import annotations

import pytest
import torch
from vnd_core.so3 import body_z_axis, rotate_inverse
from vnd_core.state import GRAVITY_MPS2, split_state
from vnd_core.vehicle import VehicleParams


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The machine is shared: tests use one torch thread."""
    torch.set_num_threads(1)


def tracking_ctbr(
    state: torch.Tensor,
    reference_pva: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    vehicle: VehicleParams,
    kp: float = 6.0,
    kd: float = 4.0,
    k_att: float = 8.0,
) -> torch.Tensor:
    """A textbook geometric position controller that outputs CTBR (B, 4) for states (B, 13).

    Tests use it to fly the plant closed loop without depending on a trained policy.
    ``reference_pva`` holds position, velocity and acceleration (B, 3) each.
    """
    p, q, v, _ = split_state(state)
    ref_p, ref_v, ref_a = reference_pva
    gravity = torch.tensor([0.0, 0.0, GRAVITY_MPS2])
    accel_des = kp * (ref_p - p) + kd * (ref_v - v) + ref_a + gravity
    z_body = body_z_axis(q)
    thrust = vehicle.mass_kg * (accel_des * z_body).sum(-1, keepdim=True)
    z_des = accel_des / accel_des.norm(dim=-1, keepdim=True)
    tilt_err_b = rotate_inverse(q, torch.linalg.cross(z_body, z_des))
    yaw_err = 2.0 * q[..., 0:1] * q[..., 3:4]  # small-angle yaw of a nearly level attitude
    rates = k_att * tilt_err_b
    rates = torch.cat([rates[..., :2], rates[..., 2:] - 2.0 * yaw_err], dim=-1)
    thrust = thrust.clamp(vehicle.thrust_min_n, vehicle.thrust_max_n)
    return torch.cat([thrust, rates], dim=-1)


@pytest.fixture
def tracking_controller():
    """:func:`tracking_ctbr`, as a fixture (test modules cannot import this conftest by name)."""
    return tracking_ctbr
