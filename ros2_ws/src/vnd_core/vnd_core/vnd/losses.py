"""Loss terms of the VND fit: residual Huber, context reconstruction, MMD to N(0, I), and the
input-sensitivity penalty of the residual's velocity correction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from vnd_core.state import GRAVITY_MPS2

# Scales of the inverse multiquadric kernel, relative to 2 * nz (the expected squared distance
# of two N(0, I) samples). Several scales keep the MMD sensitive both to a shifted mean and to
# a collapsed or over-dispersed aggregate.
IMQ_SCALES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


def _imq_kernel(sq_dist: torch.Tensor, latent_dim: int, scales: Sequence[float]) -> torch.Tensor:
    """Sum over scales of C / (C + d^2) with C = 2 nz s; sq_dist (N, M) -> (N, M)."""
    base = 2.0 * latent_dim
    total = torch.zeros_like(sq_dist)
    for s in scales:
        total = total + base * s / (base * s + sq_dist)
    return total


def mmd_imq(x: torch.Tensor, y: torch.Tensor, scales: Sequence[float] = IMQ_SCALES) -> torch.Tensor:
    """Unbiased MMD^2 estimate between samples x (N, d) and y (M, d), N, M >= 2.

    The unbiased estimator drops the kernel diagonal; it is ~0 (and may be slightly negative)
    when x and y come from the same distribution.
    """
    if x.shape[-1] != y.shape[-1] or x.shape[0] < 2 or y.shape[0] < 2:
        raise ValueError(f"mmd needs (N>=2, d) and (M>=2, d) samples, got {x.shape}, {y.shape}")
    n, m, d = x.shape[0], y.shape[0], x.shape[-1]
    k_xx = _imq_kernel(torch.cdist(x, x).square(), d, scales)
    k_yy = _imq_kernel(torch.cdist(y, y).square(), d, scales)
    k_xy = _imq_kernel(torch.cdist(x, y).square(), d, scales)
    off_xx = (k_xx.sum() - k_xx.diagonal().sum()) / (n * (n - 1))
    off_yy = (k_yy.sum() - k_yy.diagonal().sum()) / (m * (m - 1))
    return off_xx + off_yy - 2.0 * k_xy.mean()


def residual_huber(pred: torch.Tensor, target: torch.Tensor, delta: float) -> torch.Tensor:
    """Mean Huber loss of normalised residual predictions vs targets, same shapes."""
    return F.huber_loss(pred, target, delta=delta)


def reconstruction_l2(reconstructed: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the decoded vs the normalised context (B, C, F)."""
    return F.mse_loss(reconstructed, target)


@dataclass(frozen=True)
class MMDSchedule:
    """Weight of the MMD term over a fit: 0 for a warm-up, then a linear ramp to the maximum.

    Starting at zero lets the residual loss organise the latent space first; the MMD then pulls
    the aggregate of latents towards N(0, I) so the policy's z ~ N(0, I) covers what the
    encoder will produce in flight.
    """

    weight_max: float  # final MMD weight
    warmup_frac: float  # fraction of the fit with weight 0
    ramp_frac: float  # fraction of the fit over which the weight rises linearly to the maximum

    def weight(self, step: int, total_steps: int) -> float:
        """MMD weight at ``step`` of ``total_steps``."""
        progress = step / max(total_steps, 1)
        if progress < self.warmup_frac:
            return 0.0
        if self.ramp_frac <= 0:
            return self.weight_max
        return self.weight_max * min(1.0, (progress - self.warmup_frac) / self.ramp_frac)


def velocity_sensitivity_penalty(
    correction: Callable[[torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    mass_kg: float,
    dt_s: float,
) -> torch.Tensor:
    """Mean squared sensitivity of the velocity correction to velocity, attitude and thrust.

    ``correction(inputs)`` (..., 12) is the residual in physical units for dynamics inputs
    ``inputs`` (..., 16) (see :func:`vnd_core.vnd.features.dynamics_input`); it is called once
    on (3, ..., 16), so it must broadcast over a leading dimension. Flight data are
    closed-loop and confounded: in level flight the vertical velocity is only measurement noise,
    and the best fit of such data damps it by most of itself each tick (measured: -0.8 per
    tick), while thrust and tilt move with the state that the policy answers. A model that has
    learnt those correlations predicts the logged flight well and flies a policy badly (the
    base policy lost calm tracking on it, and policies trained on it lost it on the vehicle).
    The penalty keeps what the data cannot tell apart at the prior's physics: each derivative
    is scaled by the prior's own gain (velocity 1 per tick, tilt g dt per rad, thrust dt / m
    per N), so a 10 % change of the prior's thrust effect costs 0.01 and a real drag slope of
    a few 0.01 per tick next to nothing. Body rates and rate commands are left free: the
    residual needs them for the rate loop's lag, which the prior does not have.
    """
    # One backward pass for the three Jacobian rows: copy i of the inputs carries only the
    # gradient of velocity component i (three backward passes cost about three times the
    # per-op overhead that dominates a fit step of this small network).
    x = inputs.detach().expand(3, *inputs.shape).clone().requires_grad_(True)  # (3, ..., 16)
    dv = correction(x)[..., 6:9]  # (3, ..., 3)
    own = dv[0, ..., 0].sum() + dv[1, ..., 1].sum() + dv[2, ..., 2].sum()
    (rows,) = torch.autograd.grad(own, x, create_graph=True)  # row i of every Jacobian
    scale = x.new_zeros(x.shape[-1])
    scale[0:3] = 1.0  # velocity (per tick)
    scale[3:9] = 1.0 / (GRAVITY_MPS2 * dt_s)  # 6-D attitude
    scale[12] = mass_kg / dt_s  # collective thrust
    return (rows * scale).square().sum(dim=(0, -1)).mean()
