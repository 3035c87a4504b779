"""Compile the learner's policy training before the first update needs it.

With ``TrainerConfig.compile`` on, the first training iteration of a process builds the
compiled tick (:func:`vnd_core.compiled_rollout.compiled_tick`): tens of seconds cold, a few
from inductor's on-disk cache. Paid inside the first update, that lands on the update that
learns the first new condition, and beside the flight stack an update must land within 45 s
of its decision. :func:`compile_policy_training` pays it up front instead: one iteration of
the exact training path the updates and improvement rounds run (the prior plus a FiLM residual
of the learner's model architecture, residual clip, trust region, anchored latents, the
learner's environment count and window), on a scratch model and a copy of the policy, so the
graph dynamo builds is the one every later trainer of the process reuses (dynamo keys its
graphs by shapes and structure, not by weights).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import torch

from vnd_core.bundle import Bundle
from vnd_core.compiled_rollout import compiled_graphs
from vnd_core.learner.config import LearnerConfig
from vnd_core.learner.policy_update import TrustRegion, on_model_trainer
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.features import INPUT_DIM, RESIDUAL_DIM
from vnd_core.vnd.model import VNDModel

WARMUP_POOL_ROWS = 8  # latents in the scratch pool (any count builds the same graph)


@dataclass(frozen=True)
class WarmUpReport:
    """What :func:`compile_policy_training` did."""

    compiled: bool  # False: compile is off in the learner's trainer config, nothing ran
    wall_s: float  # wall time of the warm-up iteration [s]
    graphs_built: int  # graphs compiled by it (0: the process had them already)


def compile_policy_training(
    active: Bundle, vehicle: VehicleParams, config: LearnerConfig
) -> WarmUpReport:
    """Run one training iteration of the learner's policy-update path when ``config.trainer``
    compiles, so the first update finds the compiled graph built; the active bundle is not
    touched (a copy of its policy trains on a scratch model of its model's architecture)."""
    if not config.trainer.compile:
        return WarmUpReport(compiled=False, wall_s=0.0, graphs_built=0)
    start_s = time.perf_counter()
    graphs_before = compiled_graphs()
    with torch.random.fork_rng(devices=[]):  # the learner's seeded draws stay as they were
        torch.manual_seed(config.seed)
        model_config = active.model.config if active.model is not None else config.model
        model = VNDModel(vehicle, model_config)
        policy = copy.deepcopy(active.policy)
        policy.train()  # as the updates train it: dynamo keys its graph by the mode too
        trainer = on_model_trainer(
            policy,
            model,
            vehicle,
            dataclasses.replace(config.trainer, iterations=1),
            anchor_fraction=config.anchor_fraction,
            residual_bound=torch.ones(RESIDUAL_DIM),
            latent_pool=torch.randn(WARMUP_POOL_ROWS, model.latent_dim),
            pool_fraction=config.pool_fraction,
            pool_weights=None,
            components=config.residual_components,
            trust_region=TrustRegion(mean=torch.zeros(INPUT_DIM), std=torch.ones(INPUT_DIM)),
        )
        trainer.train_iteration()
    return WarmUpReport(
        compiled=True,
        wall_s=time.perf_counter() - start_s,
        graphs_built=compiled_graphs() - graphs_before,
    )
