"""Frame conventions between ROS (REP 103: ENU world, FLU body) and PX4 (NED world, FRD body).

All four changes of basis are proper rotations by 180 degrees, so each matrix is its own
inverse: FLU <-> FRD negates y and z (a half turn about x); ENU <-> NED swaps x and y and
negates z (a half turn about the axis (1, 1, 0) / sqrt(2)).

Quaternions are (w, x, y, z) as in transforms3d and the rest of the stack, and describe the
attitude "body to world": ``v_world = R(q) @ v_body``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from transforms3d import quaternions

# Coordinates of a vector given in FRD, expressed in FLU (and back: the matrix is involutive).
R_FLU_FRD = np.diag([1.0, -1.0, -1.0])
# Coordinates of a vector given in NED, expressed in ENU (and back: the matrix is involutive).
R_ENU_NED = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])

# The same two rotations as unit quaternions (w, x, y, z).
Q_FLU_FRD = quaternions.mat2quat(R_FLU_FRD)
Q_ENU_NED = quaternions.mat2quat(R_ENU_NED)


def _vectors(v: ArrayLike) -> np.ndarray:
    array = np.asarray(v, dtype=float)
    if array.shape[-1:] != (3,):
        raise ValueError(f"expected vectors of shape (..., 3), got shape {array.shape}")
    return array


def flu_to_frd(v: ArrayLike) -> np.ndarray:
    """Body vector(s) (..., 3) from FLU (ROS) to FRD (PX4) coordinates: (x, -y, -z)."""
    return _vectors(v) @ R_FLU_FRD.T


def frd_to_flu(v: ArrayLike) -> np.ndarray:
    """Body vector(s) (..., 3) from FRD (PX4) to FLU (ROS) coordinates: (x, -y, -z)."""
    return _vectors(v) @ R_FLU_FRD


def enu_to_ned(v: ArrayLike) -> np.ndarray:
    """World vector(s) (..., 3) from ENU (ROS) to NED (PX4) coordinates: (y, x, -z)."""
    return _vectors(v) @ R_ENU_NED.T


def ned_to_enu(v: ArrayLike) -> np.ndarray:
    """World vector(s) (..., 3) from NED (PX4) to ENU (ROS) coordinates: (y, x, -z)."""
    return _vectors(v) @ R_ENU_NED


def _unit_quaternion(q: ArrayLike) -> np.ndarray:
    array = np.asarray(q, dtype=float)
    if array.shape != (4,):
        raise ValueError(f"expected one quaternion (w, x, y, z) of shape (4,), got {array.shape}")
    norm = float(np.linalg.norm(array))
    if not math.isfinite(norm) or abs(norm - 1.0) > 1e-6:
        raise ValueError(f"quaternion {array.tolist()} is not unit length (norm {norm:.9f})")
    return array


def _canonical(q: np.ndarray) -> np.ndarray:
    """The representative of the rotation with w >= 0 (q and -q are the same rotation)."""
    return -q if q[0] < 0 else q


def enu_flu_to_ned_frd_quaternion(q_enu_flu: ArrayLike) -> np.ndarray:
    """Attitude (w, x, y, z) of an FLU body in ENU -> the same attitude of its FRD body in NED.

    q_ned_frd = q_ned_enu * q_enu_flu * q_flu_frd; the result has w >= 0.
    Raises ValueError for a non-unit quaternion.
    """
    q = _unit_quaternion(q_enu_flu)
    return _canonical(quaternions.qmult(quaternions.qmult(Q_ENU_NED, q), Q_FLU_FRD))


def ned_frd_to_enu_flu_quaternion(q_ned_frd: ArrayLike) -> np.ndarray:
    """Inverse of :func:`enu_flu_to_ned_frd_quaternion` (both half turns are involutive)."""
    q = _unit_quaternion(q_ned_frd)
    return _canonical(quaternions.qmult(quaternions.qmult(Q_ENU_NED, q), Q_FLU_FRD))


def wrap_angle_rad(angle_rad: float) -> float:
    """``angle_rad`` wrapped to [-pi, pi)."""
    return (angle_rad + math.pi) % (2.0 * math.pi) - math.pi


def enu_to_ned_yaw(yaw_enu_rad: float) -> float:
    """Heading from ENU (0 = east, counter-clockwise) to NED (0 = north, clockwise) [rad]."""
    return wrap_angle_rad(math.pi / 2.0 - yaw_enu_rad)


def ned_to_enu_yaw(yaw_ned_rad: float) -> float:
    """Heading from NED (0 = north, clockwise) to ENU (0 = east, counter-clockwise) [rad]."""
    return wrap_angle_rad(math.pi / 2.0 - yaw_ned_rad)
