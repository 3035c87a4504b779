"""The nominal model (physics prior): gradients, free fall, hover, quaternion norm, batching."""

from __future__ import annotations

import math

import pytest
import torch
from vnd_core import so3
from vnd_core.dynamics import CONTROL_PERIOD_S, NominalModel, NominalModelConfig
from vnd_core.state import GRAVITY_MPS2, OMEGA, POS, QUAT, VEL, hover_state
from vnd_core.vehicle import load_vehicle


@pytest.fixture(scope="module")
def vehicle():
    return load_vehicle("agile")


def _random_state(batch: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    state = torch.randn(batch, 13, generator=gen, dtype=dtype)
    state[:, QUAT] = so3.quat_normalize(state[:, QUAT])
    return state


def test_one_step_gradient_matches_finite_differences(vehicle):
    model = NominalModel(vehicle, NominalModelConfig(substeps=2))
    state = _random_state(2, torch.float64).requires_grad_(True)
    action = torch.tensor(
        [[7.0, 0.5, -0.3, 0.2], [5.0, -1.0, 2.0, 0.4]],
        dtype=torch.float64,
        requires_grad=True,
    )
    assert torch.autograd.gradcheck(model.step, (state, action), eps=1e-6, atol=1e-6)


def test_free_fall_is_exact_for_constant_gravity(vehicle):
    model = NominalModel(vehicle)
    state = hover_state((1,), position_m=(1.0, -2.0, 10.0)).double()
    state[:, VEL] = torch.tensor([0.5, 0.0, 1.0], dtype=torch.float64)
    action = torch.zeros(1, 4, dtype=torch.float64)
    steps = 50
    for _ in range(steps):
        state = model.step(state, action)
    t = steps * CONTROL_PERIOD_S
    expected_p = torch.tensor([1.0 + 0.5 * t, -2.0, 10.0 + t - 0.5 * GRAVITY_MPS2 * t * t])
    expected_v = torch.tensor([0.5, 0.0, 1.0 - GRAVITY_MPS2 * t])
    assert torch.allclose(state[0, POS].float(), expected_p, atol=1e-6)
    assert torch.allclose(state[0, VEL].float(), expected_v, atol=1e-6)
    assert torch.allclose(state[0, QUAT].float(), torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_hover_thrust_holds_the_state(vehicle):
    model = NominalModel(vehicle)
    start = hover_state((4,), position_m=(0.3, 0.2, 1.5))
    action = torch.tensor([vehicle.hover_thrust_n, 0.0, 0.0, 0.0]).expand(4, 4)
    state = start
    for _ in range(250):  # 5 s
        state = model.step(state, action)
    assert torch.allclose(state, start, atol=1e-5)


def test_more_thrust_climbs_less_falls(vehicle):
    model = NominalModel(vehicle)
    start = hover_state((2,))
    action = torch.tensor(
        [[vehicle.hover_thrust_n * 1.2, 0, 0, 0], [vehicle.hover_thrust_n * 0.8, 0, 0, 0]]
    )
    state = model.step(start, action)
    assert state[0, 9] > 0 > state[1, 9]


def test_unit_quaternion_preserved_over_10000_steps_and_rotation_correct(vehicle):
    """Uniform nonzero rates for 10,000 ticks (200 s): unit norm and the right attitude."""
    model = NominalModel(vehicle)
    rates = torch.tensor([[1.3, -0.7, 2.1], [-4.0, 0.5, 0.3]], dtype=torch.float64)
    state = hover_state((2,)).double()
    state[:, OMEGA] = rates  # already at the commanded rate, so the rotation is uniform
    action = torch.cat([torch.zeros(2, 1, dtype=torch.float64), rates], dim=-1)
    steps = 10_000
    with torch.inference_mode():  # the loop is long; no graph needed
        for _ in range(steps):
            state = model.step(state, action)
    assert (state[:, QUAT].norm(dim=-1) - 1.0).abs().max() < 1e-12
    expected = so3.exp_map(rates * steps * CONTROL_PERIOD_S)
    assert so3.rotvec_diff(state[:, QUAT], expected).norm(dim=-1).max() < 1e-4  # RK4 drift


def test_float32_quaternion_stays_unit_at_fast_rates(vehicle):
    model = NominalModel(vehicle)
    state = hover_state((8,))
    action = torch.cat([torch.zeros(8, 1), 6.0 * torch.randn(8, 3)], dim=-1)
    for _ in range(500):
        state = model.step(state, action)
    assert (state[:, QUAT].norm(dim=-1) - 1.0).abs().max() < 1e-6


def test_body_rates_follow_the_command_with_the_configured_lag(vehicle):
    model = NominalModel(vehicle, NominalModelConfig(substeps=4))
    state = hover_state((1,)).double()
    action = torch.tensor([[vehicle.hover_thrust_n, 1.0, 0.0, 0.0]], dtype=torch.float64)
    steps = 5
    for _ in range(steps):
        state = model.step(state, action)
    tau = vehicle.body_rate_time_constant_s
    expected = 1.0 - math.exp(-steps * CONTROL_PERIOD_S / tau)
    assert abs(float(state[0, 10]) - expected) < 1e-4


def test_tilted_thrust_accelerates_sideways(vehicle):
    """A body rolled by +angle about x has its thrust tilted towards -y (FLU, ENU)."""
    model = NominalModel(vehicle)
    state = hover_state((1,))
    state[:, QUAT] = so3.exp_map(torch.tensor([[0.2, 0.0, 0.0]]))
    action = torch.tensor([[vehicle.hover_thrust_n, 0.0, 0.0, 0.0]])
    out = model.step(state, action)
    assert out[0, 8] < 0 and abs(float(out[0, 7])) < 1e-6


def test_batches_over_any_leading_dims(vehicle):
    model = NominalModel(vehicle)
    state = _random_state(6).reshape(2, 3, 13)
    action = torch.randn(2, 3, 4)
    out = model(state, action)
    assert out.shape == (2, 3, 13)
    flat = model(state.reshape(6, 13), action.reshape(6, 4))
    assert torch.allclose(out.reshape(6, 13), flat)
