"""VNDModel: the physics prior plus a latent-conditioned residual, with encoder and decoder."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vnd_core.config_io import ConfigError, from_mapping
from vnd_core.dynamics import CONTROL_PERIOD_S, NominalModel, NominalModelConfig
from vnd_core.vehicle import VehicleParams
from vnd_core.vnd.data import Segment, TransitionDataset
from vnd_core.vnd.decoder import ContextDecoder
from vnd_core.vnd.encoder import ContextEncoder
from vnd_core.vnd.features import (
    CONTEXT_FEATURE_DIM,
    INPUT_DIM,
    RES_OMEGA,
    RESIDUAL_DIM,
    RESIDUAL_STD_FLOOR,
    apply_residual,
    context_features,
    dynamics_input,
)
from vnd_core.vnd.residual import FiLMResidual

# First context feature column the encoder reads: a feature row is the INPUT_DIM dynamics
# inputs followed by the prior-error components, and the encoder reads the prior error only.
# The dynamics inputs say how the vehicle was flown, which changes when a new policy flies the
# same condition, so an encoder reading them moves a known condition's latent away from where
# the policy learned it.
ENCODER_FIRST_COLUMN = INPUT_DIM
# Architecture fields that earlier versions had and this one does not, each with the one value
# this version computes; a bundle whose model sets another value needs the removed option.
RETIRED_FIELDS = {"short_context_len": 0, "encoder_inputs": "prior_error"}
# what an absent retired field means (bundles written before encoder_inputs existed read all)
_RETIRED_ABSENT = {"encoder_inputs": "all"}
# Fields added after bundles with models were written, with what their absence means: the
# model as it was built before the field existed.
_ADDED_ABSENT = {"rate_offset_head": False}
# the residual's body-rate components, its last ones, come from the latent-only head
RATE_OFFSET_DIMS = RES_OMEGA.stop - RES_OMEGA.start
INPUT_STD_FLOOR = 1e-2  # smallest std a dynamics input is normalised by (m/s, 1, rad/s, N)


@dataclass(frozen=True)
class VNDModelConfig:
    """Architecture of a VND model; every field is JSON-serialisable (bundle metadata)."""

    latent_dim: int = 8  # size of z
    # C: context transitions the encoder reads (0.24 s at 50 Hz). The latent follows a change
    # once about half the window holds the new condition, and each 0.1 s it lags adds 0.1-0.2 s
    # of recovery: the demo recovers a returning wind in about 0.9 s with 12 against about
    # 1.05 s with 20, with the same steady tracking.
    context_len: int = 12
    encoder_hidden: int = 32  # GRU hidden size
    residual_hidden: tuple[int, ...] = (64, 64)  # FiLM-modulated hidden layers of the residual
    film_hidden: int = 32  # hidden size of the z -> (gamma, beta) generator
    decoder_hidden: tuple[int, ...] = (64,)  # hidden layers of the context decoder
    residual_out_gain: float = 0.01  # initial scale of the residual output layer (~0 at start)
    dt_s: float = CONTROL_PERIOD_S  # control period the prior integrates over
    prior_substeps: int = 1  # RK4 sub-steps of the prior per control period
    # transition t is driven by the action logged d ticks earlier: the plant's command latency
    # plus motor and rate-loop lag act like about 2 ticks, and pairing with a_t instead makes
    # the 10-step open-loop error of prior + residual worse than the prior's own on agile flight
    action_delay_ticks: int = 2
    # The body-rate residual as a function of z alone (RATE_OFFSET_DIMS outputs): a torque
    # (an offset centre of mass, a weak rotor) leaves a per-condition rate offset under the
    # rate loop. A state-dependent rate residual drifts to 14-62 deg of tilt error after 50
    # open-loop steps in calm flight (the prior: 5-11 deg); the offset stays within the prior's.
    rate_offset_head: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the first impossible field."""
        for name in ("latent_dim", "context_len", "encoder_hidden", "film_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.residual_hidden or min(self.residual_hidden) < 1:
            raise ValueError(f"residual_hidden needs sizes >= 1, got {self.residual_hidden}")
        if self.action_delay_ticks < 0:
            raise ValueError(f"action_delay_ticks must be >= 0, got {self.action_delay_ticks}")
        if not self.dt_s > 0 or self.prior_substeps < 1:
            raise ValueError(
                f"need dt_s > 0 and prior_substeps >= 1, got {self.dt_s}, {self.prior_substeps}"
            )


@dataclass
class EncodedLatents:
    """Latents of every window of a dataset, in data order (see :meth:`VNDModel.encode_all`)."""

    z: torch.Tensor  # (M, nz)
    starts: torch.Tensor  # (M,) global index g of each window's first context transition
    labels: torch.Tensor  # (M,) label of the window's last state s_{g+C} (NO_LABEL: unknown)


class VNDModel(nn.Module):
    """``next_state = prior(s, a) ⊕ D(s, a, z)`` with ``z = encoder(context window)``.

    The prior is the fixed :class:`NominalModel`; the residual, encoder and decoder are learned.
    Normalisation statistics are buffers, so ``state_dict()`` holds everything a bundle needs
    besides :meth:`architecture`.
    """

    normalizers_fitted: torch.Tensor  # () bool buffer: the statistics come from data

    def __init__(self, vehicle: VehicleParams, config: VNDModelConfig | None = None) -> None:
        super().__init__()
        self.config = config or VNDModelConfig()
        self.config.validate()
        cfg = self.config
        self.vehicle = vehicle
        self.prior = NominalModel(vehicle, NominalModelConfig(cfg.dt_s, cfg.prior_substeps))
        self.encoder = ContextEncoder(
            CONTEXT_FEATURE_DIM,
            cfg.latent_dim,
            cfg.encoder_hidden,
            ENCODER_FIRST_COLUMN,
        )
        self.residual = FiLMResidual(
            INPUT_DIM,
            RESIDUAL_DIM,
            cfg.latent_dim,
            cfg.residual_hidden,
            cfg.film_hidden,
            cfg.residual_out_gain,
            latent_only_dims=RATE_OFFSET_DIMS if cfg.rate_offset_head else 0,
        )
        self.decoder = ContextDecoder(
            cfg.latent_dim, cfg.context_len, self.encoder.input_dim, cfg.decoder_hidden
        )
        # Set once statistics come from data; a warm-started fit keeps them (see fit.py).
        self.register_buffer("normalizers_fitted", torch.zeros((), dtype=torch.bool))

    # ----------------------------------------------------------------- bundle support
    @property
    def latent_dim(self) -> int:
        """Size of z."""
        return self.config.latent_dim

    @property
    def context_len(self) -> int:
        """Number of context transitions C the encoder reads."""
        return self.config.context_len

    def architecture(self) -> dict[str, Any]:
        """Constructor arguments as a JSON-serialisable dict (tuples become lists).

        The :data:`RETIRED_FIELDS` are written too, at the values this version computes: an
        absent ``encoder_inputs`` keeps meaning a bundle from before that field existed, and
        earlier versions rebuild these models as they are.
        """
        arch = {**RETIRED_FIELDS, **dataclasses.asdict(self.config)}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in arch.items()}

    @classmethod
    def from_architecture(cls, arch: dict[str, Any], vehicle: VehicleParams) -> VNDModel:
        """Rebuild an untrained model from :meth:`architecture` output; load weights after.

        Unknown, missing-without-default or mistyped fields raise ConfigError naming them. A
        field of :data:`RETIRED_FIELDS` at the value this version computes is ignored; at any
        other value (or ``encoder_inputs`` absent: a bundle written before it existed, whose
        encoder reads every feature) the model needs an option this version no longer has,
        and ConfigError names the field and what to do. A field added since (``_ADDED_ABSENT``)
        and absent rebuilds the model as it was before the field existed.
        """
        arch = {**_ADDED_ABSENT, **arch}
        retired = {
            name: arch.pop(name, _RETIRED_ABSENT.get(name, kept))
            for name, kept in RETIRED_FIELDS.items()
        }
        config = from_mapping(VNDModelConfig, arch, "vnd model architecture")
        for name, value in retired.items():
            kept = RETIRED_FIELDS[name]
            if value != kept:
                raise ConfigError(
                    f"vnd model architecture: {name} = {value!r} is an option this version no "
                    f"longer has (it builds {name} = {kept!r} models only): train a new model "
                    "with this version, starting the learner (or `vnd learn --init`) from a "
                    "bundle without a model such as the shipped base bundle"
                )
        return cls(vehicle, config)

    # ----------------------------------------------------------------- inference
    def encode(self, window_states: torch.Tensor, window_actions: torch.Tensor) -> torch.Tensor:
        """Latent z (B, nz) of windows of states (B, C+1, 13) and actions (B, C, 4).

        ``window_states[:, k] --window_actions[:, k]--> window_states[:, k+1]`` for k < C; the
        latent is meant for predicting from ``window_states[:, -1]`` onwards. The window must
        hold exactly C transitions. With ``action_delay_ticks = d`` the action paired with
        ``window_states[:, k]`` is the one logged d ticks before that state (see data.py).
        """
        if window_actions.shape[-2] != self.context_len:
            raise ValueError(
                f"encoder expects {self.context_len} context actions, "
                f"got {window_actions.shape[-2]}"
            )
        return self.encoder(context_features(self.prior, window_states, window_actions))

    def residual_correction(
        self, state: torch.Tensor, action: torch.Tensor, z: torch.Tensor
    ) -> torch.Tensor:
        """D(s, a, z) (..., 12) in physical units; z broadcastable to the leading dims."""
        return self.residual(dynamics_input(state, action), z)

    def predict(self, state: torch.Tensor, action: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Next state (..., 13) = prior(state, action) ⊕ D(state, action, z); differentiable.

        ``state`` (..., 13), ``action`` (..., 4), ``z`` (..., nz).
        """
        return apply_residual(self.prior(state, action), self.residual_correction(state, action, z))

    def frozen_dynamics(self) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
        """Freeze the learned weights and return :meth:`predict` for policy training.

        The policy trainer back-propagates through ``predict`` into the state, action (and so
        the policy) but must not accumulate gradients in this model: every parameter gets
        ``requires_grad = False`` (``fit_vnd`` turns them back on). Signature of the result:
        ``dynamics(state (B, 13), action (B, 4), z (B, nz)) -> next state (B, 13)``.
        """
        self.requires_grad_(False)
        self.eval()
        return self.predict

    def rollout(self, state: torch.Tensor, actions: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Open-loop states (B, H+1, 13) from ``state`` (B, 13) under ``actions`` (B, H, 4),
        one latent ``z`` (B, nz) for the whole rollout; index 0 is the initial state."""
        states = [state]
        for k in range(actions.shape[-2]):
            states.append(self.predict(states[-1], actions[..., k, :], z))
        return torch.stack(states, dim=-2)

    def rollout_prior(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Like :meth:`rollout` with the prior alone (no residual): (B, H+1, 13)."""
        states = [state]
        for k in range(actions.shape[-2]):
            states.append(self.prior(states[-1], actions[..., k, :]))
        return torch.stack(states, dim=-2)

    @torch.no_grad()
    def encode_all(
        self, dataset: TransitionDataset, horizon: int = 0, batch_size: int = 4096
    ) -> EncodedLatents:
        """Re-encode every window of ``dataset`` (deterministic, batched, no gradient).

        ``horizon`` keeps only windows followed by at least that many transitions in their
        segment (0: every complete context). Runs in eval mode and restores the training flag.
        """
        self.check_dataset(dataset)
        was_training = self.training
        self.eval()
        try:
            starts = dataset.window_starts(self.context_len, horizon)
            chunks = [
                self.encoder(dataset.context(part, self.context_len))
                for part in starts.split(batch_size)
            ]
        finally:
            self.train(was_training)
        z = torch.cat(chunks) if chunks else torch.zeros(0, self.latent_dim)
        labels = (
            dataset.tensors()["labels"][starts + self.context_len - 1] if len(starts) else starts
        )
        return EncodedLatents(z=z, starts=starts, labels=labels)

    def new_dataset(self, segments: Iterable[Segment] = ()) -> TransitionDataset:
        """An empty (or filled) dataset with this model's prior and action alignment."""
        return TransitionDataset(self.prior, segments, self.config.action_delay_ticks)

    def check_dataset(self, dataset: TransitionDataset) -> None:
        """Raise ValueError if ``dataset``'s prior errors were computed with another prior
        (vehicle or control period), which would make its residual targets meaningless here."""
        if dataset.action_delay_ticks != self.config.action_delay_ticks:
            raise ValueError(
                f"dataset pairs transitions with actions {dataset.action_delay_ticks} ticks old, "
                f"the model expects {self.config.action_delay_ticks} (action_delay_ticks)"
            )
        theirs = dataset.prior
        if theirs.vehicle != self.vehicle or theirs.config != self.prior.config:
            raise ValueError(
                f"dataset prior ({theirs.vehicle.name}, dt {theirs.config.dt_s} s, "
                f"{theirs.config.substeps} substeps) differs from the model's "
                f"({self.vehicle.name}, dt {self.prior.config.dt_s} s, "
                f"{self.prior.config.substeps} substeps)"
            )

    # ----------------------------------------------------------------- normalisation
    @torch.no_grad()
    def fit_normalizers(self, dataset: TransitionDataset) -> None:
        """Set encoder-input, residual-input and residual-target statistics from ``dataset``.

        Changing statistics under trained weights changes what they compute: a warm-started
        fit keeps the first statistics (floors keep them usable on later, stronger conditions).
        """
        self.check_dataset(dataset)
        rows = dataset.tensors()
        inputs, targets = rows["inputs"], rows["targets"]
        floor = targets.new_tensor(RESIDUAL_STD_FLOOR)
        target_std = targets.std(dim=0).clamp_min(floor) if len(targets) > 1 else floor
        # Constant inputs (e.g. yaw never changes) keep a unit-ish floor, not a division by 0.
        input_std = (
            inputs.std(dim=0).clamp_min(INPUT_STD_FLOOR)
            if len(inputs) > 1
            else torch.ones(INPUT_DIM)
        )
        self.residual.input_normalizer.set_stats(inputs.mean(dim=0), input_std)
        self.residual.target_std.copy_(target_std)
        # the encoder reads the context view of the states (data.py: "Two views")
        seen = torch.cat([rows["context_inputs"], rows["context_targets"]], dim=-1)
        seen_std = seen.std(dim=0) if len(seen) > 1 else torch.ones(seen.shape[-1])
        first = self.encoder.first_column
        self.encoder.normalizer.set_stats(
            seen.mean(dim=0)[first:],
            torch.maximum(seen_std, torch.cat([input_std, target_std]))[first:],
            min_std=0.0,
        )
        self.normalizers_fitted.fill_(True)
