"""The non-learning baselines of ``vnd eval``: a domain-randomised policy and an oracle.

Both are trained by the same differentiable-simulation trainer as everything else, on the
prior extended by an explicit, parametric disturbance model (:class:`DisturbedPrior`):

- wind: air velocity w (m/s, world) acting through the vehicle's own linear + quadratic drag on
  the air-relative velocity, in the body frame (the true plant's drag law);
- mass: an extra mass fraction (a payload; thrust buys less acceleration);
- drag: a scale on the drag coefficients;
- actuator loss: the fraction of collective thrust lost and the roll/pitch torque per newton of
  thrust that a weak rotor (or an off-centre payload) produces.

The disturbance is an 8-vector held in the trainer's per-episode ``z`` slot (normalised by
:data:`DISTURBANCE_SCALE`), so the trainer draws it once per episode and resets it with the
episode, exactly as it does for VND's latents:

- **dr** (domain randomisation): wind, mass and drag are randomised (no actuator loss, as the
  issue specifies) and the policy is *blind* to them: :class:`BlindLatentObservation` feeds it
  z = 0, as it will get at deployment. One robust policy for every condition.
- **oracle**: the same ranges plus actuator loss, and the policy *sees* the true disturbance
  vector as its z input, in training and in flight (:func:`true_disturbance` computes it from
  the true plant and the scenario's event list every tick). This is "a policy given the true
  disturbance as input", an upper bound no deployable method can beat without luck.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from vnd_core.bundle import Bundle
from vnd_core.dynamics import NominalModel, constant_accel_delta
from vnd_core.force_observer import left_to_policy_n, with_thrust_feedforward
from vnd_core.plant_parts import ROTOR_COUNT, allocation_matrix
from vnd_core.policy import ObservationBuilder, PolicyNet
from vnd_core.scenario import (
    PayloadEvent,
    PayloadOffEvent,
    PropDamageEvent,
    PropRepairEvent,
    Scenario,
)
from vnd_core.so3 import rotate, rotate_inverse
from vnd_core.state import QUAT, VEL
from vnd_core.trainer import PolicyTrainer, TrainerConfig
from vnd_core.vehicle import VehicleParams

DISTURBANCE_DIM = 8
# Layout of the disturbance vector and the physical unit of one normalised unit per slot:
# wind x, y, z [m/s], extra mass fraction, drag scale - 1, thrust loss fraction,
# roll torque per thrust [m], pitch torque per thrust [m].
DISTURBANCE_SCALE = (3.0, 3.0, 1.0, 0.2, 0.5, 0.1, 0.005, 0.005)
WIND, MASS, DRAG, LOSS, TORQUE = slice(0, 3), 3, 4, 5, slice(6, 8)
# The external-force family uses slots 0-2 for the force (world frame) and slot 3 for the mass
# fraction; one normalised unit of force is this many newtons.
FORCE_SCALE_N = 1.0
FORCE = slice(0, 3)
FAMILY_PLANT_DRAG, FAMILY_EXTERNAL_FORCE = "plant_drag", "external_force"


@dataclass(frozen=True)
class RandomisationConfig:
    """Ranges the disturbance vector is drawn from, once per training episode."""

    wind_speed_max_mps: float = 6.0  # horizontal wind speed, uniform in [0, this]
    wind_vertical_std_mps: float = 0.3  # vertical wind, normal
    mass_fraction_range: tuple[float, float] = (-0.1, 0.4)  # extra mass / vehicle mass
    drag_scale_range: tuple[float, float] = (0.7, 1.5)  # drag coefficient scale
    damage_probability: float = 0.0  # chance an episode has one weakened rotor
    efficiency_min: float = 0.6  # remaining thrust fraction of a weakened rotor, >= this
    family: str = FAMILY_PLANT_DRAG  # disturbance model: plant_drag or external_force
    force_max_n: float = 1.0  # external_force: horizontal force magnitude, uniform in [0, this]
    force_vertical_std_n: float = 0.1  # external_force: vertical force, normal
    # external_force: the policy flies with the observer's thrust feed-forward of the force
    thrust_feedforward: bool = False

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        if self.family not in (FAMILY_PLANT_DRAG, FAMILY_EXTERNAL_FORCE):
            raise ValueError(
                f"family must be {FAMILY_PLANT_DRAG!r} or {FAMILY_EXTERNAL_FORCE!r}, "
                f"got {self.family!r}"
            )
        if self.family == FAMILY_EXTERNAL_FORCE and self.damage_probability > 0:
            raise ValueError("the external_force family has no rotor damage")
        if not self.force_max_n >= 0 or not self.force_vertical_std_n >= 0:
            raise ValueError("force_max_n and force_vertical_std_n must be >= 0")
        if self.thrust_feedforward and self.family != FAMILY_EXTERNAL_FORCE:
            raise ValueError("thrust_feedforward needs the external_force family")

    @classmethod
    def domain_randomisation(cls) -> RandomisationConfig:
        """Wind, mass and drag through the plant's drag law (the matched dr baseline)."""
        return cls()

    @classmethod
    def mismatched(cls) -> RandomisationConfig:
        """External force up to 1 N and mass -5..+25 % (the dr_mismatched baseline): no drag
        law, and the strongest test wind (5 m/s, about 1.4 N) outside the force range."""
        return cls(
            family=FAMILY_EXTERNAL_FORCE,
            mass_fraction_range=(-0.05, 0.25),
            force_max_n=1.0,
            force_vertical_std_n=0.1,
        )

    @classmethod
    def observer_feedforward(cls) -> RandomisationConfig:
        """External force up to 1.5 N horizontally (a fifth of the agile vehicle's weight),
        vertical 0.5 N std, no mass change (the observer lumps a payload into the force): the
        range of force inputs the dob policy learns to answer. It flies with the observer's
        thrust feed-forward, so the force's component along body z is answered for it."""
        return cls(
            family=FAMILY_EXTERNAL_FORCE,
            mass_fraction_range=(0.0, 0.0),
            force_max_n=1.5,
            force_vertical_std_n=0.5,
            thrust_feedforward=True,
        )

    @classmethod
    def oracle(cls) -> RandomisationConfig:
        """Wind, mass, drag and rotor damage (the oracle sees them, so it must know all)."""
        return cls(damage_probability=0.4)


def _scale() -> torch.Tensor:
    return torch.tensor(DISTURBANCE_SCALE)


def actuator_terms(
    vehicle: VehicleParams, efficiency: np.ndarray, com_offset_m: np.ndarray
) -> tuple[float, np.ndarray]:
    """Thrust loss fraction and roll/pitch torque per newton of collective thrust (2,) of rotor
    ``efficiency`` (4,) with the centre of mass at ``com_offset_m`` (3,), for an even split of
    thrust over the rotors (hover), relative to the nominal vehicle."""
    nominal = allocation_matrix(vehicle)
    offset_m = (float(com_offset_m[0]), float(com_offset_m[1]), float(com_offset_m[2]))
    actual = allocation_matrix(vehicle, offset_m) * efficiency
    per_rotor = 1.0 / ROTOR_COUNT
    loss = 1.0 - float(efficiency.sum()) * per_rotor
    torque = (actual[1:3] - nominal[1:3]).sum(axis=1) * per_rotor
    return loss, torque


def sample_disturbance(
    batch: int, generator: torch.Generator, vehicle: VehicleParams, config: RandomisationConfig
) -> torch.Tensor:
    """Normalised disturbance vectors (batch, 8) drawn from ``config``'s ranges (the layout of
    ``config.family``: see :class:`DisturbedPrior` and :class:`ExternalForcePrior`)."""
    config.validate()

    def uniform(low: float, high: float, n: int = 1) -> torch.Tensor:
        return low + (high - low) * torch.rand(batch, n, generator=generator)

    raw = torch.zeros(batch, DISTURBANCE_DIM)
    if config.family == FAMILY_EXTERNAL_FORCE:
        magnitude = uniform(0.0, config.force_max_n)
        heading = uniform(0.0, 2.0 * math.pi)
        raw[:, 0:1], raw[:, 1:2] = magnitude * heading.cos(), magnitude * heading.sin()
        raw[:, 2:3] = config.force_vertical_std_n * torch.randn(batch, 1, generator=generator)
        raw[:, FORCE] = raw[:, FORCE] / FORCE_SCALE_N
        raw[:, MASS] = uniform(*config.mass_fraction_range)[:, 0] / DISTURBANCE_SCALE[MASS]
        return raw
    speed = uniform(0.0, config.wind_speed_max_mps)
    heading = uniform(0.0, 2.0 * math.pi)
    raw[:, 0:1], raw[:, 1:2] = speed * heading.cos(), speed * heading.sin()
    raw[:, 2:3] = config.wind_vertical_std_mps * torch.randn(batch, 1, generator=generator)
    raw[:, MASS : MASS + 1] = uniform(*config.mass_fraction_range)
    raw[:, DRAG : DRAG + 1] = uniform(*config.drag_scale_range) - 1.0
    if config.damage_probability > 0:
        damaged = torch.rand(batch, generator=generator) < config.damage_probability
        rotor = torch.randint(ROTOR_COUNT, (batch,), generator=generator)
        remaining = uniform(config.efficiency_min, 1.0)[:, 0]
        for i in torch.nonzero(damaged).flatten().tolist():
            efficiency = np.ones(ROTOR_COUNT)
            efficiency[int(rotor[i])] = float(remaining[i])
            loss, torque = actuator_terms(vehicle, efficiency, np.zeros(3))
            raw[i, LOSS] = loss
            raw[i, TORQUE] = torch.as_tensor(torque, dtype=raw.dtype)
    return raw / _scale()


class DisturbedPrior:
    """``dynamics(state (B, 13), action (B, 4), z (B, 8)) -> next state (B, 13)``: the prior
    under the disturbance that the normalised vector z describes (see the module docstring).

    The prior integrates thrust and rates; the disturbance enters as a thrust correction (lost
    thrust, heavier vehicle), an external drag force from the air-relative velocity and a body
    torque, each held constant over the 20 ms tick (first-order, differentiable).
    """

    def __init__(self, vehicle: VehicleParams) -> None:
        self.vehicle = vehicle
        self.prior = NominalModel(vehicle)
        self.dt_s = self.prior.config.dt_s
        self.drag_lin = torch.tensor(vehicle.drag_linear_nspm)
        self.drag_quad = torch.tensor(vehicle.drag_quadratic_ns2pm2)
        self.inertia = torch.tensor(vehicle.inertia_kgm2)

    def __call__(self, state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Next state (B, 13) of ``state`` (B, 13) under ``action`` (B, 4) and disturbance z."""
        d = z * _scale()
        mass_ratio = 1.0 + d[:, MASS : MASS + 1]
        thrust = action[:, :1] * (1.0 - d[:, LOSS : LOSS + 1])
        # The prior only knows its nominal mass: hand it the thrust that gives the same
        # acceleration on the heavier vehicle (gravity is per unit mass, unchanged).
        nxt = self.prior(state, torch.cat([thrust / mass_ratio, action[:, 1:]], dim=1))
        q = state[:, QUAT]
        air_b = rotate_inverse(q, state[:, VEL] - d[:, WIND])
        scale = 1.0 + d[:, DRAG : DRAG + 1]
        drag_b = -scale * (self.drag_lin + self.drag_quad * air_b.abs()) * air_b
        accel = rotate(q, drag_b) / (self.vehicle.mass_kg * mass_ratio)
        torque = d[:, TORQUE] * action[:, :1]
        omega_dot = torch.cat([torque / self.inertia[:2], torch.zeros_like(torque[:, :1])], 1)
        dt = self.dt_s
        delta = torch.cat(
            [0.5 * dt * dt * accel, torch.zeros_like(q), dt * accel, dt * omega_dot], dim=1
        )
        return nxt + delta


class ExternalForcePrior:
    """``dynamics(state (B, 13), action (B, 4), z (B, 8)) -> next state (B, 13)``: the prior
    plus a constant external force in the world frame and an extra mass, the disturbance model
    of a practitioner who does not have the plant's drag law.

    z layout (family ``external_force``): slots 0-2 the force in units of
    :data:`FORCE_SCALE_N`, slot 3 the extra mass fraction in units of
    ``DISTURBANCE_SCALE[3]``, the rest unused. The force does not depend on the vehicle's
    velocity or attitude (no air-relative drag), unlike :class:`DisturbedPrior`'s wind.

    With ``thrust_feedforward`` the policy's actions reach the vehicle with the force
    observer's thrust feed-forward of the force
    (:func:`~vnd_core.force_observer.with_thrust_feedforward`), as the dob baseline flies them.
    """

    def __init__(self, vehicle: VehicleParams, thrust_feedforward: bool = False) -> None:
        self.vehicle = vehicle
        self.prior = NominalModel(vehicle)
        self.dt_s = self.prior.config.dt_s
        self.thrust_feedforward = thrust_feedforward

    def __call__(self, state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Next state (B, 13) of ``state`` (B, 13) under ``action`` (B, 4) and disturbance z."""
        force_n = z[:, FORCE] * FORCE_SCALE_N
        if self.thrust_feedforward:
            action = with_thrust_feedforward(action, force_n, state[:, QUAT], self.vehicle)
        mass_ratio = 1.0 + z[:, MASS : MASS + 1] * DISTURBANCE_SCALE[MASS]
        nxt = self.prior(state, torch.cat([action[:, :1] / mass_ratio, action[:, 1:]], dim=1))
        accel = force_n / (self.vehicle.mass_kg * mass_ratio)
        return nxt + constant_accel_delta(accel, self.dt_s)


def disturbance_dynamics(
    vehicle: VehicleParams, config: RandomisationConfig
) -> DisturbedPrior | ExternalForcePrior:
    """The training dynamics of ``config.family``."""
    config.validate()
    if config.family == FAMILY_EXTERNAL_FORCE:
        return ExternalForcePrior(vehicle, config.thrust_feedforward)
    return DisturbedPrior(vehicle)


class BlindLatentObservation(ObservationBuilder):
    """An :class:`ObservationBuilder` that always writes z = 0 into the observation, so a policy
    trained with it never sees the disturbance the trainer's dynamics read from z."""

    def __init__(self, builder: ObservationBuilder) -> None:
        # the wrapped builder's scales, layout and maps as they are: only the condition differs
        self.__dict__.update(vars(builder))

    def seen_condition(self, condition: torch.Tensor) -> torch.Tensor:
        """Zeros in place of the condition (B, 8)."""
        return torch.zeros_like(condition)


class FeedforwardForceObservation(ObservationBuilder):
    """An :class:`ObservationBuilder` that shows the policy only the force a thrust
    feed-forward leaves it (:func:`~vnd_core.force_observer.left_to_policy_n`, z slots 0-2),
    as the dob baseline reads its observer in flight."""

    def __init__(self, builder: ObservationBuilder) -> None:
        # the wrapped builder's scales, layout and maps as they are: only the condition differs
        self.__dict__.update(vars(builder))

    def seen_condition(self, condition: torch.Tensor) -> torch.Tensor:
        """The condition (B, 8) with its force slots reduced to what the policy answers."""
        force = left_to_policy_n(condition[:, FORCE] * FORCE_SCALE_N) / FORCE_SCALE_N
        return torch.cat([force, condition[:, FORCE.stop :]], dim=1)


def randomised_trainer(
    policy: PolicyNet,
    vehicle: VehicleParams,
    trainer_config: TrainerConfig,
    randomisation: RandomisationConfig,
    sees_disturbance: bool,
) -> PolicyTrainer:
    """The trainer of :func:`train_randomised_policy`: ``policy`` on the dynamics of
    ``randomisation.family`` (:func:`disturbance_dynamics`), a disturbance drawn per episode
    from its ranges, shown to the policy as z or hidden (z = 0)."""
    if policy.latent_dim != DISTURBANCE_DIM:
        raise ValueError(
            f"the disturbance vector has {DISTURBANCE_DIM} entries, the policy's latent "
            f"{policy.latent_dim}"
        )

    def sampler(batch: int, generator: torch.Generator) -> torch.Tensor:
        return sample_disturbance(batch, generator, vehicle, randomisation)

    dynamics = disturbance_dynamics(vehicle, randomisation)
    trainer = PolicyTrainer(policy, dynamics, vehicle, trainer_config, sampler)
    if not sees_disturbance:
        trainer.builder = BlindLatentObservation(trainer.builder)
    elif randomisation.thrust_feedforward:
        trainer.builder = FeedforwardForceObservation(trainer.builder)
    return trainer


def train_randomised_policy(
    policy: PolicyNet,
    vehicle: VehicleParams,
    trainer_config: TrainerConfig,
    randomisation: RandomisationConfig,
    sees_disturbance: bool,
    progress: Callable[[int, int, dict], None] | None = None,
) -> dict:
    """Train ``policy`` in place on the dynamics of ``randomisation.family`` with disturbances
    drawn per episode from its ranges; ``sees_disturbance`` gives the policy the true vector
    as its z (oracle) or zeros (domain randomisation). Returns the trainer's summary."""
    policy.train()
    trainer = randomised_trainer(policy, vehicle, trainer_config, randomisation, sees_disturbance)
    summary = trainer.train(progress=progress)
    policy.eval()
    summary["randomisation"] = dataclasses.asdict(randomisation)
    summary["sees_disturbance"] = sees_disturbance
    return summary


# The offline-trained policies of the suite: randomisation and whether the policy sees z.
# dob's policy sees the external force its observer estimates in flight; the rma teacher is
# the oracle's policy.
BASELINE_TRAININGS: dict[str, tuple[Callable[[], RandomisationConfig], bool]] = {
    "dr": (RandomisationConfig.domain_randomisation, False),
    "dr_mismatched": (RandomisationConfig.mismatched, False),
    "dob": (RandomisationConfig.observer_feedforward, True),
    "oracle": (RandomisationConfig.oracle, True),
}


def train_baseline_bundle(base: Bundle, kind: str, trainer_config: TrainerConfig) -> Bundle:
    """The base bundle's policy fine-tuned (a copy, warm start) for baseline ``kind`` (a key of
    :data:`BASELINE_TRAININGS`) with ``trainer_config``; the summary records the training."""
    if kind not in BASELINE_TRAININGS:
        raise ValueError(f"no offline training for {kind!r}; known: {sorted(BASELINE_TRAININGS)}")
    make_randomisation, sees_disturbance = BASELINE_TRAININGS[kind]
    policy = clone_policy(base.policy)
    summary = train_randomised_policy(
        policy, base.vehicle, trainer_config, make_randomisation(), sees_disturbance
    )
    return Bundle(
        version=base.version + 1,
        parent_version=base.version,
        policy=policy,
        vehicle=base.vehicle,
        summary={"kind": kind, **summary},
    )


def true_disturbance(
    scenario: Scenario, t_s: float, wind_mps: np.ndarray, vehicle: VehicleParams
) -> np.ndarray:
    """The oracle's z (8,) at scenario time ``t_s``: the plant's current air velocity
    ``wind_mps`` (3,) and the payload and rotor damage the scenario's events have applied.

    Drag scale is 0 (the plant's drag is the vehicle's own). A payload contributes its mass
    fraction and the torque per thrust of the shifted centre of mass.
    """
    payload_kg, com = 0.0, np.zeros(3)
    efficiency = np.ones(ROTOR_COUNT)
    for event in scenario.events:
        if event.at_s > t_s + 1e-9:
            break
        if isinstance(event, PayloadEvent):
            payload_kg = event.mass_kg
            com = np.asarray(event.com_offset_m) * payload_kg / (vehicle.mass_kg + payload_kg)
        elif isinstance(event, PayloadOffEvent):
            payload_kg, com = 0.0, np.zeros(3)
        elif isinstance(event, PropDamageEvent):
            efficiency[event.rotor] = event.efficiency
        elif isinstance(event, PropRepairEvent):
            efficiency[slice(None) if event.rotor is None else event.rotor] = 1.0
    raw = np.zeros(DISTURBANCE_DIM)
    raw[WIND] = wind_mps
    raw[MASS] = payload_kg / vehicle.mass_kg
    raw[LOSS], raw[TORQUE] = actuator_terms(vehicle, efficiency, com)
    return (raw / np.asarray(DISTURBANCE_SCALE)).astype(np.float32)


def clone_policy(policy: PolicyNet) -> PolicyNet:
    """A copy of ``policy`` with its own weights (warm start without touching the original)."""
    copy = PolicyNet(policy.vehicle, policy.config)
    copy.load_state_dict(policy.state_dict())
    return copy


__all__ = [
    "BASELINE_TRAININGS",
    "DISTURBANCE_DIM",
    "DISTURBANCE_SCALE",
    "BlindLatentObservation",
    "DisturbedPrior",
    "ExternalForcePrior",
    "RandomisationConfig",
    "clone_policy",
    "disturbance_dynamics",
    "randomised_trainer",
    "sample_disturbance",
    "train_baseline_bundle",
    "train_randomised_policy",
    "true_disturbance",
]
