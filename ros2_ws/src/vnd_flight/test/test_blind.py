"""Blind flight estimation: command replay, the disturbance estimate, prediction against the
true plant."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from vnd_core.plant import TruePlant
from vnd_core.plant_parts import PlantConfig
from vnd_core.scenario import scenario_from_mapping
from vnd_core.state import QUAT, VEL, hover_state
from vnd_core.vehicle import load_vehicle
from vnd_flight.blind import (
    BlindConfig,
    BlindEstimator,
    CommandHistory,
    DisturbanceEstimator,
    body_z,
    tilt_rad,
)
from vnd_flight.fallback import FallbackController, Setpoint

VEHICLE = load_vehicle("agile")
MS = 1_000_000
QUIET = PlantConfig(
    position_noise_m=0.0, attitude_noise_rad=0.0, velocity_noise_mps=0.0, rate_noise_radps=0.0
)


def test_segments_start_each_command_after_its_delay_and_fill_before_the_first() -> None:
    history = CommandHistory(history_s=1.0)
    history.add(10 * MS, (1.0, 0.0, 0.0, 0.0))
    history.add(30 * MS, (2.0, 0.0, 0.0, 0.0))
    history.add(50 * MS, (3.0, 0.0, 0.0, 0.0))
    segments = history.segments(0, 70 * MS, delay_ns=5 * MS, default=(9.0, 0.0, 0.0, 0.0))
    assert [(d // MS, a[0]) for d, a in segments] == [(15, 9.0), (20, 1.0), (20, 2.0), (15, 3.0)]
    assert sum(d for d, _ in segments) == 70 * MS
    # a window inside one command's time: only that command
    inside = history.segments(40 * MS, 45 * MS, delay_ns=5 * MS, default=(9.0, 0, 0, 0))
    assert [(d // MS, a[0]) for d, a in inside] == [(5, 2.0)]


def test_history_forgets_what_is_older_than_its_window() -> None:
    history = CommandHistory(history_s=0.1)
    for k in range(20):
        history.add(k * 20 * MS, (float(k), 0.0, 0.0, 0.0))
    # the command acting at 0 is the oldest one still kept, not the first ever sent
    first = history.segments(0, 1, delay_ns=0, default=(-1.0, 0, 0, 0))[0][1][0]
    assert first == -1.0 and len(history._items) <= 7


def _wind_plant(wind_mps: float) -> TruePlant:
    scenario = scenario_from_mapping(
        {
            "name": "steady",
            "duration_s": 30.0,
            "reference": {"kind": "hover", "center_m": [0.0, 0.0, 1.0]},
            "events": [
                {"at_s": 0.0, "type": "wind", "kind": "constant", "velocity_mps": [wind_mps, 0, 0]}
            ],
        },
        "test",
    )
    plant = TruePlant(VEHICLE, scenario, config=QUIET)
    plant.reset(hover_state((1,)))
    return plant


@pytest.mark.parametrize("wind_mps", [0.0, 4.0])
def test_disturbance_estimate_finds_a_steady_wind_through_the_drag_law(wind_mps: float) -> None:
    """Held in place in the wind (as the policy does before odometry is lost): the estimate of
    the external acceleration matches what the plant's drag gives at rest and when moving."""
    plant = _wind_plant(wind_mps)
    estimator = DisturbanceEstimator(VEHICLE, BlindConfig())
    hold = FallbackController(VEHICLE)
    setpoint = Setpoint.hold(np.array([0.0, 0.0, 1.0]), 0.0)
    state = plant.state[0].double().numpy()
    for k in range(300):  # 6 s
        action = hold.command(state, setpoint)
        # the thrust acting is the one sent a latency ago; at a steady hold they agree
        state = plant.step(torch.from_numpy(action))[0].double().numpy()
        estimator.update((k + 1) * 20 * MS, state, float(action[0]))
    velocity = state[VEL]
    wind_x = estimator.wind_mps[0]
    assert wind_x == pytest.approx(wind_mps, abs=0.5)
    # What the plant's drag law gives at rest in the air, and what the estimate predicts.
    c1, c2 = VEHICLE.drag_linear_nspm[0], VEHICLE.drag_quadratic_ns2pm2[0]
    true_at_rest = (c1 + c2 * wind_mps) * wind_mps / VEHICLE.mass_kg
    assert estimator.accel_mps2((0.0, 0.0, 0.0))[0] == pytest.approx(true_at_rest, abs=0.2)
    assert abs(estimator.accel_mps2(velocity)[2]) < 0.2  # no vertical bias at the right mass


def test_prediction_follows_the_true_plant_through_replayed_commands() -> None:
    """Odometry stops while a policy-like command sequence keeps changing the rates: the
    replay through the rate loop keeps the attitude within a degree of the truth over 0.5 s,
    where freezing the last state is off by many degrees."""
    plant = TruePlant(VEHICLE, config=QUIET)
    plant.reset(hover_state((1,)))
    blind = BlindEstimator(VEHICLE, BlindConfig(command_delay_s=plant.config.latency_s))
    rng = np.random.default_rng(0)
    t_ns = 0
    start = None
    for k in range(60):
        # a policy turning while its rate commands chatter
        action = np.array([VEHICLE.hover_thrust_n, *rng.normal(0.6, 1.5, 2), 0.0])
        blind.record(t_ns, action)
        plant.set_command(torch.from_numpy(action))
        state = plant.advance(0.02)[0].double().numpy()
        t_ns += 20 * MS
        if k == 34:
            start = (state.copy(), t_ns)
    blind.start(*start)
    predicted = blind.predict(t_ns)
    truth = plant.state[0].double().numpy()
    error_deg = math.degrees(
        math.acos(min(1.0, float(np.dot(body_z(predicted[QUAT]), body_z(truth[QUAT])))))
    )
    frozen_deg = math.degrees(
        math.acos(min(1.0, float(np.dot(body_z(start[0][QUAT]), body_z(truth[QUAT])))))
    )
    assert error_deg < 1.0 < 5.0 < frozen_deg
    assert np.linalg.norm(predicted[VEL] - truth[VEL]) < 0.05 * np.linalg.norm(truth[VEL]) + 0.05


def test_tilt_of_a_level_and_a_tilted_attitude() -> None:
    assert tilt_rad((1.0, 0.0, 0.0, 0.0)) == pytest.approx(0.0)
    half = math.radians(30.0) / 2
    assert math.degrees(tilt_rad((math.cos(half), math.sin(half), 0.0, 0.0))) == pytest.approx(30.0)


def test_invalid_config_is_named() -> None:
    with pytest.raises(ValueError, match="history_s"):
        BlindEstimator(VEHICLE, BlindConfig(history_s=0.2))
    with pytest.raises(ValueError, match="disturbance_time_constant_s"):
        BlindConfig(disturbance_time_constant_s=0.0).validate()
