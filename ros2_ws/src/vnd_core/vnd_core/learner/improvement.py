"""Continuous policy improvement: the policy keeps training on the active model between updates.

A model update (fit, train, validate) trains its policy for a fixed number of iterations; the
policy then has more to learn from the same model than one update's budget buys (on one fitted
model of wind A, a tenth of the domain-randomised policy's training left the position error
nearly twice what its whole budget reached). Between model updates the learner therefore keeps
training a candidate copy of the active policy on the active model, in rounds of
``round_iterations``; after each round the candidate faces the update's gates and, when its
cost on learned-model rollouts beats the active policy's by ``min_gain_frac``, becomes a new
bundle version with the same model. So the policy's budget is whatever time the learner has
between model updates, not a per-update constant.

The candidate's optimiser state carries across rounds on one :class:`ImprovementBasis` (the
model, its dataset and what the training derives from it). A new basis is built when the model
changes or the replay has grown by ``min_new_ticks`` since the basis was built (its latent pool
and trust region then hold the newer flight). After ``patience_rounds`` rounds without a new
version the learner stops improving until the basis changes: the policy has converged on this
model, and a round costs CPU time the flight may want.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from vnd_core.learner.policy_update import (
    TrainProgress,
    TrustRegion,
    on_model_trainer,
    residual_bound,
)
from vnd_core.policy import PolicyNet
from vnd_core.trainer import PolicyTrainer, TrainerConfig
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.model import VNDModel


@dataclass(frozen=True)
class ImprovementConfig:
    """Policy training between model updates (:mod:`vnd_core.learner.improvement`)."""

    enabled: bool = False  # keep training the active model's policy between model updates
    round_iterations: int = 30  # training iterations between two validations of the candidate
    # learning rate at the start of each round, decaying over it: on one model fitted to a
    # demo's first 100 s, six rounds at 1e-3 cut the true plant's error by a quarter to two
    # fifths (three new versions); at 3e-4 one round of six beat the active policy by 3 %
    learning_rate: float = 1e-3
    min_gain_frac: float = 0.03  # a new version must cut the model-rollout cost by this share
    patience_rounds: int = 4  # rounds without a new version before pausing until a new basis

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        if self.round_iterations < 1:
            raise ValueError(f"round_iterations must be >= 1, got {self.round_iterations}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0.0 <= self.min_gain_frac < 1.0:
            raise ValueError(f"min_gain_frac must be within [0, 1), got {self.min_gain_frac}")
        if self.patience_rounds < 1:
            raise ValueError(f"patience_rounds must be >= 1, got {self.patience_rounds}")


@dataclass
class ImprovementBasis:
    """What the candidate policy trains against: the active model and the data it was fitted
    on, with the residual bound, trust region and latent pool the training derives from them."""

    model: VNDModel  # the active bundle's model (frozen)
    dataset: TransitionDataset  # transitions of the replay the basis was built from
    bound: torch.Tensor  # (12,) largest prior error per residual component in ``dataset``
    region: TrustRegion  # where ``dataset``'s dynamics inputs lie
    latent_pool: torch.Tensor | None  # (M, nz) re-encoded latents of ``dataset``'s windows
    pool_weights: torch.Tensor | None  # (M,) draw weights of the pool rows (None: uniform)
    stored_total: int  # ticks the learner had stored in all when the basis was built

    @classmethod
    def of_replay(
        cls, model: VNDModel, dataset: TransitionDataset, stored_total: int
    ) -> ImprovementBasis | None:
        """A basis of ``model`` on ``dataset``, re-encoding its windows (None: no window)."""
        if len(dataset.window_starts(model.context_len, 0)) == 0:
            return None
        latents = model.encode_all(dataset)
        return cls(
            model=model,
            dataset=dataset,
            bound=residual_bound(dataset),
            region=TrustRegion.of_dataset(dataset),
            latent_pool=latents.z,
            pool_weights=None,
            stored_total=stored_total,
        )


class PolicyImprover:
    """A candidate copy of a policy and the trainer that keeps training it on one basis."""

    def __init__(
        self,
        policy: PolicyNet,
        basis: ImprovementBasis,
        vehicle: VehicleParams,
        trainer_config: TrainerConfig,
        config: ImprovementConfig,
        *,
        anchor_fraction: float,
        pool_fraction: float,
        components: str,
    ) -> None:
        self.basis = basis
        self.config = config
        self.candidate = copy.deepcopy(policy)
        # Each round restarts the trainer's decaying rate from learning_rate (a warm restart):
        # the candidate the gates judge is one the rate has let settle, not one mid-step.
        round_config = dataclasses.replace(
            trainer_config,
            iterations=config.round_iterations,
            learning_rate=config.learning_rate,
        )
        self.trainer: PolicyTrainer = on_model_trainer(
            self.candidate,
            basis.model,
            vehicle,
            round_config,
            anchor_fraction=anchor_fraction,
            residual_bound=basis.bound,
            latent_pool=basis.latent_pool,
            pool_fraction=pool_fraction,
            pool_weights=basis.pool_weights,
            components=components,
            trust_region=basis.region,
        )
        self.rounds = 0  # rounds trained on this basis

    def train_round(self, progress: TrainProgress | None = None) -> dict:
        """Train the candidate for one round; the trainer's JSON-able summary."""
        self.candidate.train()
        self.trainer.iteration = 0  # the rate schedule restarts; the optimiser state stays
        summary = self.trainer.train(progress=progress)
        self.candidate.eval()
        self.rounds += 1
        return summary

    def snapshot(self) -> PolicyNet:
        """A copy of the candidate as it is now (eval mode), for the gates and a bundle."""
        return copy.deepcopy(self.candidate).eval()
