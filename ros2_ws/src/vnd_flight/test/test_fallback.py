"""Fallback controller in closed loop with the nominal model: hold converges, landing stops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transforms3d.quaternions import axangle2quat
from vnd_core.dynamics import NominalModel
from vnd_core.vehicle import load_vehicle
from vnd_flight.fallback import (
    FallbackConfig,
    FallbackController,
    LandingPlanner,
    Setpoint,
    yaw_of,
)

DT_S = 0.02


@pytest.fixture(scope="module", params=["agile", "small"])
def vehicle(request):
    torch.set_num_threads(1)
    return load_vehicle(request.param)


def start_state(position_m, quat=(1.0, 0.0, 0.0, 0.0), velocity_mps=(0.0, 0.0, 0.0)):
    state = torch.zeros(13, dtype=torch.float64)
    state[:3] = torch.tensor(position_m, dtype=torch.float64)
    state[3:7] = torch.tensor(quat, dtype=torch.float64)
    state[7:10] = torch.tensor(velocity_mps, dtype=torch.float64)
    return state


def test_hold_converges_from_half_a_metre_offset(vehicle) -> None:
    model = NominalModel(vehicle)
    controller = FallbackController(vehicle)
    target = np.array([0.0, 0.0, 1.0])
    setpoint = Setpoint.hold(target, yaw_rad=0.4)
    offset = np.array([0.3, -0.3, 0.26])  # |offset| = 0.5 m, plus a tilt and some speed
    state = start_state(target + offset, axangle2quat([1, 1, 0], 0.3), (0.4, 0.0, -0.2))
    errors = []
    with torch.no_grad():
        for _ in range(round(4.0 / DT_S)):
            action = controller.command(state.numpy(), setpoint)
            assert np.isfinite(action).all() and action[0] >= 0.0
            state = model(state, torch.from_numpy(action))
            errors.append(np.linalg.norm(state[:3].numpy() - target))
    assert errors[round(3.0 / DT_S)] < 0.05  # within 5 cm after 3 s
    assert errors[-1] < 0.01
    assert abs(yaw_of(state[3:7].numpy()) - 0.4) < 0.02
    assert np.linalg.norm(state[7:10].numpy()) < 0.02


def test_hold_is_steady_at_the_target(vehicle) -> None:
    controller = FallbackController(vehicle)
    state = start_state((1.0, 2.0, 1.5))
    action = controller.command(state.numpy(), Setpoint.hold(np.array([1.0, 2.0, 1.5]), 0.0))
    assert action[0] == pytest.approx(vehicle.hover_thrust_n)
    assert np.allclose(action[1:], 0.0, atol=1e-9)


def test_tilt_command_is_limited(vehicle) -> None:
    config = FallbackConfig(max_tilt_rad=0.3)
    controller = FallbackController(vehicle, config)
    state = start_state((10.0, 0.0, 1.0))  # 10 m away: saturates the horizontal command
    accel = controller.desired_accel(state.numpy(), Setpoint.hold(np.array([0.0, 0.0, 1.0]), 0.0))
    tilt = math.atan2(math.hypot(accel[0], accel[1]), accel[2] + 9.81)
    assert tilt == pytest.approx(0.3, abs=1e-6)


def test_landing_descends_and_stops_at_the_floor(vehicle) -> None:
    model = NominalModel(vehicle)
    config = FallbackConfig(land_speed_mps=0.5)
    controller = FallbackController(vehicle, config)
    planner = LandingPlanner(config, floor_z_m=0.05)
    state = start_state((0.2, -0.1, 1.2))
    planner.start(state[:3].numpy(), yaw_rad=0.0)
    heights = []
    with torch.no_grad():
        for _ in range(round(5.0 / DT_S)):
            action = controller.command(state.numpy(), planner.step(DT_S))
            state = model(state, torch.from_numpy(action))
            heights.append(float(state[2]))
    heights = np.array(heights)
    descent_mps = -np.diff(heights) / DT_S
    assert descent_mps.max() < 0.5 * 1.2  # never much faster than the landing speed
    assert heights.min() > 0.05 - 0.02  # does not sink through the floor
    assert abs(heights[-1] - 0.05) < 0.01 and abs(float(state[9])) < 0.02  # settled on it
    assert np.allclose(state[:2].numpy(), [0.2, -0.1], atol=0.01)  # straight down


def test_invalid_config_is_named() -> None:
    with pytest.raises(ValueError, match="max_tilt_rad"):
        FallbackController(load_vehicle("agile"), FallbackConfig(max_tilt_rad=2.0))
