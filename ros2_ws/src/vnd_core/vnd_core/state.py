"""State and action layout shared by every part of the stack (docs/architecture.md).

State (13): p (3, m, ENU world), q (4, w x y z, body to world), v (3, m/s world),
omega (3, rad/s, FLU body). Action (4): collective thrust (N), body-rate command (3, rad/s FLU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily so ROS-side tools using the layout start fast
    import torch

STATE_DIM = 13
ACTION_DIM = 4

POS = slice(0, 3)
QUAT = slice(3, 7)
VEL = slice(7, 10)
OMEGA = slice(10, 13)

THRUST = slice(0, 1)
RATES = slice(1, 4)

GRAVITY_MPS2 = 9.81


def split_state(state: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Split ``state`` (..., 13) into p (..., 3), q (..., 4), v (..., 3), omega (..., 3)."""
    return state[..., POS], state[..., QUAT], state[..., VEL], state[..., OMEGA]


def join_state(
    p: torch.Tensor, q: torch.Tensor, v: torch.Tensor, omega: torch.Tensor
) -> torch.Tensor:
    """Inverse of :func:`split_state`: concatenate to (..., 13)."""
    import torch

    return torch.cat([p, q, v, omega], dim=-1)


def hover_state(
    batch_shape: tuple[int, ...] = (), position_m: Sequence[float] = (0.0, 0.0, 1.0)
) -> torch.Tensor:
    """A state at rest, level, at ``position_m``; shape batch_shape + (13,)."""
    import torch

    state = torch.zeros(*batch_shape, STATE_DIM)
    state[..., POS] = torch.tensor(position_m, dtype=state.dtype)
    state[..., 3] = 1.0
    return state
