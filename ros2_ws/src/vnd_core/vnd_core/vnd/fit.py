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
    # Onset windows: a share of each batch gets the older part of its context replaced by
    # another window's, keeping only its newest splice_min..max_recent transitions, so the
    # latent must follow the newest transitions when a condition has just changed. Off in the
    # presets: it makes the latent reach a returning wind in 0.1-0.2 s instead of 0.3-0.75 s,
    # and the onset's error peak fell from 0.11-0.12 m to 0.07-0.08 m in simulated-time
    # replays, but the latent jitters more within a condition (keeping 1-10 transitions:
    # steady error under wind doubled; keeping 3-10 or 5-10: up 25-50 %, with later excursions
    # that made one replay in three recover later, not sooner).
    splice_fraction: float = 0.0  # share of each batch with a spliced context
    splice_min_recent: int = 1  # fewest own (newest) transitions a spliced context keeps
    splice_max_recent: int = 10  # most own (newest) transitions a spliced context keeps
    # models with a short context (VNDModelConfig.short_context_len) only:
    short_fraction: float = 0.25  # share of each batch encoded from its newest transitions only
    short_switch_quantile: float = 0.99  # of |z_short - z| over the data: the switch distance
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
        if not 0.0 <= self.splice_fraction < 1.0:
            raise ValueError(f"splice_fraction must be within [0, 1), got {self.splice_fraction}")
        if not 0.0 <= self.short_fraction < 1.0 or not 0.0 < self.short_switch_quantile <= 1.0:
            raise ValueError(
                "short_fraction must be within [0, 1) and short_switch_quantile within (0, 1], "
                f"got {self.short_fraction} and {self.short_switch_quantile}"
            )
        if not 1 <= self.splice_min_recent <= self.splice_max_recent:
            raise ValueError(
                "splice_min_recent and splice_max_recent must satisfy 1 <= min <= max, got "
                f"{self.splice_min_recent} and {self.splice_max_recent}"
            )

    @classmethod
    def quick(cls, **overrides) -> FitConfig:
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
    short_switch_distance: float | None = None  # fitted switch distance (short-context models)


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
    # windows per batch with a spliced context (at least one keeps its own, for the rec term)
    num_spliced = num_short = 0
    if config.use_latent:
        num_spliced = min(round(config.splice_fraction * config.batch_size), config.batch_size - 1)
        if model.config.short_context_len:  # the rows before the spliced ones
            free = config.batch_size - 1 - num_spliced
            num_short = min(round(config.short_fraction * config.batch_size), free)
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
        if num_spliced:
            batch.context = splice_contexts(
                dataset,
                starts,
                batch.context,
                num_spliced,
                (config.splice_min_recent, config.splice_max_recent),
                generator,
            )
        partner = None
        if config.use_latent and config.lambda_slow > 0:
            later = dataset.partner_starts(
                pick, model.context_len, config.horizon, config.slow_offset, generator
            )
            partner = dataset.context(later, model.context_len)
        mmd_weight = schedule.weight(step, config.steps)
        losses = vnd_losses(
            model, batch, config, mmd_weight, generator, partner, num_spliced, num_short
        )
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
    switch = None
    if config.use_latent and model.config.short_context_len:
        switch = model.fit_short_switch(dataset, config.short_switch_quantile)
    latents = model.encode_all(dataset) if config.encode_after and config.use_latent else None
    return FitReport(
        short_switch_distance=switch,
        steps=step,
        wall_s=time.perf_counter() - start_time,
        stopped_early=stopped_early,
        final=history[-1] if history else {},
        history=history,
        num_windows=len(starts),
        latents=latents,
    )


def splice_contexts(
    dataset: TransitionDataset,
    starts: torch.Tensor,
    context: torch.Tensor,
    count: int,
    recent: tuple[int, int],
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``context`` (B, C, 28) with its last ``count`` rows spliced: each keeps its newest
    r ~ U{lo..hi} transitions (``recent`` = (lo, hi), both capped at C - 1) and takes the
    older C - r from a random window of ``starts`` (M,). The targets stay the row's own, so
    the latent has to follow the newest transitions, as at the onset of a new condition (the
    donor is usually another part of the flight, so often another condition)."""
    batch, context_len = context.shape[0], context.shape[1]
    count = min(count, batch)
    if count == 0 or context_len < 2:
        return context
    donors = starts[torch.randint(len(starts), (count,), generator=generator)]
    donor = dataset.context(donors, context_len)  # (count, C, 28)
    low, high = (min(r, context_len - 1) for r in recent)
    kept = torch.randint(low, high + 1, (count, 1), generator=generator)
    older = torch.arange(context_len)[None, :] < (context_len - kept)  # (count, C)
    spliced = context.clone()
    spliced[batch - count :] = torch.where(older[..., None], donor, context[batch - count :])
    return spliced


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
    num_spliced: int = 0,
    num_short: int = 0,
) -> dict[str, torch.Tensor]:
    """Loss terms (scalars) of one batch: residual (Huber), rec (L2), mmd, slow, sens (the
    residual's input-sensitivity penalty), total (weighted sum).

    One latent per window explains all K target transitions of that window. ``config``
    supplies the Huber delta and the term weights; ``mmd_weight`` is the annealed MMD weight of
    this step. ``partner_context`` (B, C, 28), when given, holds a later window of the same
    segment for each window: conditions persist for seconds, so the two latents should agree
    (squared distance, the "slow" term). Without it the encoder is free to spend the spread
    the MMD asks for on measurement noise, and the deployed z jitters within one condition.
    The last ``num_spliced`` windows have spliced contexts (:func:`splice_contexts`): they take
    part in every term but the reconstruction, whose target (a mixed context) means nothing.
    The ``num_short`` windows before those are encoded from their newest
    ``short_context_len`` transitions only (the fast latent of
    :meth:`~vnd_core.vnd.model.VNDModel.deployed_latent`); no reconstruction either.
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
        if num_short:
            high = len(z) - num_spliced
            low = high - num_short
            short = model.config.short_context_len
            z_short = model.encoder(batch.context[low:high, -short:])
            z = torch.cat([z[:low], z_short, z[high:]])
    predicted = model.residual.normalized(batch.inputs, z[:, None, :])  # (B, K, 12)
    target = batch.targets / model.residual.target_std
    residual = residual_huber(predicted, target, config.huber_delta)
    sens = _sensitivity(model, batch, z.detach(), config)
    rec = mmd = slow = residual.new_zeros(())
    if config.use_latent:
        whole = len(z) - num_spliced - num_short
        rec = reconstruction_l2(  # of what the encoder reads
            model.decoder(z[:whole]), model.encoder.normalized(batch.context[:whole])
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
