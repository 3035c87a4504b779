"""Fitting a VND model: encoder + FiLM residual + decoder on all transitions, one loss.

Per step: draw B windows; encode each context into one z; predict the prior errors of the K
transitions that follow with D(., ., z) (Huber, normalised units); reconstruct the normalised
context from z (L2); pull the batch of latents towards N(0, I) (MMD, annealed weight); keep
the residual's velocity correction from learning the closed-loop data's confounded slopes
(input-sensitivity penalty, see :func:`~vnd_core.vnd.losses.velocity_sensitivity_penalty`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from vnd_core.vnd.data import TransitionDataset, WindowBatch
from vnd_core.vnd.losses import (
    MMDSchedule,
    mmd_imq,
    reconstruction_l2,
    residual_huber,
    velocity_sensitivity_penalty,
)
from vnd_core.vnd.model import EncodedLatents, VNDModel

ProgressFn = Callable[[int, int, dict[str, float]], None]


@dataclass(frozen=True)
class FitConfig:
    """Settings of one model update."""

    steps: int = 300  # optimiser steps
    batch_size: int = 128  # windows per step
    horizon: int = 10  # K: transitions explained by each window's latent
    lr: float = 3e-3  # Adam learning rate
    weight_decay: float = 0.0  # Adam L2 weight decay
    grad_clip: float = 1.0  # max global gradient norm
    huber_delta: float = 1.0  # Huber transition point, in normalised residual units
    lambda_rec: float = 0.1  # weight of the context reconstruction term
    lambda_mmd: float = 1.0  # final weight of the MMD term
    lambda_slow: float = 3.0  # weight of the latent consistency term (see vnd_losses)
    lambda_sens: float = 10.0  # weight of the residual's input-sensitivity penalty (losses.py)
    slow_offset: int = 25  # partner windows start up to this many transitions later
    mmd_warmup_frac: float = 0.1  # fraction of steps with MMD weight 0
    mmd_ramp_frac: float = 0.4  # fraction of steps over which the MMD weight ramps up
    seed: int = 0  # seeds batch sampling, the prior samples and (cold start) the weights
    max_time_s: float | None = None  # stop early after this much wall time (None: no limit)
    log_every: int = 50  # steps between progress reports
    encode_after: bool = True  # re-encode the whole dataset after fitting (report.latents)
    use_latent: bool = True  # False: z = 0 always, no rec/MMD (a residual without latent)

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        for name in ("steps", "batch_size", "horizon", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be >= 2 (the MMD needs pairs)")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")

    @classmethod
    def quick(cls, **overrides: Any) -> FitConfig:
        """A configuration that fits a few thousand ticks in about a second of one CPU core."""
        return cls(**{"steps": 60, "batch_size": 64, **overrides})


@dataclass
class FitReport:
    """What a fit did."""

    steps: int  # optimiser steps actually taken
    wall_s: float  # wall time of the optimisation (and of the final re-encoding)
    stopped_early: bool  # True if max_time_s cut the fit short
    final: dict[str, float]  # mean losses over the last log interval
    history: list[dict[str, float]] = field(default_factory=list)  # per log interval
    num_windows: int = 0  # windows available for training
    latents: EncodedLatents | None = None  # re-encoded dataset (if config.encode_after)


def fit_vnd(
    model: VNDModel,
    dataset: TransitionDataset,
    config: FitConfig | None = None,
    progress: ProgressFn | None = None,
    warm_start: bool = True,
    focus: torch.Tensor | None = None,
    focus_fraction: float = 0.5,
) -> FitReport:
    """Fit ``model`` in place on every window of ``dataset``; deterministic for a given seed
    and starting weights (with ``warm_start=False`` the seed alone fixes the result).

    ``warm_start`` continues from the current weights (normalisation statistics are fitted only
    if they never were, so earlier training keeps its meaning); ``warm_start=False``
    re-initialises every weight from ``config.seed`` and refits the statistics. ``progress``
    is called as ``progress(step, total_steps, mean_losses)`` every ``log_every`` steps.

    ``focus`` (M,) bool, one per window of ``dataset.window_starts(C, K)``: a share
    ``focus_fraction`` of every batch is drawn from the windows marked True (when any are),
    the rest from all windows. A continual update marks what the active model does not explain
    yet: a new condition that is a small part of the replay then gets a fair share of a short
    fit (measured: with 200 uniform steps a second wind direction stayed merged with calm
    flight in the latent; it separated after about 1000).
    """
    config = config or FitConfig()
    config.validate()
    model.check_dataset(dataset)
    start_time = time.perf_counter()
    starts = dataset.window_starts(model.context_len, config.horizon)
    if len(starts) == 0:
        raise ValueError(
            f"no window of {model.context_len} + {config.horizon} transitions in the dataset "
            f"({dataset.num_transitions} transitions in {dataset.num_segments} segments)"
        )
    focused = _focus_starts(starts, focus)
    if not 0.0 <= focus_fraction <= 1.0:
        raise ValueError(f"focus_fraction must be within [0, 1], got {focus_fraction}")
    num_focused = round(focus_fraction * config.batch_size) if len(focused) else 0
    if not warm_start:
        _reinitialise(model, config.seed)
    if not warm_start or not bool(model.normalizers_fitted):
        model.fit_normalizers(dataset)

    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay, fused=True
    )  # one kernel for all tensors: 0.3 ms a step against 1.7 ms (per-op overhead)
    schedule = MMDSchedule(config.lambda_mmd, config.mmd_warmup_frac, config.mmd_ramp_frac)
    model.requires_grad_(True)  # undo frozen_dynamics() of a previous policy training
    model.train()
    history: list[dict[str, float]] = []
    window: list[dict[str, float]] = []
    step, stopped_early = 0, False
    while step < config.steps:
        if config.max_time_s is not None and time.perf_counter() - start_time > config.max_time_s:
            stopped_early = True
            break
        pick = starts[torch.randint(len(starts), (config.batch_size,), generator=generator)]
        if num_focused:
            pick[:num_focused] = focused[
                torch.randint(len(focused), (num_focused,), generator=generator)
            ]
        batch = dataset.gather(pick, model.context_len, config.horizon)
        partner = None
        if config.use_latent and config.lambda_slow > 0:
            later = dataset.partner_starts(
                pick, model.context_len, config.horizon, config.slow_offset, generator
            )
            partner = dataset.context(later, model.context_len)
        mmd_weight = schedule.weight(step, config.steps)
        losses = vnd_losses(model, batch, config, mmd_weight, generator, partner)
        optimizer.zero_grad(set_to_none=True)
        losses["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        window.append({k: float(v.detach()) for k, v in losses.items()})
        if step % config.log_every == 0 or step == config.steps:
            history.append(_mean_losses(window, step))
            window = []
            if progress is not None:
                progress(step, config.steps, history[-1])
    if window:
        history.append(_mean_losses(window, step))
    model.eval()
    _solve_latent_head(model, dataset, starts, config)
    latents = model.encode_all(dataset) if config.encode_after and config.use_latent else None
    return FitReport(
        steps=step,
        wall_s=time.perf_counter() - start_time,
        stopped_early=stopped_early,
        final=history[-1] if history else {},
        history=history,
        num_windows=len(starts),
        latents=latents,
    )


@torch.no_grad()
def _solve_latent_head(
    model: VNDModel, dataset: TransitionDataset, starts: torch.Tensor, config: FitConfig
) -> None:
    """Refit the last layer of the residual's latent-only head by least squares on every
    window: its outputs become the conditional mean of their targets given the latent's
    features, free of the batch-to-batch noise a stochastic optimiser leaves."""
    residual = model.residual
    head = residual.latent_head
    if head is None:
        return
    k = residual.latent_only_dims
    hidden, last = head[:-1], head[-1]
    if not isinstance(last, torch.nn.Linear):
        raise TypeError(f"the latent-only head must end in a linear layer, not {last!r}")
    features, means = [], []
    for part in starts.split(4096):
        batch = dataset.gather(part, model.context_len, config.horizon)
        z = (
            model.encoder(batch.context)
            if config.use_latent
            else batch.context.new_zeros(len(part), model.latent_dim)
        )
        features.append(hidden(z))
        means.append((batch.targets[..., -k:] / residual.target_std[-k:]).mean(dim=1))
    x = torch.cat(features)
    x = torch.cat([x, torch.ones(len(x), 1)], dim=1).double()
    y = torch.cat(means).double()
    penalty = torch.eye(x.shape[1], dtype=x.dtype)
    penalty[-1, -1] = 0.0  # the intercept is not shrunk: the mean offset stays unbiased
    gram = x.T @ x + LATENT_HEAD_RIDGE * len(x) * penalty
    solution = torch.linalg.solve(gram, x.T @ y)  # (F + 1, k)
    last.weight.copy_(solution[:-1].T.float())
    last.bias.copy_(solution[-1].float())


def _focus_starts(starts: torch.Tensor, focus: torch.Tensor | None) -> torch.Tensor:
    """The window starts (F,) marked by ``focus`` (M,) bool; empty without a focus."""
    if focus is None:
        return starts[:0]
    if focus.shape != starts.shape:
        raise ValueError(
            f"focus must mark each of the {len(starts)} windows, got shape {tuple(focus.shape)}"
        )
    return starts[focus.bool()]


def vnd_losses(
    model: VNDModel,
    batch: WindowBatch,
    config: FitConfig,
    mmd_weight: float,
    generator: torch.Generator | None = None,
    partner_context: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Loss terms (scalars) of one batch: residual (Huber), rec (L2), mmd, slow, sens (the
    residual's input-sensitivity penalty), total (weighted sum).

    One latent per window explains all K target transitions of that window. ``config``
    supplies the Huber delta and the term weights; ``mmd_weight`` is the annealed MMD weight of
    this step. ``partner_context`` (B, C, 28), when given, holds a later window of the same
    segment for each window: conditions persist for seconds, so the two latents should agree
    (squared distance, the "slow" term). Without it the encoder is free to spend the spread
    the MMD asks for on measurement noise, and the deployed z jitters within one condition.
    """
    if not config.use_latent:
        # The same residual network and loss with the latent pinned at the prior mean: the
        # "residual without latent" of the re-fitting baseline, trained exactly like ours.
        z = batch.context.new_zeros(batch.context.shape[0], model.latent_dim)
    else:
        contexts = batch.context
        if partner_context is not None:  # one encoder pass for both (per-op overhead)
            contexts = torch.cat([contexts, partner_context])
        latents = model.encoder(contexts)  # (B or 2B, nz)
        z = latents[: len(batch.context)]  # (B, nz)
    predicted = model.residual.normalized(batch.inputs, z[:, None, :])  # (B, K, 12)
    target = batch.targets / model.residual.target_std
    residual = residual_huber(predicted, target, config.huber_delta)
    sens = _sensitivity(model, batch, z.detach(), config)
    rec = mmd = slow = residual.new_zeros(())
    if config.use_latent:
        rec = reconstruction_l2(  # of what the encoder reads
            model.decoder(z), model.encoder.normalized(batch.context)
        )
        mmd = mmd_imq(z, torch.randn(z.shape, generator=generator))
        if partner_context is not None:
            slow = (latents[len(z) :] - z).square().sum(-1).mean()
    total = (
        residual
        + config.lambda_rec * rec
        + mmd_weight * mmd
        + config.lambda_slow * slow
        + config.lambda_sens * sens
    )
    return {
        "total": total, "residual": residual, "rec": rec, "mmd": mmd, "slow": slow,
        "sens": sens.detach(),
    }  # fmt: skip


def _sensitivity(
    model: VNDModel, batch: WindowBatch, z: torch.Tensor, config: FitConfig
) -> torch.Tensor:
    """The residual's input-sensitivity penalty on the first transition of every window of
    this batch (0 when switched off): the same expectation as over all K, at a K-th of the
    double-backward cost. The latent is held fixed: the penalty shapes the residual's
    dependence on the state, not the encoder."""
    if config.lambda_sens <= 0:
        return batch.inputs.new_zeros(())
    return velocity_sensitivity_penalty(
        lambda x: model.residual(x, z[:, None, :]),
        batch.inputs[:, :1],
        model.vehicle.mass_kg,
        model.prior.config.dt_s,
    )


LATENT_HEAD_RIDGE = 1e-2  # ridge weight per window of the latent-only head's least squares


def _reinitialise(model: VNDModel, seed: int) -> None:
    """Fresh weights for every learned module, reproducibly from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = VNDModel(model.vehicle, model.config)
    model.load_state_dict(fresh.state_dict())


def _mean_losses(window: list[dict[str, float]], step: int) -> dict[str, float]:
    """Mean of each loss over ``window``, tagged with the step it ends at."""
    means = {k: sum(row[k] for row in window) / len(window) for k in window[0]}
    return {"step": float(step), **means}
