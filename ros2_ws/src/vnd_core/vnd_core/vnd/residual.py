"""Residual dynamics D(s, a, z): an MLP whose hidden layers are modulated by z through FiLM."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from vnd_core.nn import Normalizer, mlp


class FiLMResidual(nn.Module):
    """Correction of the prior's next state, conditioned on the latent through FiLM.

    Every hidden layer computes ``h = act((1 + gamma(z)) * (W h_prev + b) + beta(z))``; a small
    generator MLP maps z to all (gamma, beta) at once. Inputs are normalised by stored
    statistics; outputs are in units of the stored per-component ``target_std``, so the network
    works on unit-scale numbers while :meth:`forward` returns physical units. The output layer
    starts with tiny weights: an untrained residual is ~0 and the model starts as the prior.

    Shapes: inputs (..., in_dim), z (..., nz) broadcastable to the same leading dims,
    output (..., out_dim).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        latent_dim: int,
        hidden: Sequence[int],
        film_hidden: int,
        out_gain: float,
    ):
        super().__init__()
        if not hidden:
            raise ValueError("the residual needs at least one hidden layer to modulate")
        self.input_normalizer = Normalizer(in_dim)
        self.register_buffer("target_std", torch.ones(out_dim))
        dims = [in_dim, *hidden]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.hidden_sizes = list(hidden)
        # Small initial FiLM output: modulation starts near identity but z still gets gradient.
        self.film = mlp(latent_dim, [film_hidden], 2 * sum(hidden), out_gain=0.1)
        self.head = mlp(hidden[-1], [], out_dim, out_gain=out_gain)
        self.activation = nn.ELU()

    def normalized(self, inputs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Correction in units of ``target_std`` (..., out_dim) of raw inputs and latents."""
        h = self.input_normalizer(inputs)
        # Sliced before broadcasting: the (gamma, beta) of one latent serve all its K inputs,
        # and the backward pass stays at the size of z instead of the size of the inputs.
        film = self.film(z)
        offset = 0
        for layer, size in zip(self.layers, self.hidden_sizes, strict=True):
            gamma = film[..., offset : offset + size]
            beta = film[..., offset + size : offset + 2 * size]
            offset += 2 * size
            h = self.activation((1.0 + gamma) * layer(h) + beta)
        return self.head(h)

    def forward(self, inputs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Correction in physical units (..., out_dim)."""
        return self.normalized(inputs, z) * self.target_std
