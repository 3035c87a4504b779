"""The force observer with a learned model's motion: what the model says the vehicle's motion
adds is predicted, not reported, so a force-input policy reads what it trained on."""

from __future__ import annotations

import numpy as np
import torch
from vnd_core.dynamics import CONTROL_PERIOD_S, NominalModel
from vnd_core.evaluation.baselines import (
    DISTURBANCE_DIM,
    FORCE_SCALE_N,
    DisturbedPrior,
    ExternalForcePrior,
)
from vnd_core.force_observer import ForceObserver, LearnedMotion, ObserverConfig
from vnd_core.so3 import rotate, rotate_inverse
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


def cruise(tracking_controller, motion: LearnedMotion | None) -> np.ndarray:
    """Fly the prior plus the vehicle's own drag at a steady 2 m/s along x for 3 s; the
    observer's final estimate (3,) in m/s^2."""
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
        observer.command(action[0].double().numpy(), motion.bind(latent) if motion else None)
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
