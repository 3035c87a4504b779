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

    target_std: torch.Tensor  # (out_dim,) buffer: the output unit of each component

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        latent_dim: int,
        hidden: Sequence[int],
        film_hidden: int,
        out_gain: float,
    ) -> None:
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

    def modulation(self, z: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """FiLM terms of latents ``z`` (..., nz): per hidden layer ``(1 + gamma, beta)``, each
        (..., size).

        A caller that evaluates many inputs under one latent (the policy trainer, whose z is
        fixed per episode) computes these once and passes them to :meth:`normalized`.
        """
        film = self.film(z)
        terms = []
        offset = 0
        for size in self.hidden_sizes:
            gamma = film[..., offset : offset + size]
            beta = film[..., offset + size : offset + 2 * size]
            offset += 2 * size
            terms.append((1.0 + gamma, beta))
        return tuple(terms)

    def normalized(
        self,
        inputs: torch.Tensor,
        z: torch.Tensor | None = None,
        *,
        modulation: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None,
    ) -> torch.Tensor:
        """Correction in units of ``target_std`` (..., out_dim) of raw inputs and latents.

        Pass either ``z`` or its precomputed :meth:`modulation`.
        """
        if modulation is None:
            if z is None:
                raise ValueError("the residual needs a latent z or its FiLM modulation")
            # Computed at the size of z, before broadcasting: the (gamma, beta) of one latent
            # serve all its K inputs, and the backward pass stays at the size of z.
            modulation = self.modulation(z)
        h = self.input_normalizer(inputs)
        for layer, (scale, shift) in zip(self.layers, modulation, strict=True):
            h = self.activation(torch.addcmul(shift, scale, layer(h)))
        return self.head(h)

    def forward(
        self,
        inputs: torch.Tensor,
        z: torch.Tensor | None = None,
        *,
        modulation: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None,
    ) -> torch.Tensor:
        """Correction in physical units (..., out_dim); ``z`` or its :meth:`modulation`."""
        return self.normalized(inputs, z, modulation=modulation) * self.target_std
