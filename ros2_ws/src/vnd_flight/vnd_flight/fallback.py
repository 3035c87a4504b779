"""Model-based fallback controller (no learning): position hold and landing.

A cascade on the nominal rigid-body model: PD on position and velocity -> desired acceleration
-> collective thrust along the current body z and a desired attitude (tilt towards the desired
force, yaw kept) -> body-rate command proportional to the attitude error. The output is the same
CTBR action (4,) the policy produces, so the safety filter can switch between them per tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from transforms3d.quaternions import axangle2quat, qconjugate, qmult, quat2mat
from vnd_core.state import ACTION_DIM, GRAVITY_MPS2, POS, QUAT, VEL
from vnd_core.vehicle import VehicleParams

from vnd_flight.pose_filter import quat_log

_E_Z = np.array([0.0, 0.0, 1.0])


@dataclass(frozen=True)
class FallbackConfig:
    """Gains and limits of :class:`FallbackController` and :class:`LandingPlanner`."""

    kp_xy_per_s2: float = 3.0  # horizontal position gain: m/s^2 of command per m of error
    kd_xy_per_s: float = 3.0  # horizontal velocity gain: m/s^2 per m/s of error
    kp_z_per_s2: float = 4.0  # vertical position gain
    kd_z_per_s: float = 3.5  # vertical velocity gain
    max_tilt_rad: float = 0.5  # limit of the commanded tilt (caps horizontal acceleration)
    max_accel_down_mps2: float = 4.0  # limit of the commanded downward acceleration
    attitude_gain_per_s: float = 6.0  # roll/pitch rate command per rad of attitude error
    yaw_gain_per_s: float = 2.0  # yaw rate command per rad of heading error
    land_speed_mps: float = 0.4  # descent speed of the landing set point
    flare_time_s: float = 0.5  # near the floor the set point slows: speed <= height / this

    def validate(self) -> None:
        """Raise ValueError naming the first field that is not > 0 (or a tilt >= 90 deg)."""
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.max_tilt_rad >= math.pi / 2:
            raise ValueError(f"max_tilt_rad must be < pi/2, got {self.max_tilt_rad}")


@dataclass(frozen=True)
class Setpoint:
    """Where the fallback flies: position (3,) m, velocity (3,) m/s and acceleration (3,)
    m/s^2 feed-forward (world), heading yaw rad."""

    position_m: np.ndarray
    velocity_mps: np.ndarray
    yaw_rad: float
    accel_mps2: np.ndarray = field(default_factory=lambda: np.zeros(3))

    @staticmethod
    def hold(position_m: np.ndarray, yaw_rad: float) -> Setpoint:
        """Stand still at ``position_m`` with heading ``yaw_rad``."""
        return Setpoint(np.array(position_m, dtype=float), np.zeros(3), float(yaw_rad))


def yaw_of(quaternion_wxyz: np.ndarray) -> float:
    """Heading (rad, ENU, from +x towards +y) of the body x axis of ``quaternion_wxyz`` (4,)."""
    rot = quat2mat(quaternion_wxyz)
    return math.atan2(rot[1, 0], rot[0, 0])


class FallbackController:
    """Cascaded position -> attitude -> body-rate controller on the nominal model."""

    def __init__(self, vehicle: VehicleParams, config: FallbackConfig | None = None) -> None:
        self.vehicle = vehicle
        self.config = config or FallbackConfig()
        self.config.validate()
        c = self.config
        self._kp = np.array([c.kp_xy_per_s2, c.kp_xy_per_s2, c.kp_z_per_s2])
        self._kd = np.array([c.kd_xy_per_s, c.kd_xy_per_s, c.kd_z_per_s])
        self._att_gain = np.array([c.attitude_gain_per_s, c.attitude_gain_per_s, c.yaw_gain_per_s])
        self._max_accel_xy = GRAVITY_MPS2 * math.tan(c.max_tilt_rad)
        self._max_accel_up = vehicle.thrust_max_n / vehicle.mass_kg - GRAVITY_MPS2

    def command(self, state: np.ndarray, setpoint: Setpoint) -> np.ndarray:
        """CTBR action (4,): thrust N and body rates rad/s (FLU) for ``state`` (13,)."""
        accel = self.desired_accel(state, setpoint)
        force_n = self.vehicle.mass_kg * (accel + GRAVITY_MPS2 * _E_Z)
        quat = np.asarray(state[QUAT], dtype=float)
        body_z = quat2mat(quat)[:, 2]
        action = np.empty(ACTION_DIM)
        action[0] = max(float(force_n @ body_z), 0.0)
        action[1:] = self.attitude_rates(quat, force_n / np.linalg.norm(force_n), setpoint.yaw_rad)
        return action

    def desired_accel(self, state: np.ndarray, setpoint: Setpoint) -> np.ndarray:
        """PD acceleration command (3,) m/s^2, tilt- and descent-limited."""
        accel = self._kp * (setpoint.position_m - state[POS])
        accel += self._kd * (setpoint.velocity_mps - state[VEL]) + setpoint.accel_mps2
        horizontal = math.hypot(accel[0], accel[1])
        if horizontal > self._max_accel_xy:
            accel[:2] *= self._max_accel_xy / horizontal
        accel[2] = min(max(accel[2], -self.config.max_accel_down_mps2), self._max_accel_up)
        return accel

    def attitude_rates(self, quat: np.ndarray, z_des: np.ndarray, yaw_rad: float) -> np.ndarray:
        """Body rates (3,) rad/s turning attitude ``quat`` towards body z = ``z_des`` (unit,
        world) with heading ``yaw_rad``: proportional to the rotation vector of the error."""
        q_yaw = axangle2quat(_E_Z, yaw_rad)
        c, s = math.cos(yaw_rad), math.sin(yaw_rad)
        # z_des in the yaw-rotated frame; the tilt axis is e_z x z_des there (no z part).
        zx, zy = c * z_des[0] + s * z_des[1], -s * z_des[0] + c * z_des[1]
        sin_tilt = math.hypot(zx, zy)
        if sin_tilt > 1e-9:
            tilt = math.atan2(sin_tilt, z_des[2])
            q_des = qmult(q_yaw, axangle2quat((-zy / sin_tilt, zx / sin_tilt, 0.0), tilt))
        else:
            q_des = q_yaw
        q_err = qmult(qconjugate(quat), q_des)
        if q_err[0] < 0.0:  # take the short way round
            q_err = -q_err
        return self._att_gain * np.array(quat_log(*q_err))


class LandingPlanner:
    """Set point that descends from where landing began to ``floor_z_m`` and stays there,
    holding x, y and heading. Its speed ramps up to ``land_speed_mps`` over ``flare_time_s``
    and slows down exponentially (time constant ``flare_time_s``) near the floor, so the
    vehicle can follow it without overshooting into the ground."""

    def __init__(self, config: FallbackConfig, floor_z_m: float) -> None:
        self.land_speed_mps = config.land_speed_mps
        self.flare_time_s = config.flare_time_s
        self.floor_z_m = floor_z_m
        self._position_m = np.zeros(3)
        self._yaw_rad = 0.0
        self._speed_mps = 0.0

    def start(self, position_m: np.ndarray, yaw_rad: float) -> None:
        """Begin landing from ``position_m`` (3,) with heading ``yaw_rad``."""
        self._position_m = np.array(position_m, dtype=float)
        self._position_m[2] = max(self._position_m[2], self.floor_z_m)
        self._yaw_rad = float(yaw_rad)
        self._speed_mps = 0.0

    def step(self, dt_s: float) -> Setpoint:
        """Advance the set point by ``dt_s`` and return it."""
        height_m = self._position_m[2] - self.floor_z_m
        previous_mps = self._speed_mps
        ramped_mps = previous_mps + self.land_speed_mps * dt_s / self.flare_time_s
        self._speed_mps = min(ramped_mps, self.land_speed_mps, height_m / self.flare_time_s)
        self._position_m[2] -= min(self._speed_mps * dt_s, height_m)
        velocity = np.array([0.0, 0.0, -self._speed_mps])
        accel = np.array([0.0, 0.0, (previous_mps - self._speed_mps) / dt_s])
        return Setpoint(self._position_m.copy(), velocity, self._yaw_rad, accel)
