"""The safety envelope: checks of the odometry and of the policy's behaviour, per control tick,
independent of the network that produced the action.

:class:`OdometryGuard` judges each new odometry sample before the filter uses it: a sample far
from where the last good one predicts (a jump) or an exact repeat of the last pose with a new
stamp (a frozen source: real motion capture never repeats a pose to the last bit in flight) is
not used and is reported; a vehicle resting on the floor may repeat its pose.

:class:`PolicyEnvelope` judges the policy: measured or predicted tilt beyond ``max_tilt_rad``
(the tilt the commanded rates reach within ``prediction_horizon_s``), measured or commanded
roll/pitch rates beyond ``max_body_rate_radps``, a stopping point outside the geofence, or a
tracking error beyond ``max_tracking_error_m`` for ``tracking_error_ticks`` ticks in a row.
Each names what failed, with the figure ("tilt 52 deg > 46 deg").

:class:`CrashDetector` tells when the vehicle is lost: tilted beyond ``crash_tilt_rad`` for
``crash_time_s`` (flipped, or lying on its side), whatever the mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vnd_core.flight.blind import body_z, tilt_rad
from vnd_core.state import POS, QUAT, VEL

NS_PER_S = 1_000_000_000
Vec3 = tuple[float, float, float]

# Odometry sample faults.
FAULT_ODOM_JUMP = "odom_jump"
FAULT_ODOM_FROZEN = "odom_frozen"
# Policy envelope faults.
FAULT_TILT = "tilt_limit"
FAULT_BODY_RATE = "body_rate_limit"
FAULT_TRACKING = "tracking_error"
FAULT_GEOFENCE = "geofence"
ENVELOPE_FAULTS = frozenset({FAULT_TILT, FAULT_BODY_RATE, FAULT_TRACKING})


@dataclass(frozen=True)
class EnvelopeConfig:
    """Limits of :class:`OdometryGuard`, :class:`PolicyEnvelope` and :class:`CrashDetector`."""

    max_tilt_rad: float = 0.8  # measured or predicted tilt beyond this: the policy misbehaves
    max_body_rate_radps: float = 6.0  # measured or commanded roll/pitch rate beyond this
    prediction_horizon_s: float = 0.1  # tilt predicted this far ahead under the command
    max_tracking_error_m: float = 1.0  # distance from the reference that counts as lost ...
    tracking_error_ticks: int = 10  # ... for this many ticks in a row
    brake_accel_mps2: float = 4.0  # geofence: the stopping point at this deceleration
    odom_jump_m: float = 0.3  # a sample this far from the predicted position is a jump ...
    odom_jump_accel_mps2: float = 20.0  # ... plus what this acceleration adds since the last
    odom_frozen_samples: int = 3  # this many exact pose repeats in a row: frozen (0 = off)
    crash_tilt_rad: float = 1.2  # tilt beyond this ...
    crash_time_s: float = 0.3  # ... for this long: the vehicle is lost, motors off

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name, value in vars(self).items():
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        for name in ("max_tilt_rad", "crash_tilt_rad"):
            if not 0 < getattr(self, name) < math.pi:
                raise ValueError(f"{name} must be within (0, pi), got {getattr(self, name)}")
        if self.tracking_error_ticks < 1:
            raise ValueError(f"tracking_error_ticks must be >= 1, got {self.tracking_error_ticks}")


@dataclass(frozen=True)
class Verdict:
    """A failed check: the fault reason and what was measured."""

    reason: str  # fault name (FAULT_*)
    detail: str  # the figure that failed, for logs and the operator


class OdometryGuard:
    """Jump and frozen-source checks of new odometry samples (see the module docstring)."""

    def __init__(self, config: EnvelopeConfig) -> None:
        self.config = config
        self._repeats = 0

    def reset(self) -> None:
        """Forget the repeat count."""
        self._repeats = 0

    def check(
        self,
        state: np.ndarray,
        stamp_ns: int,
        last_state: np.ndarray | None,
        last_stamp_ns: int | None,
        resting: bool,
    ) -> Verdict | None:
        """Why the new sample ``state`` (13,) at ``stamp_ns`` must not be used, against the
        last used one; None when it is fine. ``resting``: the last sample rests on the floor."""
        if last_state is None or last_stamp_ns is None:
            return None
        c = self.config
        pose_equal = np.array_equal(state[POS], last_state[POS]) and np.array_equal(
            state[QUAT], last_state[QUAT]
        )
        self._repeats = self._repeats + 1 if pose_equal else 0
        if c.odom_frozen_samples and self._repeats >= c.odom_frozen_samples and not resting:
            return Verdict(FAULT_ODOM_FROZEN, f"pose repeated {self._repeats} times")
        dt_s = max((stamp_ns - last_stamp_ns) / NS_PER_S, 0.0)
        predicted = last_state[POS] + last_state[VEL] * dt_s
        miss_m = float(np.linalg.norm(state[POS] - predicted))
        gate_m = c.odom_jump_m + 0.5 * c.odom_jump_accel_mps2 * dt_s * dt_s
        if miss_m > gate_m:
            return Verdict(FAULT_ODOM_JUMP, f"position {miss_m:.2f} m from the prediction")
        return None


class PolicyEnvelope:
    """Per-tick limits on the policy's behaviour (see the module docstring)."""

    def __init__(
        self, config: EnvelopeConfig, fence_min_m: Vec3, fence_max_m: Vec3, rate_lag_s: float
    ) -> None:
        self.config = config
        self._fence_min = np.asarray(fence_min_m, dtype=float)
        self._fence_max = np.asarray(fence_max_m, dtype=float)
        self._rate_lag_s = rate_lag_s
        self._off_track_ticks = 0

    def reset(self) -> None:
        """Forget the tracking-error count."""
        self._off_track_ticks = 0

    def check(
        self, state: np.ndarray, action: np.ndarray | None, reference_m: np.ndarray | None
    ) -> Verdict | None:
        """The first limit ``state`` (13,), the policy's ``action`` (4,) and the reference
        position ``reference_m`` (3,) break this tick, or None."""
        c = self.config
        tilt = tilt_rad(state[QUAT])
        if tilt > c.max_tilt_rad:
            detail = f"tilt {math.degrees(tilt):.0f} deg > {_deg(c.max_tilt_rad)}"
            return Verdict(FAULT_TILT, detail)
        rate = math.hypot(state[10], state[11])
        if rate > c.max_body_rate_radps:
            return Verdict(
                FAULT_BODY_RATE, f"body rate {rate:.1f} rad/s > {c.max_body_rate_radps:.1f} rad/s"
            )
        verdict = self._check_action(state, action)
        if verdict is None:
            verdict = self._check_tracking(state, reference_m)
        return verdict

    def outside_fence(self, state: np.ndarray) -> Verdict | None:
        """Geofence: the position, or where the vehicle would stop braking at
        ``brake_accel_mps2``, outside the box."""
        position = state[POS]
        velocity = state[VEL]
        speed = float(np.linalg.norm(velocity))
        stop = position + velocity * (speed / (2.0 * self.config.brake_accel_mps2))
        for point, what in ((position, "position"), (stop, "stopping point")):
            if np.any(point < self._fence_min) or np.any(point > self._fence_max):
                where = ", ".join(f"{p:.2f}" for p in point)
                return Verdict(FAULT_GEOFENCE, f"{what} ({where}) m outside the geofence")
        return None

    def _check_action(self, state: np.ndarray, action: np.ndarray | None) -> Verdict | None:
        """Commanded rates beyond the limit, or the tilt they reach within the horizon."""
        if action is None:
            return None
        c = self.config
        commanded = math.hypot(action[1], action[2])
        if commanded > c.max_body_rate_radps:
            return Verdict(
                FAULT_BODY_RATE,
                f"commanded body rate {commanded:.1f} rad/s > {c.max_body_rate_radps:.1f} rad/s",
            )
        # The rates follow the command through the rate-loop lag; over the horizon the body
        # turns by about (horizon - lag) * command + lag * current rate.
        h = c.prediction_horizon_s
        lead = max(h - self._rate_lag_s, 0.0)
        turn_x = lead * action[1] + min(h, self._rate_lag_s) * state[10]
        turn_y = lead * action[2] + min(h, self._rate_lag_s) * state[11]
        tilt_next = _tilt_after(state[QUAT], turn_x, turn_y)
        if tilt_next > c.max_tilt_rad:
            return Verdict(
                FAULT_TILT,
                f"commanded rates reach tilt {math.degrees(tilt_next):.0f} deg "
                f"> {_deg(c.max_tilt_rad)} within {h:.2f} s",
            )
        return None

    def _check_tracking(self, state: np.ndarray, reference_m: np.ndarray | None) -> Verdict | None:
        if reference_m is None:
            self._off_track_ticks = 0
            return None
        error_m = float(np.linalg.norm(state[POS] - reference_m))
        if error_m <= self.config.max_tracking_error_m:
            self._off_track_ticks = 0
            return None
        self._off_track_ticks += 1
        if self._off_track_ticks < self.config.tracking_error_ticks:
            return None
        return Verdict(
            FAULT_TRACKING,
            f"{error_m:.2f} m from the reference for {self._off_track_ticks} ticks "
            f"(limit {self.config.max_tracking_error_m:.2f} m)",
        )


class CrashDetector:
    """Tilt beyond ``crash_tilt_rad`` for ``crash_time_s``: the vehicle is lost."""

    def __init__(self, config: EnvelopeConfig) -> None:
        self.config = config
        self._since_ns: int | None = None

    def reset(self) -> None:
        """Forget the current stretch."""
        self._since_ns = None

    def check(self, now_ns: int, state: np.ndarray) -> Verdict | None:
        """A verdict once ``state`` (13,) has been over-tilted for ``crash_time_s``."""
        tilt = tilt_rad(state[QUAT])
        if tilt <= self.config.crash_tilt_rad:
            self._since_ns = None
            return None
        if self._since_ns is None:
            self._since_ns = now_ns
        if now_ns - self._since_ns < self.config.crash_time_s * NS_PER_S:
            return None
        return Verdict(
            "crash_detected",
            f"tilt {math.degrees(tilt):.0f} deg > {_deg(self.config.crash_tilt_rad)} for "
            f"{(now_ns - self._since_ns) / NS_PER_S:.2f} s",
        )


def _tilt_after(quat: np.ndarray, turn_x_rad: float, turn_y_rad: float) -> float:
    """Tilt of ``quat`` (4,) after a small body rotation (turn_x, turn_y, 0) rad."""
    half_x, half_y = 0.5 * turn_x_rad, 0.5 * turn_y_rad
    w, x, y, z = (float(c) for c in quat)
    # quat * (1, half_x, half_y, 0), unnormalised: body_z normalises through its use of w..z.
    q = (
        w - x * half_x - y * half_y,
        x + w * half_x - z * half_y,
        y + w * half_y + z * half_x,
        z + x * half_y - y * half_x,
    )
    norm = math.sqrt(sum(c * c for c in q))
    return math.acos(min(max(body_z([c / norm for c in q])[2], -1.0), 1.0))


def _deg(angle_rad: float) -> str:
    return f"{math.degrees(angle_rad):.0f} deg"
