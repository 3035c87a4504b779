"""The one MLP builder of the project, plus input normalisation stored with the weights."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: type[nn.Module] = nn.ELU,
    out_gain: float = 1.0,
) -> nn.Sequential:
    """Fully connected network in_dim -> hidden... -> out_dim with ``activation`` between.

    ``out_gain`` scales the initial weights of the last layer (small values start a policy or a
    residual near zero output).
    """
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for a, b in itertools.pairwise(dims):
        layers += [nn.Linear(a, b), activation()]
    last = nn.Linear(dims[-1], out_dim)
    with torch.no_grad():
        last.weight.mul_(out_gain)
        last.bias.zero_()
    layers.append(last)
    return nn.Sequential(*layers)


class Normalizer(nn.Module):
    """Fixed affine input normalisation ``(x - mean) / std`` stored as buffers (saved in bundles).

    Shapes: ``mean`` and ``std`` (dim,); inputs (..., dim).
    """

    mean: torch.Tensor  # (dim,) buffer
    std: torch.Tensor  # (dim,) buffer

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def set_stats(self, mean: torch.Tensor, std: torch.Tensor, min_std: float = 1e-3) -> None:
        """Set statistics; ``std`` is floored at ``min_std`` so constant inputs stay finite."""
        self.mean.copy_(mean)
        self.std.copy_(std.clamp_min(min_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise x (..., dim)."""
        return (x - self.mean) / self.std
