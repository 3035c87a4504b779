"""The fused NominalModel (one matrix product per derivative) against the textbook RK4 written
out term by term with the SO(3) helpers: same values and gradients to float tolerance."""

from __future__ import annotations

import pytest
import torch
from vnd_core.dynamics import NominalModel, NominalModelConfig
from vnd_core.so3 import body_z_axis, exp_map, quat_mul, quat_normalize
from vnd_core.state import GRAVITY_MPS2, OMEGA, POS, QUAT, RATES, THRUST, VEL
from vnd_core.vehicle import load_vehicle

torch.set_num_threads(1)


def _textbook_derivative(model: NominalModel, state: torch.Tensor, action: torch.Tensor):
    """p' = v, q' = q * (0, w) / 2, v' = T / m body_z - g e_z, w' = (cmd - w) / tau."""
    q, omega = state[..., QUAT], state[..., OMEGA]
    accel = action[..., THRUST] * model.inv_mass * body_z_axis(q)
    accel = accel - torch.tensor([0.0, 0.0, GRAVITY_MPS2], dtype=state.dtype)
    q_dot = 0.5 * quat_mul(q, torch.cat([torch.zeros_like(omega[..., :1]), omega], dim=-1))
    omega_dot = (action[..., RATES] - omega) * model.inv_tau_rate
    return torch.cat([state[..., VEL], q_dot, accel, omega_dot], dim=-1)


def _textbook_step(model: NominalModel, state: torch.Tensor, action: torch.Tensor):
    h = model.config.dt_s / model.config.substeps
    for _ in range(model.config.substeps):
        k1 = _textbook_derivative(model, state, action)
        k2 = _textbook_derivative(model, state + 0.5 * h * k1, action)
        k3 = _textbook_derivative(model, state + 0.5 * h * k2, action)
        k4 = _textbook_derivative(model, state + h * k3, action)
        state = state + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        state = torch.cat(
            [state[..., POS], quat_normalize(state[..., QUAT]), state[..., VEL.start :]], -1
        )
    return state


def _random_inputs(batch: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    state = torch.randn(batch, 13, generator=gen, dtype=dtype)
    state[:, QUAT] = exp_map(torch.randn(batch, 3, generator=gen, dtype=dtype))
    state[:, OMEGA] *= 3.0
    action = torch.randn(batch, 4, generator=gen, dtype=dtype) * 5.0
    action[:, THRUST] = action[:, THRUST].abs() * 3.0
    return state, action


@pytest.mark.parametrize("substeps", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_step_matches_textbook_rk4(substeps, dtype):
    model = NominalModel(load_vehicle("agile"), NominalModelConfig(substeps=substeps))
    state, action = _random_inputs(300, dtype, seed=substeps)
    weights = torch.randn(300, 13, dtype=dtype, generator=torch.Generator().manual_seed(9))
    results = []
    for step in (model.step, lambda s, a: _textbook_step(model, s, a)):
        s, a = state.clone().requires_grad_(True), action.clone().requires_grad_(True)
        out = step(s, a)
        (out * weights).sum().backward()
        results.append((out.detach(), s.grad, a.grad))
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for fused, reference in zip(results[0], results[1], strict=True):
        torch.testing.assert_close(fused, reference, atol=tol, rtol=tol)


def test_derivative_matches_textbook_and_keeps_leading_dims():
    model = NominalModel(load_vehicle("small"))
    state, action = _random_inputs(24, torch.float64, seed=5)
    state, action = state.view(2, 3, 4, 13), action.view(2, 3, 4, 4)
    fused = model.derivative(state, action)
    assert fused.shape == (2, 3, 4, 13)
    torch.testing.assert_close(fused, _textbook_derivative(model, state, action))
    # one action broadcast over a batch of states
    stepped = model.step(state, action[0, 0, 0])
    torch.testing.assert_close(stepped, _textbook_step(model, state, action[0, 0, 0]))


def test_shape_errors_name_the_argument():
    model = NominalModel(load_vehicle("agile"))
    with pytest.raises(ValueError, match="state must be"):
        model.step(torch.zeros(2, 12), torch.zeros(2, 4))
