"""Residual dynamics D(s, a, z): an MLP whose hidden layers are modulated by z through FiLM."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from vnd_core.nn import Normalizer, mlp


class Modulation(NamedTuple):
    """What a latent contributes to the residual, computed once per latent."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per hidden layer (1 + gamma, beta)
    latent_out: torch.Tensor | None  # (..., latent_only_dims) the outputs of z alone


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
        latent_only_dims: int = 0,
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
        self.latent_only_dims = latent_only_dims
        self.head = mlp(hidden[-1], [], out_dim - latent_only_dims, out_gain=out_gain)
        # The last outputs as a function of z alone: a per-condition offset that no state can
        # move (the body-rate offset a torque disturbance leaves under the rate loop).
        self.latent_head = (
            mlp(latent_dim, [film_hidden], latent_only_dims, out_gain=out_gain)
            if latent_only_dims
            else None
        )
        self.activation = nn.ELU()

    @torch.no_grad()
    def set_constant(self, value: torch.Tensor) -> None:
        """Make the residual output ``value`` (out_dim,), physical units, whatever the inputs
        and z (a known correction, e.g. a condition's mean prior error)."""
        normalized = value / self.target_std
        split = len(normalized) - self.latent_only_dims  # the latent-only head's outputs are last
        outputs: list[tuple[nn.Module, torch.Tensor]] = [(self.head[-1], normalized[:split])]
        if self.latent_head is not None:
            outputs.append((self.latent_head[-1], normalized[split:]))
        for layer, part in outputs:
            if not isinstance(layer, nn.Linear):
                raise TypeError(f"the residual's output layers must be linear, not {layer!r}")
            layer.weight.zero_()
            layer.bias.copy_(part)

    def modulation(self, z: torch.Tensor) -> Modulation:
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
        offset_out = self.latent_head(z) if self.latent_head is not None else None
        return Modulation(layers=tuple(terms), latent_out=offset_out)

    def normalized(
        self,
        inputs: torch.Tensor,
        z: torch.Tensor | None = None,
        *,
        modulation: Modulation | None = None,
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
        for layer, (scale, shift) in zip(self.layers, modulation.layers, strict=True):
            h = self.activation(torch.addcmul(shift, scale, layer(h)))
        out = self.head(h)
        if modulation.latent_out is None:
            return out
        tail = modulation.latent_out.expand(*out.shape[:-1], self.latent_only_dims)
        return torch.cat([out, tail], dim=-1)

    def forward(
        self,
        inputs: torch.Tensor,
        z: torch.Tensor | None = None,
        *,
        modulation: Modulation | None = None,
    ) -> torch.Tensor:
        """Correction in physical units (..., out_dim); ``z`` or its :meth:`modulation`."""
        return self.normalized(inputs, z, modulation=modulation) * self.target_std
