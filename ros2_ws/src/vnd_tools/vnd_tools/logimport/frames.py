"""Frame conversions of logged streams into the stack's frames (world ENU, body FLU).

PX4 and many mocap setups log in world NED with body FRD. Both conversions are proper rotations:
world NED -> ENU swaps x and y and negates z (a half turn about (1, 1, 0) / sqrt 2), body FLU ->
FRD negates y and z (a half turn about x). So the attitude body FLU -> world ENU is
``q_enu_ned * q_ned_frd * q_frd_flu``; vectors in the body frame (rates) negate y and z.
"""

from __future__ import annotations

import math

import numpy as np
from vnd_core.plant_parts import quat_mul_np
from vnd_core.state import OMEGA, POS, QUAT, RATES, VEL

FRAMES = ("enu_flu", "ned_frd")  # world/body frame pairs a log may be in
_Q_ENU_FROM_NED = np.array([[0.0, math.sqrt(0.5), math.sqrt(0.5), 0.0]])
_Q_FRD_FROM_FLU = np.array([[0.0, 1.0, 0.0, 0.0]])


def ned_to_enu(vector: np.ndarray) -> np.ndarray:
    """World vectors (N, 3) NED -> ENU."""
    return np.stack([vector[:, 1], vector[:, 0], -vector[:, 2]], axis=1)


def frd_to_flu(vector: np.ndarray) -> np.ndarray:
    """Body vectors (N, 3) FRD -> FLU."""
    return np.stack([vector[:, 0], -vector[:, 1], -vector[:, 2]], axis=1)


def quat_ned_frd_to_enu_flu(q_ned_frd: np.ndarray) -> np.ndarray:
    """Attitudes (N, 4, w x y z) body FRD -> world NED as body FLU -> world ENU."""
    n = len(q_ned_frd)
    left = quat_mul_np(np.repeat(_Q_ENU_FROM_NED, n, axis=0), q_ned_frd)
    return quat_mul_np(left, np.repeat(_Q_FRD_FROM_FLU, n, axis=0))


def state_to_enu_flu(state: np.ndarray, frame: str) -> np.ndarray:
    """States (N, 13) logged in ``frame`` (one of :data:`FRAMES`) in the stack's frames."""
    if frame == "enu_flu":
        return state.copy()
    if frame != "ned_frd":
        raise ValueError(f"unknown frame {frame!r} (known: {', '.join(FRAMES)})")
    out = np.empty_like(state)
    out[:, POS] = ned_to_enu(state[:, POS])
    out[:, QUAT] = quat_ned_frd_to_enu_flu(state[:, QUAT])
    out[:, VEL] = ned_to_enu(state[:, VEL])
    out[:, OMEGA] = frd_to_flu(state[:, OMEGA])
    return out


def command_to_flu(command: np.ndarray, frame: str) -> np.ndarray:
    """Commands (N, 4: thrust [N] along body up, rates) logged in ``frame`` in body FLU."""
    if frame == "enu_flu":
        return command.copy()
    if frame != "ned_frd":
        raise ValueError(f"unknown frame {frame!r} (known: {', '.join(FRAMES)})")
    out = command.copy()
    out[:, RATES] = frd_to_flu(command[:, RATES])
    return out
