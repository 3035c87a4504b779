"""Variational Neural Dynamics: latent-conditioned residual dynamics and its fitting.

Public API:

- :class:`VNDModel`, :class:`VNDModelConfig`: prior ⊕ FiLM residual D(s, a, z), GRU context
  encoder, context decoder; ``predict``, ``rollout``, ``frozen_dynamics`` (for the policy
  trainer), ``encode``, ``encode_all``, ``new_dataset``, ``architecture`` /
  ``from_architecture``.
- :class:`Segment`, :class:`TransitionDataset`: contiguous 50 Hz tick runs cut into
  (context, K transitions) windows; ``select`` for eviction and rolling windows.
- :func:`fit_vnd`, :class:`FitConfig`, :class:`FitReport`: one model update.
- :func:`open_loop_errors`: prior vs prior + residual(z) prediction error at given horizons.
- :func:`mmd_imq`: the MMD used to shape the latent space.
"""

from vnd_core.vnd.data import NO_LABEL, Segment, TransitionDataset, WindowBatch
from vnd_core.vnd.fit import FitConfig, FitReport, fit_vnd
from vnd_core.vnd.losses import mmd_imq
from vnd_core.vnd.metrics import latent_knn_accuracy, open_loop_errors
from vnd_core.vnd.model import EncodedLatents, VNDModel, VNDModelConfig

__all__ = [
    "NO_LABEL",
    "EncodedLatents",
    "FitConfig",
    "FitReport",
    "Segment",
    "TransitionDataset",
    "VNDModel",
    "VNDModelConfig",
    "WindowBatch",
    "fit_vnd",
    "latent_knn_accuracy",
    "mmd_imq",
    "open_loop_errors",
]
