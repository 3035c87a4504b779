"""Per-transition features shared by training and deployment, so both see identical inputs.

A transition is (s_t, a_t, s_{t+1}) over one control period. From it we derive:

- the *dynamics input* (16): world velocity (3), attitude as a 6-D rotation (6), body rates (3)
  and the action (4). Absolute position is left out on purpose: the dynamics do not depend on
  where the vehicle is, and a latent that could read position would learn places, not conditions.
- the *prior error* (12): how the observed next state departs from the prior's prediction,
  as position (3, m, world), orientation (3, rad, rotation vector in the body frame of the
  predicted attitude), velocity (3, m/s, world) and body rates (3, rad/s). This is the residual
  target, and, inside a context window, the signal that reveals the hidden condition.
"""

from __future__ import annotations

import torch

from vnd_core import so3
from vnd_core.dynamics import NominalModel
from vnd_core.state import ACTION_DIM, OMEGA, POS, QUAT, VEL

INPUT_DIM = 16  # dynamics input features per transition
RESIDUAL_DIM = 12  # prior-error / residual components per transition
CONTEXT_FEATURE_DIM = INPUT_DIM + RESIDUAL_DIM  # encoder input per context step

# Slices of the 12-D residual vector.
RES_POS = slice(0, 3)
RES_ROT = slice(3, 6)
RES_VEL = slice(6, 9)
RES_OMEGA = slice(9, 12)

# Smallest standard deviation each residual component is normalised by. At 50 Hz a 1 m/s^2
# disturbance moves the next state by 2e-4 m and 2e-2 m/s; the floors sit well below that, so
# calm-only data does not blow up the normalised error when a disturbance appears later.
RESIDUAL_STD_FLOOR = (1e-5,) * 3 + (1e-4,) * 3 + (1e-3,) * 3 + (1e-3,) * 3


def dynamics_input(state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Dynamics input features of ``state`` (..., 13) and ``action`` (..., 4) -> (..., 16)."""
    if action.shape[-1] != ACTION_DIM:
        raise ValueError(f"action must have {ACTION_DIM} components, got {action.shape[-1]}")
    return torch.cat(
        [state[..., VEL], so3.rotmat_6d(state[..., QUAT]), state[..., OMEGA], action], dim=-1
    )


def state_difference(observed: torch.Tensor, predicted: torch.Tensor) -> torch.Tensor:
    """Manifold difference ``observed ⊖ predicted`` of two states (..., 13) -> (..., 12)."""
    return torch.cat(
        [
            observed[..., POS] - predicted[..., POS],
            so3.rotvec_diff(observed[..., QUAT], predicted[..., QUAT]),
            observed[..., VEL] - predicted[..., VEL],
            observed[..., OMEGA] - predicted[..., OMEGA],
        ],
        dim=-1,
    )


def apply_residual(predicted: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """Manifold sum ``predicted ⊕ residual``: state (..., 13), residual (..., 12) -> (..., 13).

    The orientation part is composed through the exponential map, so the result stays a unit
    quaternion; it inverts :func:`state_difference`.
    """
    return torch.cat(
        [
            predicted[..., POS] + residual[..., RES_POS],
            so3.rotvec_add(predicted[..., QUAT], residual[..., RES_ROT]),
            predicted[..., VEL] + residual[..., RES_VEL],
            predicted[..., OMEGA] + residual[..., RES_OMEGA],
        ],
        dim=-1,
    )


def prior_error(
    prior: NominalModel, state: torch.Tensor, action: torch.Tensor, next_state: torch.Tensor
) -> torch.Tensor:
    """Residual target ``next_state ⊖ prior(state, action)``, shapes (..., 13/4/13) -> (..., 12)."""
    return state_difference(next_state, prior(state, action))


def context_features(
    prior: NominalModel, states: torch.Tensor, actions: torch.Tensor
) -> torch.Tensor:
    """Context features of a window: states (..., C+1, 13), actions (..., C, 4) -> (..., C, 28).

    Step k of the result describes the transition ``states[k] --actions[k]--> states[k+1]``:
    its dynamics input followed by its prior error. The encoder reads the prior error only
    (``vnd_core.vnd.model.ENCODER_FIRST_COLUMN``).
    """
    if states.shape[-2] != actions.shape[-2] + 1:
        raise ValueError(
            "a context window needs one more state than actions, got "
            f"{states.shape[-2]} states and {actions.shape[-2]} actions"
        )
    current, following = states[..., :-1, :], states[..., 1:, :]
    return torch.cat(
        [dynamics_input(current, actions), prior_error(prior, current, actions, following)], dim=-1
    )
