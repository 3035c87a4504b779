"""Context encoder: a GRU over the last C transitions that infers the latent condition z."""

from __future__ import annotations

import torch
from torch import nn

from vnd_core.nn import Normalizer, mlp


class ContextEncoder(nn.Module):
    """Deterministic map from a window of context features (B, C, F) to a latent z (B, nz).

    The GRU starts from a zero hidden state on every call and reads the whole window, so the
    deployed encoder (full window each tick) computes exactly what training computed: no hidden
    state is carried between ticks, and any tick can be recomputed from the logged window alone.
    """

    def __init__(
        self, feature_dim: int, latent_dim: int, hidden_dim: int, first_column: int = 0
    ) -> None:
        super().__init__()
        self.first_column = first_column  # the encoder reads columns first_column.. of F
        width = feature_dim - first_column
        self.normalizer = Normalizer(width)
        self.gru = nn.GRU(width, hidden_dim, batch_first=True)
        self.head = mlp(hidden_dim, [], latent_dim)

    @property
    def input_dim(self) -> int:
        """Number of context feature columns the encoder reads."""
        return self.gru.input_size

    def normalized(self, features: torch.Tensor) -> torch.Tensor:
        """The columns it reads of raw context features (B, C, F), normalised (B, C, F')."""
        return self.normalizer(features[..., self.first_column :])

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Latent (B, nz) of raw (un-normalised) context features (B, C, F)."""
        _, last_hidden = self.gru(self.normalized(features))
        return self.head(last_hidden[-1])
