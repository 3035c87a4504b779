"""The force observer with a learned model's motion: what the model says the vehicle's motion
adds is predicted, not reported, so a force-input policy reads what it trained on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vnd_core.dynamics import CONTROL_PERIOD_S, NominalModel
from vnd_core.evaluation.baselines import (
    DISTURBANCE_DIM,
    FORCE_SCALE_N,
    DisturbedPrior,
    ExternalForcePrior,
)
from vnd_core.force_observer import (
    ForceObserver,
    LearnedMotion,
    ObserverConfig,
    thrust_feedforward_n,
)
from vnd_core.so3 import exp_map, rotate, rotate_inverse
from vnd_core.state import QUAT, VEL, hover_state
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd.features import RES_VEL

VEHICLE = load_vehicle("agile")
SPEED_MPS = 2.0


class OwnDragModel:
    """A model whose residual is exactly the vehicle's own drag (DisturbedPrior's law in still
    air): the velocity change over one tick, nothing else; its latent changes nothing."""

    vehicle = VEHICLE
    prior = NominalModel(VEHICLE)

    def residual_correction(
        self, state: torch.Tensor, action: torch.Tensor, z: torch.Tensor
    ) -> torch.Tensor:
        q, v = state[:, QUAT], state[:, VEL]
        air_b = rotate_inverse(q, v)
        lin, quad = (
            torch.tensor(VEHICLE.drag_linear_nspm),
            torch.tensor(VEHICLE.drag_quadratic_ns2pm2),
        )
        drag_b = -(lin + quad * air_b.abs()) * air_b
        residual = torch.zeros(state.shape[0], 12)
        residual[:, RES_VEL] = rotate(q, drag_b) / VEHICLE.mass_kg * CONTROL_PERIOD_S
        return residual


def cruise(
    tracking_controller, motion: LearnedMotion | None, valid: range = range(150)
) -> np.ndarray:
    """Fly the prior plus the vehicle's own drag at a steady 2 m/s along x for 3 s, the latent
    valid in the ticks ``valid``; the observer's final estimate (3,) in m/s^2."""
    plant = DisturbedPrior(VEHICLE)
    z = torch.zeros(1, DISTURBANCE_DIM)
    observer = ForceObserver(VEHICLE, ObserverConfig(latency_s=0.0, motor_time_constant_s=0))
    state = hover_state((1,), position_m=(0.0, 0.0, 1.0))
    state[0, VEL.start] = SPEED_MPS
    latent = np.zeros(4, dtype=np.float32)
    for k in range(150):
        observer.observe(state[0].double().numpy())
        t_s = CONTROL_PERIOD_S * k
        target = (
            torch.tensor([[SPEED_MPS * t_s, 0.0, 1.0]]),
            torch.tensor([[SPEED_MPS, 0.0, 0.0]]),
            torch.zeros(1, 3),
        )
        action = tracking_controller(state, target, VEHICLE)
        bound = motion.bind(latent) if motion and k in valid else None
        observer.command(action[0].double().numpy(), bound)
        state = plant(state, action, z)
    return observer.estimate_mps2


def test_the_prior_alone_reports_the_vehicles_own_drag_as_a_force(tracking_controller):
    lin, quad = VEHICLE.drag_linear_nspm[0], VEHICLE.drag_quadratic_ns2pm2[0]
    drag_mps2 = (lin + quad * SPEED_MPS) * SPEED_MPS / VEHICLE.mass_kg  # 0.59 m/s^2
    estimate = cruise(tracking_controller, None)
    np.testing.assert_allclose(estimate, [-drag_mps2, 0.0, 0.0], atol=0.05)


def test_the_learned_motion_is_predicted_so_no_force_is_left(tracking_controller):
    estimate = cruise(tracking_controller, LearnedMotion(OwnDragModel()))  # type: ignore[arg-type]
    assert np.linalg.norm(estimate) < 0.05, estimate


def test_the_learned_motion_is_kept_through_a_short_latent_dropout(tracking_controller):
    """A quarter of a second without a valid latent at the end of the cruise: the model under
    the last latent still predicts the drag, which the prior alone would report as a force."""
    motion = LearnedMotion(OwnDragModel())  # type: ignore[arg-type]
    estimate = cruise(tracking_controller, motion, valid=range(138))
    assert np.linalg.norm(estimate) < 0.05, estimate


def test_the_learned_motion_is_zero_at_hover():
    motion = LearnedMotion(OwnDragModel()).bind(np.zeros(4, dtype=np.float32))  # type: ignore[arg-type]
    hover = hover_state((1,))[0].numpy()
    action = np.array([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(motion(hover, action), np.zeros(3), atol=1e-7)


class PushModel(OwnDragModel):
    """The own-drag model plus a steady push along +y that its latent's first entry scales
    (1 N per unit): a condition the encoder recognises."""

    def residual_correction(
        self, state: torch.Tensor, action: torch.Tensor, z: torch.Tensor
    ) -> torch.Tensor:
        residual = super().residual_correction(state, action, z)
        push = torch.zeros(state.shape[0], 3)
        push[:, 1] = z[..., 0] / VEHICLE.mass_kg * CONTROL_PERIOD_S
        residual[:, RES_VEL] = residual[:, RES_VEL] + push
        return residual


def test_a_known_condition_is_read_at_once_and_the_rest_through_the_filter(tracking_controller):
    """Hovering in a 1 N push the model knows (latent 1): from the first estimate on, the
    observer reads it in full; the prior alone reads it 0.3 s behind its filter."""
    push = torch.zeros(1, DISTURBANCE_DIM)
    plant = ExternalForcePrior(VEHICLE)
    push[0, 1] = 1.0 / FORCE_SCALE_N
    latent = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    config = ObserverConfig(latency_s=0.0, motor_time_constant_s=0)
    learned = ForceObserver(VEHICLE, config)
    prior_only = ForceObserver(VEHICLE, config)
    motion = LearnedMotion(PushModel())  # type: ignore[arg-type]
    state = hover_state((1,), position_m=(0.0, 0.0, 1.0))
    target = (torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 3), torch.zeros(1, 3))
    for _ in range(config.warmup_ticks + 2):
        learned.observe(state[0].double().numpy())
        prior_only.observe(state[0].double().numpy())
        action = tracking_controller(state, target, VEHICLE)
        learned.command(action[0].double().numpy(), motion.bind(latent))
        prior_only.command(action[0].double().numpy())
        state = plant(state, action, push)
    np.testing.assert_allclose(learned.force_n(), [0.0, 1.0, 0.0], atol=0.03)
    assert prior_only.force_n()[1] < 0.3  # still rising through the filter


def hover_in_known_push(
    tracking_controller, config: ObserverConfig, valid: list[bool]
) -> np.ndarray:
    """Hover in a 1 N push along +y that the model knows (latent 1), the latent valid at tick k
    when ``valid[k]``; the force (N, 3) in newtons read after each tick."""
    push = torch.zeros(1, DISTURBANCE_DIM)
    push[0, 1] = 1.0 / FORCE_SCALE_N
    plant = ExternalForcePrior(VEHICLE)
    observer = ForceObserver(VEHICLE, config)
    motion = LearnedMotion(PushModel())  # type: ignore[arg-type]
    latent = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    state = hover_state((1,), position_m=(0.0, 0.0, 1.0))
    target = (torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 3), torch.zeros(1, 3))
    read = []
    for ok in valid:
        observer.observe(state[0].double().numpy())
        read.append(observer.force_n())
        action = tracking_controller(state, target, VEHICLE)
        observer.command(action[0].double().numpy(), motion.bind(latent) if ok else None)
        state = plant(state, action, push)
    return np.array(read)


def test_a_latent_glitch_does_not_step_the_force_read(tracking_controller):
    """One tick without a valid latent (a glitch, a swap's version mismatch) keeps the model's
    motion: the reading stays what it is with the latent always valid; dropping the motion at
    once would step it down by most of the 1 N push."""
    config = ObserverConfig(latency_s=0.0, motor_time_constant_s=0)
    glitch = [True] * 40 + [False] + [True] * 40
    steady = hover_in_known_push(tracking_controller, config, [True] * len(glitch))
    read = hover_in_known_push(tracking_controller, config, glitch)
    np.testing.assert_allclose(read, steady, atol=0.01)


def test_a_long_latent_dropout_and_its_end_do_not_step_the_force_read(tracking_controller):
    """Past motion_hold_s without a valid latent the observer predicts with the prior alone,
    and when the latent returns with the model again: each time the filtered part takes over
    the model's hover force, so the reading goes on smoothly at the 1 N push; without that
    hand-over it would fall by most of it, then count it twice."""
    valid = [True] * 40 + [False] * 100 + [True] * 40
    config = ObserverConfig(latency_s=0.0, motor_time_constant_s=0)
    read = hover_in_known_push(tracking_controller, config, valid)
    assert np.abs(np.diff(read[10:, 1])).max() < 0.02
    np.testing.assert_allclose(read[20:, 1], 1.0, atol=0.05)


def test_the_flights_feedforward_is_the_one_training_applies():
    """The control tick computes the thrust feed-forward in plain arithmetic; at a tilt, and at
    a tilt beyond the floor, it adds what the training roll-outs add, and leaves rates and the
    horizontal force alone."""
    observer = ForceObserver(VEHICLE)
    observer._prior_error_mps2 = np.array([0.4, -0.2, -1.5])  # a push and a weight
    action = np.array([VEHICLE.hover_thrust_n, 0.2, -0.1, 0.05])
    for tilt_rad in (0.3, 1.3):
        quat = exp_map(torch.tensor([tilt_rad, 0.2, 0.0], dtype=torch.float64))
        sent = observer.compensate(action, quat.numpy())
        expected = thrust_feedforward_n(torch.from_numpy(observer.feedforward_force_n()), quat)
        assert sent[0] == pytest.approx(action[0] + float(expected[0]))
        np.testing.assert_array_equal(sent[1:], action[1:])
