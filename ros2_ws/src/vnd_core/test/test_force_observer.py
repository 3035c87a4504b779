"""The force observer on the prior: it reports everything the prior does not explain, and a
force-input policy's training reads the same force over the same flight."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from vnd_core.dynamics import CONTROL_PERIOD_S, NominalModel
from vnd_core.evaluation.baselines import (
    DISTURBANCE_DIM,
    DisturbedPrior,
)
from vnd_core.force_observer import ForceObserver, ObserverConfig, thrust_feedforward_n
from vnd_core.rollout import ForceReading, next_reading
from vnd_core.so3 import exp_map
from vnd_core.state import VEL, hover_state
from vnd_core.vehicle import load_vehicle

VEHICLE = load_vehicle("agile")
SPEED_MPS = 2.0


def cruise(tracking_controller) -> tuple[np.ndarray, np.ndarray]:
    """Fly the prior plus the vehicle's own drag at a steady 2 m/s along x for 3 s; the flight
    observer's final estimate (3,) in m/s^2 and the training roll-out's final reading (3,) in
    N over the same ticks."""
    plant = DisturbedPrior(VEHICLE)
    z = torch.zeros(1, DISTURBANCE_DIM)
    observer = ForceObserver(VEHICLE, ObserverConfig(latency_s=0.0, motor_time_constant_s=0))
    prior = NominalModel(VEHICLE)
    alpha = 1.0 - math.exp(-CONTROL_PERIOD_S / ObserverConfig().time_constant_s)
    training = ForceReading(prior, VEHICLE.mass_kg, CONTROL_PERIOD_S, alpha)
    reading = torch.zeros(1, 3)
    state = hover_state((1,), position_m=(0.0, 0.0, 1.0))
    state[0, VEL.start] = SPEED_MPS
    for k in range(150):
        observer.observe(state[0].double().numpy())
        t_s = CONTROL_PERIOD_S * k
        target = (
            torch.tensor([[SPEED_MPS * t_s, 0.0, 1.0]]),
            torch.tensor([[SPEED_MPS, 0.0, 0.0]]),
            torch.zeros(1, 3),
        )
        action = tracking_controller(state, target, VEHICLE)
        observer.command(action[0].double().numpy())
        nxt = plant(state, action, z)
        reading = next_reading(training, reading, state, action, nxt)
        state = nxt
    return observer.estimate_mps2, reading[0].numpy()


def test_the_prior_alone_reports_the_vehicles_own_drag_as_a_force(tracking_controller):
    lin, quad = VEHICLE.drag_linear_nspm[0], VEHICLE.drag_quadratic_ns2pm2[0]
    drag_mps2 = (lin + quad * SPEED_MPS) * SPEED_MPS / VEHICLE.mass_kg  # 0.59 m/s^2
    estimate, _ = cruise(tracking_controller)
    np.testing.assert_allclose(estimate, [-drag_mps2, 0.0, 0.0], atol=0.05)


def test_training_reads_the_force_the_flights_observer_reads(tracking_controller):
    """A force-input policy trains reading the roll-out's unexplained force, filtered as the
    observer filters it: over the same flight it reads what the flight's observer reports."""
    estimate, reading_n = cruise(tracking_controller)
    np.testing.assert_allclose(reading_n, VEHICLE.mass_kg * estimate, atol=0.03)
    assert reading_n[0] < -0.3  # the drag, not zero


def test_the_flights_feedforward_is_the_one_training_applies():
    """The control tick computes the thrust feed-forward in plain arithmetic; at a tilt, and at
    a tilt beyond the floor, it adds what the training roll-outs add, and leaves rates and the
    horizontal force alone."""
    observer = ForceObserver(VEHICLE)
    observer._estimate_mps2 = np.array([0.4, -0.2, -1.5])  # a push and a weight
    action = np.array([VEHICLE.hover_thrust_n, 0.2, -0.1, 0.05])
    for tilt_rad in (0.3, 1.3):
        quat = exp_map(torch.tensor([tilt_rad, 0.2, 0.0], dtype=torch.float64))
        sent = observer.compensate(action, quat.numpy())
        expected = thrust_feedforward_n(torch.from_numpy(observer.feedforward_force_n()), quat)
        assert sent[0] == pytest.approx(action[0] + float(expected[0]))
        np.testing.assert_array_equal(sent[1:], action[1:])
