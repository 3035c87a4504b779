"""Parts of the true plant (:class:`~vnd_core.plant.TruePlant`): its configuration
(:class:`PlantConfig`), the rotor layout and allocation, the numpy quaternion and
rotation helpers, the wind and the mass properties of a vehicle with its payload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vnd_core.scenario import (
    PayloadEvent,
    WindEvent,
)
from vnd_core.vehicle import VehicleParams

Vec3 = tuple[float, float, float]

ROTOR_COUNT = 4
# Rotor positions in units of arm_length_m / sqrt(2), body frame (FLU), X layout:
# 0 front-left, 1 back-left, 2 back-right, 3 front-right.
ROTOR_POSITIONS = ((1.0, 1.0), (-1.0, 1.0), (-1.0, -1.0), (1.0, -1.0))
# Sign of each rotor's reaction (yaw) torque about body z; diagonal pairs spin alike.
ROTOR_YAW_SIGNS = (1.0, -1.0, 1.0, -1.0)


@dataclass(frozen=True)
class PlantConfig:
    """Simulation settings of the true plant (the vehicle itself is a VehicleParams)."""

    physics_rate_hz: float = 500.0  # internal integration rate (>= 200)
    latency_s: float = 0.03  # set_command to motors, rounded to physics steps (1 to 2 ticks)
    position_noise_m: float = 0.001  # mocap position noise, std per axis
    attitude_noise_rad: float = 0.004  # mocap attitude noise, std of the rotation vector per axis
    velocity_noise_mps: float = 0.02  # noise of the measured (filtered mocap) velocity, std
    rate_noise_radps: float = 0.03  # noise of the measured body rates, std
    floor_m: float = 0.0  # height of the floor: landing or crash when the vehicle reaches it
    landing_speed_max_mps: float = 1.0  # reaching the floor faster than this is a crash
    landing_tilt_max_deg: float = 30.0  # reaching the floor tilted further is a crash
    arena_half_m: Vec3 = (10.0, 10.0, 10.0)  # crash when |p| exceeds this on any world axis
    max_tilt_deg: float = 80.0  # crash when body z leans further than this from world z

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        if not self.physics_rate_hz >= 200.0:
            raise ValueError(f"physics_rate_hz must be >= 200, got {self.physics_rate_hz}")
        noise = ("position_noise_m", "attitude_noise_rad", "velocity_noise_mps", "rate_noise_radps")
        for name in ("latency_s", *noise):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.max_tilt_deg <= 180:
            raise ValueError(f"max_tilt_deg must be within (0, 180], got {self.max_tilt_deg}")
        if not self.landing_speed_max_mps >= 0:
            raise ValueError(
                f"landing_speed_max_mps must be >= 0, got {self.landing_speed_max_mps}"
            )
        if not 0 <= self.landing_tilt_max_deg < 90:
            raise ValueError(
                f"landing_tilt_max_deg must be within [0, 90), got {self.landing_tilt_max_deg}"
            )

    @property
    def physics_dt_s(self) -> float:
        """Length of one integration step."""
        return 1.0 / self.physics_rate_hz


def allocation_matrix(vehicle: VehicleParams, com_offset_m: Vec3 = (0.0, 0.0, 0.0)) -> np.ndarray:
    """Map rotor thrusts (4,) to [collective thrust, roll, pitch, yaw torque] (4,), as (4, 4).

    Torques are about the centre of mass at ``com_offset_m`` (body frame): a thrust f at rotor
    position r gives (r - c) x (0, 0, f) = ((r_y - c_y) f, -(r_x - c_x) f, 0).
    """
    d = vehicle.arm_length_m / math.sqrt(2.0)
    rows: list[list[float]] = [[1.0] * ROTOR_COUNT, [], [], []]
    for (x, y), sign in zip(ROTOR_POSITIONS, ROTOR_YAW_SIGNS, strict=True):
        rows[1].append(d * y - com_offset_m[1])
        rows[2].append(-(d * x - com_offset_m[0]))
        rows[3].append(sign * vehicle.torque_coefficient_m)
    return np.array(rows)


# ------------------------------------------------------------------ rotations as linear maps


def _quat_products_to_rotmat() -> np.ndarray:
    """(16, 9) map from the outer product q q^T (flattened) to the rotation matrix (flattened).

    Written with ww + xx + yy + zz in place of 1, so it holds for unit quaternions.
    """
    c = np.zeros((4, 4, 3, 3))
    w, x, y, z = range(4)
    for i, j, row, col, coef in [
        (w, w, 0, 0, 1), (x, x, 0, 0, 1), (y, y, 0, 0, -1), (z, z, 0, 0, -1),
        (x, y, 0, 1, 2), (w, z, 0, 1, -2), (x, z, 0, 2, 2), (w, y, 0, 2, 2),
        (x, y, 1, 0, 2), (w, z, 1, 0, 2), (w, w, 1, 1, 1), (x, x, 1, 1, -1),
        (y, y, 1, 1, 1), (z, z, 1, 1, -1), (y, z, 1, 2, 2), (w, x, 1, 2, -2),
        (x, z, 2, 0, 2), (w, y, 2, 0, -2), (y, z, 2, 1, 2), (w, x, 2, 1, 2),
        (w, w, 2, 2, 1), (x, x, 2, 2, -1), (y, y, 2, 2, -1), (z, z, 2, 2, 1),
    ]:  # fmt: skip
        c[i, j, row, col] += coef
    return c.reshape(16, 9)


_ROTMAT_MAP = _quat_products_to_rotmat()
# Left-multiplication matrix of a quaternion: a * b = L(a) b with L(a)[r, k] = s[r, k] a[i[r, k]].
_QMUL_INDEX = np.array([[0, 1, 2, 3], [1, 0, 3, 2], [2, 3, 0, 1], [3, 2, 1, 0]])
_QMUL_SIGN = np.array([[1, -1, -1, -1], [1, 1, -1, 1], [1, 1, 1, -1], [1, -1, 1, 1]], dtype=float)


def _outer_to_cross() -> np.ndarray:
    """(9, 3) map with cross(a, b) = (a b^T flattened) @ map."""
    c = np.zeros((3, 3, 3))
    for k, (i, j) in enumerate([(1, 2), (2, 0), (0, 1)]):  # c_k = a_i b_j - a_j b_i
        c[i, j, k], c[j, i, k] = 1.0, -1.0
    return c.reshape(9, 3)


_CROSS_MAP = _outer_to_cross()


def rotmat_np(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (B, 3, 3), body to world, of unit quaternions q (B, 4) (w x y z)."""
    outer = (q[:, :, None] * q[:, None, :]).reshape(-1, 16)
    return (outer @ _ROTMAT_MAP).reshape(-1, 3, 3)


def quat_mul_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b of quaternions (B, 4)."""
    return ((a[:, _QMUL_INDEX] * _QMUL_SIGN) @ b[:, :, None])[:, :, 0]


def quat_exp_np(rotvec: np.ndarray) -> np.ndarray:
    """Unit quaternions (B, 4) of rotation vectors (B, 3) in rad."""
    half = 0.5 * np.sqrt((rotvec * rotvec).sum(axis=1, keepdims=True))
    # sin(half) / half is exact in float64 down to the smallest half; at half = 0 the rotation
    # vector is zero, so the floor only avoids 0 / 0.
    scale = 0.5 * np.sin(half) / np.maximum(half, 1e-300)
    return np.concatenate([np.cos(half), rotvec * scale], axis=1)


def rotate_np(rot: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors v (B, 3) by rotation matrices rot (B, 3, 3)."""
    return (rot @ v[:, :, None])[:, :, 0]


def rotate_inverse_np(rot: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors v (B, 3) by the transposes of rot (B, 3, 3)."""
    return (v[:, None, :] @ rot)[:, 0, :]


def cross_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross products (B, 3) of (B, 3) vectors; much faster than np.cross for small batches."""
    return (a[:, :, None] * b[:, None, :]).reshape(-1, 9) @ _CROSS_MAP


# ----------------------------------------------------------------------- disturbance models


class Wind:
    """Air velocity of one wind event: mean + Ornstein-Uhlenbeck gusts + sinusoid, per env."""

    def __init__(self, event: WindEvent, batch_size: int, rng: np.random.Generator) -> None:
        self.mean_mps = np.array(event.velocity_mps, dtype=float)
        self.gusty = event.kind == "gusts"
        self.sinusoidal = event.kind == "sinusoidal"
        self.gust_std_mps = np.array(event.gust_std_mps, dtype=float)
        self.gust_tau_s = event.gust_time_constant_s
        self.amplitude_mps = np.array(event.amplitude_mps, dtype=float)
        self.omega_radps = 2.0 * math.pi / event.period_s
        # Every env starts its gusts from the stationary distribution and its sinusoid at its
        # own phase, so a batch samples the condition instead of repeating one realisation.
        self.gust_mps = self.gust_std_mps * rng.standard_normal((batch_size, 3))
        self.phase_rad = 2.0 * math.pi * rng.random((batch_size, 1))

    def velocity_mps(self, t_s: float) -> np.ndarray:
        """Air velocity (B, 3) in the world frame at scenario time ``t_s``."""
        wind = (
            self.mean_mps + self.gust_mps
            if self.gusty
            else np.broadcast_to(self.mean_mps, self.gust_mps.shape)
        )
        if self.sinusoidal:
            wind = wind + self.amplitude_mps * np.sin(self.omega_radps * t_s + self.phase_rad)
        return wind

    def advance(self, dt_s: float, rng: np.random.Generator) -> None:
        """Step the gust process by ``dt_s`` with its exact discretisation."""
        if not self.gusty:
            return
        decay = math.exp(-dt_s / self.gust_tau_s)
        noise = rng.standard_normal(self.gust_mps.shape)
        self.gust_mps = (
            decay * self.gust_mps + (math.sqrt(1.0 - decay**2) * self.gust_std_mps) * noise
        )


class MassProperties:
    """Mass, centre of mass and inertia of vehicle + payload about their common centre."""

    def __init__(self, vehicle: VehicleParams, payload: PayloadEvent | None) -> None:
        mass_kg = vehicle.mass_kg
        inertia = np.diag(vehicle.inertia_kgm2)
        self.payload_kg = 0.0 if payload is None else payload.mass_kg
        self.com_m = np.zeros(3)
        if payload is not None:
            r_p = np.array(payload.com_offset_m, dtype=float)
            total_kg = mass_kg + payload.mass_kg
            self.com_m = r_p * (payload.mass_kg / total_kg)
            # Parallel-axis theorem: the vehicle (its centre at the body origin) and a point
            # payload at r_p, both about the common centre of mass.
            inertia = (
                inertia
                + _point_inertia(mass_kg, -self.com_m)
                + _point_inertia(payload.mass_kg, r_p - self.com_m)
            )
            mass_kg = total_kg
        self.mass_kg = mass_kg
        self.inertia = inertia
        self.inertia_inv = np.linalg.inv(inertia)
        self.offset = bool(np.any(self.com_m != 0.0))


def _point_inertia(mass_kg: float, r_m: np.ndarray) -> np.ndarray:
    """Inertia (3, 3) of a point mass at ``r_m`` about the origin."""
    return mass_kg * (r_m @ r_m * np.eye(3) - np.outer(r_m, r_m))


# ------------------------------------------------------------------- one vehicle, plain floats


def cross3(a: list[float], b: list[float]) -> list[float]:
    """Cross product a x b of two 3-vectors."""
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def matvec3(m: list[list[float]], v: list[float]) -> list[float]:
    """Product m v of a 3x3 matrix (rows) and a 3-vector."""
    return [m[0][0] * v[0] + m[0][1] * v[1] + m[0][2] * v[2],
            m[1][0] * v[0] + m[1][1] * v[1] + m[1][2] * v[2],
            m[2][0] * v[0] + m[2][1] * v[1] + m[2][2] * v[2]]  # fmt: skip


def quat_mul_exp(q: list[float], rotvec: list[float]) -> list[float]:
    """q * exp(rotvec) for a quaternion (4 floats) and a rotation vector (3 floats, rad)."""
    half = 0.5 * math.sqrt(rotvec[0] ** 2 + rotvec[1] ** 2 + rotvec[2] ** 2)
    scale = 0.5 * math.sin(half) / max(half, 1e-300)
    bw, bx, by, bz = math.cos(half), rotvec[0] * scale, rotvec[1] * scale, rotvec[2] * scale
    aw, ax, ay, az = q
    return [
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ]
