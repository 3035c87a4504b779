"""Context decoder: reconstructs the normalised context window from its latent."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vnd_core.nn import mlp


class ContextDecoder(nn.Module):
    """MLP z (B, nz) -> normalised context features (B, C, F).

    It exists only to shape the latent space during fitting (the L2 reconstruction term keeps z
    informative about the whole window, not only about what the residual happens to need).
    """

    def __init__(
        self, latent_dim: int, context_len: int, feature_dim: int, hidden: Sequence[int]
    ) -> None:
        super().__init__()
        self.context_len = context_len
        self.feature_dim = feature_dim
        self.net = mlp(latent_dim, list(hidden), context_len * feature_dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Reconstruction (B, C, F) of the normalised context of latents z (B, nz)."""
        return self.net(z).view(*z.shape[:-1], self.context_len, self.feature_dim)
