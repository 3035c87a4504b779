"""Policy training on the learned model.

The trainer of the simulation core runs unchanged; only its dynamics and its latent change:
``dynamics = prior ⊕ D(., ., z)`` of the freshly fitted VND model (weights frozen, gradients
flow through it into the actions), and z drawn once per training episode. The MMD term pulls
the encoded latents of real flights towards N(0, I), so N(0, I) draws cover the conditions met
so far and plausible ones between them: a data-driven domain randomisation. A share of the
episodes draws z from the re-encoded replay itself (plus a little jitter), so the conditions
actually met get most of the training budget of a short update. The policy reads z in its
observation and starts from the active policy's weights.

The training environment is the trainer's, minus what the model already holds: the trainer
wraps its dynamics in random motor lags and linear drag so that a policy trained on the bare
prior flies the real vehicle; the residual, fitted on that vehicle's own flights, already has
its drag and lag, and adding them a second time trains a policy for a more sluggish vehicle
than the one it flies (measured: calm figure-eight 0.046 m instead of 0.024 m on the true
plant). The random command delay stays (:func:`on_model_environment`).

Which residual components drive the training rollouts is a choice (``components``,
:mod:`vnd_core.vnd.components`): by default position and velocity (forces such as wind,
payload, lost thrust) and the per-condition body-rate offset of the rate-offset head (the
torque of an offset centre of mass or a weak rotor). A state-dependent rotational residual,
learned from 50 Hz motion capture, mostly holds the rate loop's lag and filter artefacts; a
policy trained against it learns to fight torques the vehicle does not have.

A policy with a force input (``PolicyConfig.force_dim``) reads, besides z, the force the prior
does not explain, which a :class:`~vnd_core.force_observer.ForceObserver` estimates in flight.
Its training shows it what that observer reads: every roll-out tick, the force the prior does
not explain over the last tick, low-pass filtered as the observer filters it
(:class:`~vnd_core.rollout.ForceReading`). An episode starts with the reading settled on its
condition's force (:func:`with_force`): the residual's force at hover under the episode's z
plus, in a share of the episodes, a constant world-frame force the dynamics add to
prior ⊕ D(., ., z) (:class:`ForceTraining`). So the policy keeps answering what the model has
not learned yet (a new condition before its first update, a wind stronger than any it has
seen), reads the swing of a wind's drag with its velocity as the flight's observer reports it,
and z tells it what the model knows of the condition. As in flight, it reads the horizontal
part of that force, and its actions reach the roll-out with the observer's thrust feed-forward
of the vertical force the prior does not explain, the residual's (:func:`anchored_dynamics`)
and the external force's (:func:`forced_dynamics`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vnd_core.dynamics import constant_accel_delta
from vnd_core.force_observer import (
    clip_to_observer,
    left_to_policy_n,
    model_hover_force_n,
    observer_limit_n,
    with_thrust_feedforward,
    with_vertical_fed_forward,
)
from vnd_core.policy import ObservationBuilder, PolicyNet
from vnd_core.rollout import ForceReading
from vnd_core.state import QUAT
from vnd_core.trainer import PolicyTrainer, TrainerConfig, ZSampler
from vnd_core.trainer_config import LatentBoundDynamics, Step
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.components import (
    COMPONENT_MASKS,
    DEFAULT_COMPONENTS,
    check_components,
    compose,
)
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.features import dynamics_input
from vnd_core.vnd.model import INPUT_STD_FLOOR, VNDModel

# progress(iteration, total_iterations, metrics)
TrainProgress = Callable[[int, int, dict], None]


def train_policy_on_model(
    policy: PolicyNet,
    model: VNDModel,
    vehicle: VehicleParams,
    config: TrainerConfig,
    progress: TrainProgress | None = None,
    anchor_fraction: float = 0.2,
    residual_bound: torch.Tensor | None = None,
    latent_pool: torch.Tensor | None = None,
    pool_fraction: float = 0.5,
    pool_weights: torch.Tensor | None = None,
    components: str = DEFAULT_COMPONENTS,
    *,
    trust_region: TrustRegion,
) -> dict:
    """Train ``policy`` in place on ``model``'s dynamics with z ~ N(0, I) per rollout
    (a fraction ``anchor_fraction`` of the rollouts: z = 0 on the prior; a fraction
    ``pool_fraction`` of the others: a row of ``latent_pool`` (M, nz), the re-encoded replay,
    drawn in proportion to ``pool_weights`` (M,) when given;
    residual clipped to ``residual_bound`` (12,) when given, its inputs held within
    ``trust_region`` (:class:`TrustRegion`; pass the fitted dataset's) and restricted to
    ``components``; see the module docstring).

    ``policy`` is the warm start (pass a copy of the active policy); its latent size must equal
    the model's. The model is frozen (``frozen_dynamics``). Returns the trainer's JSON-able
    summary (iterations, wall time, first and final loss, final position error).
    """
    policy.train()
    trainer = on_model_trainer(
        policy,
        model,
        vehicle,
        config,
        anchor_fraction=anchor_fraction,
        residual_bound=residual_bound,
        latent_pool=latent_pool,
        pool_fraction=pool_fraction,
        pool_weights=pool_weights,
        components=components,
        trust_region=trust_region,
    )
    summary = trainer.train(progress=progress)
    policy.eval()
    return summary


def on_model_trainer(
    policy: PolicyNet,
    model: VNDModel,
    vehicle: VehicleParams,
    config: TrainerConfig,
    *,
    anchor_fraction: float,
    residual_bound: torch.Tensor | None,
    latent_pool: torch.Tensor | None,
    pool_fraction: float,
    pool_weights: torch.Tensor | None,
    components: str,
    trust_region: TrustRegion,
) -> PolicyTrainer:
    """The trainer :func:`train_policy_on_model` runs (arguments as there), for callers that
    train ``policy`` in several calls with one optimiser state."""
    if policy.latent_dim != model.latent_dim:
        raise ValueError(
            f"policy latent size {policy.latent_dim} differs from the model's {model.latent_dim}"
        )
    if not 0.0 <= anchor_fraction < 1.0:
        raise ValueError(f"anchor_fraction must be within [0, 1), got {anchor_fraction}")
    dynamics = anchored_dynamics(
        model,
        residual_bound,
        components,
        trust_region=trust_region,
        vertical_fed_forward=bool(policy.force_dim),
    )
    sampler = anchored_latent(
        model.latent_dim, anchor_fraction, latent_pool, pool_fraction, pool_weights
    )
    reading = None
    if policy.force_dim:
        hover = HoverForce(model)
        sampler = with_force(sampler, FORCE_TRAINING, hover)
        dynamics = forced_dynamics(dynamics, hover)
        reading = ForceReading.of_observer(model.prior)
    trainer = PolicyTrainer(
        policy, dynamics, vehicle, on_model_environment(config), sampler, force_reading=reading
    )
    if policy.force_dim:
        trainer.builder = ObservedForceInput(trainer.builder, observer_limit_n(vehicle))
    return trainer


@dataclass(frozen=True)
class ForceTraining:
    """The external forces a policy with a force input trains against, one per episode."""

    fraction: float = 0.5  # share of the episodes with a force (the others: none)
    max_n: float = 1.5  # horizontal magnitude, uniform in [0, this], direction uniform
    vertical_std_n: float = 0.5  # vertical force, normal


# The dob baseline's policy learns the same ranges (RandomisationConfig.observer_feedforward).
FORCE_TRAINING = ForceTraining()


class HoverForce:
    """The force (B, 3) in newtons the learned model adds at hover under latents z (B, nz)
    (:func:`~vnd_core.force_observer.model_hover_force_n`), the reading an episode starts
    settled on; zero for the anchors (z = 0), which fly the bare prior."""

    def __init__(self, model: VNDModel) -> None:
        self.model = model
        self.vehicle = model.vehicle
        self.dt_s = model.prior.config.dt_s

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """The force under ``z`` (B, nz)."""
        anchored = (z == 0).all(dim=-1, keepdim=True)
        force_n = model_hover_force_n(self.model, z)
        return torch.where(anchored, torch.zeros_like(force_n), force_n)


def with_force(sampler: ZSampler, forces: ForceTraining, hover: HoverForce) -> ZSampler:
    """The condition per episode (B, 3 + nz): the force, then the z of ``sampler``.

    The force is what an observer settled at hover reads: the residual's force under z
    (``hover``) plus, in a share ``forces.fraction`` of the episodes, an external force drawn
    from ``forces`` that :func:`forced_dynamics` applies. The policy's reading starts there
    and then follows the roll-out (:class:`~vnd_core.rollout.ForceReading`)."""

    def sample(batch: int, generator: torch.Generator) -> torch.Tensor:
        z = sampler(batch, generator)
        magnitude = forces.max_n * torch.rand(batch, 1, generator=generator)
        heading = 2.0 * math.pi * torch.rand(batch, 1, generator=generator)
        vertical = forces.vertical_std_n * torch.randn(batch, 1, generator=generator)
        force = torch.cat([magnitude * heading.cos(), magnitude * heading.sin(), vertical], 1)
        forced = torch.rand(batch, 1, generator=generator) < forces.fraction
        external = torch.where(forced, force, torch.zeros_like(force))
        return torch.cat([external + hover(z), z], dim=1)

    return sample


class ObservedForceInput(ObservationBuilder):
    """The training observation of a policy with a force input: its force columns (the roll-out's
    reading) as the flight's observer reports them, clipped to ``limit_n``
    (:func:`clip_to_observer`), while the roll-out applies the whole force. A policy that
    trained on forces the observer never reports would read a clipped force in flight as a
    weaker push than the one it meets. Of that reading the policy sees the part the thrust
    feed-forward leaves it (:func:`~vnd_core.force_observer.left_to_policy_n`), as in flight."""

    def __init__(self, builder: ObservationBuilder, limit_n: float) -> None:
        # the wrapped builder's scales, layout and maps as they are: only the condition differs
        self.__dict__.update(vars(builder))
        self.limit_n = limit_n

    def seen_condition(self, condition: torch.Tensor) -> torch.Tensor:
        """The condition (B, 3 + nz) with its force clipped, the part left to the policy."""
        force = condition[:, : self.config.force_dim]
        read = left_to_policy_n(clip_to_observer(force, self.limit_n))
        return torch.cat([read, condition[:, force.shape[1] :]], dim=1)


def forced_dynamics(dynamics: LatentBoundDynamics, hover: HoverForce) -> LatentBoundDynamics:
    """``dynamics`` under a condition (B, 3 + nz) of :func:`with_force`: the z part drives
    ``dynamics``, and the condition's force minus the model's force at hover (``hover``) is an
    external world-frame force (N) on the nominal mass, held over each tick. The actions reach
    the vehicle as the flight sends them: with the observer's thrust feed-forward of that
    force's vertical part (:func:`~vnd_core.force_observer.with_thrust_feedforward`;
    ``dynamics`` cancels the residual's own, :func:`anchored_dynamics`)."""
    vehicle = hover.vehicle

    def bind_latent(condition: torch.Tensor) -> Step:
        z = condition[:, 3:]
        inner = dynamics.bind_latent(z)
        external_n = condition[:, :3] - hover(z)
        delta = constant_accel_delta(external_n / vehicle.mass_kg, hover.dt_s)

        def step(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
            sent = with_thrust_feedforward(action, external_n, state[:, QUAT], vehicle)
            return inner(state, sent) + delta

        return step

    return LatentBoundDynamics(bind_latent)


def residual_bound(dataset: TransitionDataset) -> torch.Tensor:
    """Largest prior error (12,) per component in ``dataset``: the training rollouts clip the
    residual to what the data showed."""
    return dataset.tensors()["targets"].abs().amax(dim=0)


def on_model_environment(config: TrainerConfig) -> TrainerConfig:
    """``config`` with the motor lags and the linear drag of the training environment off (the
    fitted residual holds the vehicle's own; see the module docstring)."""
    return dataclasses.replace(config, thrust_lag_max_s=0.0, rate_lag_max_s=0.0, drag_max_per_s=0.0)


POOL_JITTER = 0.1  # std of the noise added to a latent drawn from the replay pool


def anchored_latent(
    latent_dim: int,
    anchor_fraction: float,
    pool: torch.Tensor | None = None,
    pool_fraction: float = 0.5,
    pool_weights: torch.Tensor | None = None,
) -> ZSampler:
    """z per episode: 0 with probability ``anchor_fraction``; else a jittered row of ``pool``
    (M, nz) with probability ``pool_fraction`` (when a pool is given; rows drawn uniformly or
    in proportion to ``pool_weights`` (M,)); else z ~ N(0, I)."""
    if not 0.0 <= pool_fraction <= 1.0:
        raise ValueError(f"pool_fraction must be within [0, 1], got {pool_fraction}")
    if pool_weights is not None and (pool is None or pool_weights.shape != (len(pool),)):
        raise ValueError("pool_weights must hold one weight per pool row")

    def sample(batch: int, generator: torch.Generator) -> torch.Tensor:
        z = torch.randn(batch, latent_dim, generator=generator)
        if pool is not None and len(pool):
            if pool_weights is None:
                index = torch.randint(len(pool), (batch,), generator=generator)
            else:
                index = torch.multinomial(pool_weights, batch, True, generator=generator)
            rows = pool[index]
            jittered = rows + POOL_JITTER * torch.randn(batch, latent_dim, generator=generator)
            from_pool = torch.rand(batch, generator=generator) < pool_fraction
            z = torch.where(from_pool[:, None], jittered, z)
        anchored = torch.rand(batch, generator=generator) < anchor_fraction
        return torch.where(anchored[:, None], torch.zeros_like(z), z)

    return sample


TRUST_STD = 3.0  # the residual reads each input as it is within this many data std of it


@dataclass(frozen=True)
class TrustRegion:
    """Where the data are: per-input mean and std (16,) of the dynamics inputs.

    The residual is fitted on the replay, so it is only trusted near the replay: it reads each
    dynamics input clamped to within :data:`TRUST_STD` std of the data (:meth:`project`), so
    beyond the data it holds the correction it has at the data's edge instead of extrapolating.
    A steady force (a wind, a payload) then acts wherever the training rollouts fly: the
    trainer's perturbed starts and its figure-eight and circle references leave a hover replay
    on most ticks, and a residual faded out there trains the policy against a fraction of the
    wind it meets in flight. The region must come from the data the model was fitted on
    (:meth:`of_dataset`): the model's own input normaliser is frozen at its first fit, which is
    calm flight.
    """

    mean: torch.Tensor  # (16,) mean of each dynamics input
    std: torch.Tensor  # (16,) std of each dynamics input (floored)

    @classmethod
    def of_dataset(cls, dataset: TransitionDataset) -> TrustRegion:
        """The region of every transition in ``dataset``."""
        inputs = dataset.tensors()["inputs"]
        if len(inputs) < 2:
            raise ValueError(f"a trust region needs >= 2 transitions, got {len(inputs)}")
        return cls(inputs.mean(dim=0), inputs.std(dim=0).clamp_min(INPUT_STD_FLOOR))

    def project(self, inputs: torch.Tensor) -> torch.Tensor:
        """Dynamics inputs (B, 16) clamped to the region's box; gradient flows where unclamped."""
        low = self.mean - TRUST_STD * self.std
        high = self.mean + TRUST_STD * self.std
        return torch.maximum(torch.minimum(inputs, high), low)


def data_inputs(region: TrustRegion, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The dynamics inputs (B, 16) the residual reads at ``state`` (B, 13), ``action`` (B, 4):
    the true inputs near the data of ``region``, held at its edge beyond it."""
    return region.project(dynamics_input(state, action))


def anchored_dynamics(
    model: VNDModel,
    residual_bound: torch.Tensor | None = None,
    components: str = "full",
    prior_at_zero: bool = True,
    *,
    trust_region: TrustRegion,
    vertical_fed_forward: bool = False,
) -> LatentBoundDynamics:
    """``prior ⊕ mask · clip(D(project(s, a), z), ±residual_bound)`` of the frozen ``model``
    (``mask`` from :data:`COMPONENT_MASKS`, ``project`` clamps the dynamics inputs to
    ``trust_region``: the region of the data the model was fitted on); with ``prior_at_zero``
    the bare prior for rows whose z is exactly 0 (the anchors; a latent-free model is trained
    with z = 0 and passes False). With ``vertical_fed_forward`` the residual's vertical force
    is cancelled by the observer's thrust feed-forward, as a policy with a force input flies
    (:func:`~vnd_core.force_observer.with_vertical_fed_forward`).
    Shapes: state (B, 13), action (B, 4), z (B, nz)."""
    mask = torch.tensor(COMPONENT_MASKS[check_components(components)])
    model.frozen_dynamics()  # freezes the weights; gradients still flow into state and action

    def bind_latent(z: torch.Tensor) -> Step:
        """The dynamics under latents ``z`` (B, nz): their FiLM terms and anchors computed once
        (the policy trainer binds an episode's z once per window)."""
        modulation = model.residual.modulation(z)
        anchored = (z == 0).all(dim=-1, keepdim=True) if prior_at_zero else None  # (B, 1)

        def step(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
            prior_next = model.prior(state, action)
            residual = model.residual(
                data_inputs(trust_region, state, action), modulation=modulation
            )
            if residual_bound is not None:
                residual = residual.clamp(-residual_bound, residual_bound)
            residual = residual * mask
            if vertical_fed_forward:
                residual = with_vertical_fed_forward(residual, state[:, QUAT])
            corrected = compose(prior_next, residual, components)  # forces only: rotation kept
            return corrected if anchored is None else torch.where(anchored, prior_next, corrected)

        return step

    return LatentBoundDynamics(bind_latent)
