"""Policy training on the learned model (issue 5 item 5).

The trainer of the simulation core runs unchanged; only its dynamics and its latent change:
``dynamics = prior ⊕ D(., ., z)`` of the freshly fitted VND model (weights frozen, gradients
flow through it into the actions), and ``z ~ N(0, I)`` drawn once per training episode. The MMD
term pulls the encoded latents of real flights towards N(0, I), so these draws cover the
conditions met so far and plausible ones between them: a data-driven domain randomisation. The
policy reads z in its observation and starts from the active policy's weights.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from vnd_core.policy import PolicyNet
from vnd_core.trainer import Dynamics, PolicyTrainer, TrainerConfig, ZSampler
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.features import apply_residual, dynamics_input
from vnd_core.vnd.model import VNDModel

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
) -> dict:
    """Train ``policy`` in place on ``model``'s dynamics with z ~ N(0, I) per rollout
    (a fraction ``anchor_fraction`` of the rollouts: z = 0 on the prior; residual clipped to
    ``residual_bound`` (12,) when given; see the module docstring).

    ``policy`` is the warm start (pass a copy of the active policy); its latent size must equal
    the model's. The model is frozen (``frozen_dynamics``). Returns the trainer's JSON-able
    summary (iterations, wall time, first and final loss, final position error).
    """
    if policy.latent_dim != model.latent_dim:
        raise ValueError(
            f"policy latent size {policy.latent_dim} differs from the model's {model.latent_dim}"
        )
    if not 0.0 <= anchor_fraction < 1.0:
        raise ValueError(f"anchor_fraction must be within [0, 1), got {anchor_fraction}")
    policy.train()
    dynamics = anchored_dynamics(model, residual_bound)
    sampler = anchored_latent(model.latent_dim, anchor_fraction)
    trainer = PolicyTrainer(policy, dynamics, vehicle, config, sampler)
    summary = trainer.train(progress=progress)
    policy.eval()
    return summary


def anchored_latent(latent_dim: int, anchor_fraction: float) -> ZSampler:
    """z ~ N(0, I) per episode, except z = 0 for each episode with probability
    ``anchor_fraction``."""

    def sample(batch: int, generator: torch.Generator) -> torch.Tensor:
        z = torch.randn(batch, latent_dim, generator=generator)
        anchored = torch.rand(batch, generator=generator) < anchor_fraction
        return torch.where(anchored[:, None], torch.zeros_like(z), z)

    return sample


TRUST_FULL_STD = 3.0  # the residual acts fully within this many data std of every input
TRUST_ZERO_STD = 6.0  # and not at all beyond this many


def data_trust(model: VNDModel, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Weight (B, 1) in [0, 1] of the residual at ``state`` (B, 13), ``action`` (B, 4): 1 near
    the data, 0 far outside it (see the module docstring); no gradient."""
    with torch.no_grad():
        x = model.residual.input_normalizer(dynamics_input(state, action))
        distance = x.abs().amax(dim=-1, keepdim=True)
        return ((TRUST_ZERO_STD - distance) / (TRUST_ZERO_STD - TRUST_FULL_STD)).clamp(0.0, 1.0)


def anchored_dynamics(model: VNDModel, residual_bound: torch.Tensor | None = None) -> Dynamics:
    """``prior ⊕ trust · clip(D(s, a, z), ±residual_bound)`` of the frozen ``model``; the bare
    prior for rows whose z is exactly 0. Shapes: state (B, 13), action (B, 4), z (B, nz)."""
    model.frozen_dynamics()  # freezes the weights; gradients still flow into state and action

    def dynamics(state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        prior_next = model.prior(state, action)
        residual = model.residual_correction(state, action, z)
        if residual_bound is not None:
            residual = torch.maximum(torch.minimum(residual, residual_bound), -residual_bound)
        residual = residual * data_trust(model, state, action)
        anchored = (z == 0).all(dim=-1, keepdim=True)  # (B, 1)
        return torch.where(anchored, prior_next, apply_residual(prior_next, residual))

    return dynamics
