"""Which parts of the residual D(s, a, z) a model is used with, and composing only those.

The residual has 12 components: position (3), rotation (3), velocity (3) and body rates (3).
A policy trains against the ``"translational_rates"`` ones by default: position and velocity
(forces such as wind, payload, lost thrust) and the body rates, whose residual in a model with
the rate-offset head (``VNDModelConfig.rate_offset_head``) is a per-condition offset of z alone
(the rate a torque leaves under the rate loop: an offset centre of mass, a weak rotor); the
attitude itself follows from the rates through the prior. ``"translational"`` keeps the prior's
rates too; ``"full"`` adds the learned rotation. Whatever scores, gates or flies a learned model
must use the same set the policy trained on: a rotational residual the policy never saw can
drift far from the prior and makes a model look worse (or better) than the one the policy
relies on.

A policy with a force input flies with the disturbance observer's body-rate compensation, so
its learner leaves the body rates out (:func:`compensated_components`).

A bundle records the set in its summary (:data:`SUMMARY_KEY`, written by the continual learner);
a bundle without the key was trained against :data:`UNRECORDED_COMPONENTS`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vnd_core.state import OMEGA, POS, QUAT, VEL
from vnd_core.vnd.features import RES_OMEGA, RES_POS, RES_ROT, RES_VEL, apply_residual

COMPONENT_MASKS = {  # which of the 12 residual components (pos, rot, vel, omega) act
    "full": (1.0,) * 12,
    "translational": (1.0,) * 3 + (0.0,) * 3 + (1.0,) * 3 + (0.0,) * 3,
    "translational_rates": (1.0,) * 3 + (0.0,) * 3 + (1.0,) * 3 + (1.0,) * 3,
}
DEFAULT_COMPONENTS = "translational_rates"  # what policies train against unless configured
UNRECORDED_COMPONENTS = "translational"  # what a bundle whose summary does not say trained on
SUMMARY_KEY = "residual_components"  # bundle summary field naming the set


def check_components(components: str) -> str:
    """``components`` if it names a set of :data:`COMPONENT_MASKS`, else ValueError naming it."""
    if components not in COMPONENT_MASKS:
        raise ValueError(f"components must be one of {sorted(COMPONENT_MASKS)}, got {components!r}")
    return components


def recorded_components(summary: Mapping) -> str:
    """The residual components a bundle's model is meant to be used with, from the bundle's
    ``summary``; :data:`UNRECORDED_COMPONENTS` when it does not say. ValueError on an unknown
    set."""
    return check_components(summary.get(SUMMARY_KEY, UNRECORDED_COMPONENTS))


def compensated_components(components: str, force_dim: int) -> str:
    """The components a policy of force-input size ``force_dim`` trains against when its
    learner is configured with ``components``. A policy with a force input flies with the
    observer's body-rate compensation (``force_observer``), which cancels the rate offset a
    torque leaves before it reaches the vehicle: its training and checks leave the body-rate
    residual out (``"translational_rates"`` becomes ``"translational"``). ValueError for
    ``"full"`` with a force input: its learned rotation would be answered twice."""
    check_components(components)
    if not force_dim or components == "translational":
        return components
    if components == "translational_rates":
        return "translational"
    raise ValueError(
        f"components {components!r} cannot train a policy with a force input: it flies with "
        "the observer's body-rate compensation; use 'translational_rates' or 'translational'"
    )


def moves_attitude(components: str) -> bool:
    """Whether ``components`` change the prior's attitude or body rates (so the rotation gate
    has something to check)."""
    mask = COMPONENT_MASKS[check_components(components)]
    return any(mask[i] for i in (*range(12)[RES_ROT], *range(12)[RES_OMEGA]))


def add_translational(predicted: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``predicted ⊕ residual`` (..., 13) with only the position and velocity parts of
    ``residual`` (..., 12) added; the attitude and body rates stay the prior's."""
    return torch.cat(
        [
            predicted[..., POS] + residual[..., RES_POS],
            predicted[..., QUAT],
            predicted[..., VEL] + residual[..., RES_VEL],
            predicted[..., OMEGA],
        ],
        dim=-1,
    )


def compose(predicted: torch.Tensor, residual: torch.Tensor, components: str) -> torch.Tensor:
    """``predicted`` (..., 13) corrected by the ``components`` of ``residual`` (..., 12)."""
    if check_components(components) == "translational":
        return add_translational(predicted, residual)
    mask = residual.new_tensor(COMPONENT_MASKS[components])
    return apply_residual(predicted, residual * mask)
