"""The stages of a model update: fit the model, train the policy on it, build the gates' input.

:class:`vnd_core.learner.continual.ContinualLearner` runs them in order and owns what carries
across updates (the active bundle, a fitted model past a preemption); the functions here take
what a stage reads and return what the next stage needs.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from vnd_core.bundle import Bundle
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.improvement import ImprovementBasis
from vnd_core.learner.novelty import focus_weights
from vnd_core.learner.outcome import Progress
from vnd_core.learner.policy_update import (
    TrustRegion,
    anchored_dynamics,
    residual_bound,
    train_policy_on_model,
)
from vnd_core.policy import PolicyNet
from vnd_core.trainer import Dynamics
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.fit import FitReport, fit_vnd
from vnd_core.vnd.model import EncodedLatents, VNDModel


@dataclass
class FittedModel:
    """What the fit stage hands to the policy training and the gates."""

    model: VNDModel  # the fitted model (the new bundle's, once accepted)
    dataset: TransitionDataset  # transitions of the whole replay
    unexplained: torch.Tensor  # (W,) bool per context window: the active model misses it
    latents: EncodedLatents | None  # re-encoded latents of every window (None: no window)

    def latent_pool(self) -> torch.Tensor | None:
        """(W, nz) latents the policy training draws from (None: z ~ N(0, I) only)."""
        return self.latents.z if self.latents is not None else None

    def pool_weights(self, focus_fraction: float) -> torch.Tensor | None:
        """(W,) draw weights that give the unexplained windows ``focus_fraction`` of draws."""
        if self.latents is None:
            return None
        return focus_weights(self.unexplained, focus_fraction)


@dataclass
class TrainedPolicy:
    """What the training stage hands to the gates."""

    policy: PolicyNet  # the candidate policy
    bound: torch.Tensor  # (12,) residual clip: largest prior error per component in the data
    region: TrustRegion  # where the data's dynamics inputs lie
    summary: dict  # the trainer's JSON-able summary


def check_latent_sizes(active: Bundle, config: LearnerConfig) -> None:
    """Raise ValueError when the active policy reads another latent size than the model the
    updates fit (the active model's, or the configured one)."""
    latent_dim = active.model.latent_dim if active.model is not None else config.model.latent_dim
    if active.policy.latent_dim != latent_dim:
        raise ValueError(
            f"bundle v{active.version}: policy latent size {active.policy.latent_dim} "
            f"differs from the model latent size {latent_dim}"
        )


def start_model(
    carried: tuple[int, VNDModel] | None,
    active: Bundle,
    vehicle: VehicleParams,
    config: LearnerConfig,
) -> VNDModel:
    """The model ``carried`` from a preempted update of the same active version, else a copy of
    the active model (warm start), else a fresh one of ``config.model``, seeded. An active
    model built without the rate-offset head the config asks for (a bundle from before the
    head existed) is not warm-started: its state-dependent rate residual never passes the
    rotation gate."""
    if carried is not None and carried[0] == active.version:
        return carried[1]
    if (
        active.model is not None
        and active.model.config.rate_offset_head == config.model.rate_offset_head
    ):
        return copy.deepcopy(active.model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return VNDModel(vehicle, config.model)


def fit_focus(
    dataset: TransitionDataset, unexplained: torch.Tensor, context_len: int, horizon: int
) -> torch.Tensor:
    """Flag (F,) per fit window (``context_len`` transitions, ``horizon`` targets): its context
    window is flagged in ``unexplained`` (the fit's windows are a subset of those)."""
    context_starts = dataset.window_starts(context_len, 0)
    fit_starts = dataset.window_starts(context_len, horizon)
    return unexplained[torch.searchsorted(context_starts, fit_starts)]


def fit_model(
    model: VNDModel,
    dataset: TransitionDataset,
    focus: torch.Tensor,
    config: LearnerConfig,
    *,
    version: int,
    refine: bool,
    warm_start: bool,
    report: Progress,
) -> FitReport:
    """Fit ``model`` in place for bundle ``version``; a ``refine`` (nothing new to the active
    model in the data) runs ``refine_fit_steps`` when set."""
    steps = config.fit.steps
    if refine and config.refine_fit_steps is not None:
        steps = config.refine_fit_steps
    fit_config = dataclasses.replace(
        config.fit, steps=steps, seed=config.fit.seed + config.seed + version
    )
    return fit_vnd(
        model,
        dataset,
        fit_config,
        warm_start=warm_start,
        progress=lambda i, n, _: report("fit", i / n),
        focus=focus,
        focus_fraction=config.focus_fraction,
    )


def train_candidate(
    active: Bundle,
    fitted: FittedModel,
    vehicle: VehicleParams,
    config: LearnerConfig,
    report: Progress,
) -> TrainedPolicy:
    """Train a copy of the active policy on prior ⊕ the fitted model's residual."""
    policy = copy.deepcopy(active.policy)
    if active.model is None:
        # No encoder yet: the active policy never read a latent (z = 0 throughout its
        # training), so its z weights are untrained; start them at zero (PolicyNet docs).
        policy.silence_latent()
    bound = residual_bound(fitted.dataset)
    region = TrustRegion.of_dataset(fitted.dataset)
    version = active.version + 1
    trainer_config = dataclasses.replace(
        config.trainer, seed=config.trainer.seed + config.seed + version
    )
    summary = train_policy_on_model(
        policy,
        fitted.model,
        vehicle,
        trainer_config,
        progress=lambda i, n, _: report("train", i / n),
        anchor_fraction=config.anchor_fraction,
        residual_bound=bound,
        latent_pool=fitted.latent_pool(),
        pool_fraction=config.pool_fraction,
        pool_weights=fitted.pool_weights(config.focus_fraction),
        trust_region=region,
        components=config.residual_components,
    )
    return TrainedPolicy(policy=policy, bound=bound, region=region, summary=summary)


def gate_dynamics(fitted: FittedModel, trained: TrainedPolicy, components: str) -> Dynamics:
    """The dynamics the gates roll the candidate out on: the policy's training dynamics (the
    external forces of a force-input policy's training aside)."""
    return anchored_dynamics(
        fitted.model,
        trained.bound,
        components,
        trust_region=trained.region,
        vertical_fed_forward=bool(trained.policy.force_dim),
    )


def improvement_basis(
    fitted: FittedModel, trained: TrainedPolicy, focus_fraction: float, stored_total: int
) -> ImprovementBasis:
    """The basis improvement rounds train against once this update's bundle is active."""
    return ImprovementBasis(
        model=fitted.model,
        dataset=fitted.dataset,
        bound=trained.bound,
        region=trained.region,
        latent_pool=fitted.latent_pool(),
        pool_weights=fitted.pool_weights(focus_fraction),
        stored_total=stored_total,
    )
