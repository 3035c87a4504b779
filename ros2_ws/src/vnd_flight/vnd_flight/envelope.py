"""The safety envelope: checks of the odometry and of the policy's behaviour, per control tick,
independent of the network that produced the action.

:class:`OdometryGuard` judges each new odometry sample before the filter uses it: a sample far
from where the last good one predicts (a jump) or an exact repeat of the last pose with a new
stamp (a frozen source: real motion capture never repeats a pose to the last bit in flight) is
not used and is reported; a vehicle resting on the floor may repeat its pose.

:class:`PolicyEnvelope` judges the policy: measured tilt beyond ``max_tilt_rad``, measured
roll/pitch rates beyond ``max_body_rate_radps``, commanded ones beyond
``max_commanded_rate_radps``, a stopping point outside the geofence, or a tracking error beyond
``max_tracking_error_m`` for ``tracking_error_ticks`` ticks in a row. Each names what failed,
with the figure ("tilt 72 deg > 69 deg for 3 ticks").

The limits sit above what the shipped policy itself flies, take-off transients included (its
figure-eight started from rest on the real-process stack reaches 65 deg of tilt for a tick or
two, and 9.1 rad/s commanded): the envelope
is the last line behind the behavioural check of every bundle, and it must never take a good
policy off the vehicle. The measured rate is the pose filter's estimate from motion-capture
attitudes, which reads 9 rad/s at take-off where the true rate stays near 7, so its limit only
catches a vehicle that is really spinning away. A network gone wild saturates both rate
axes at once (11.3 rad/s on the agile vehicle) and is caught on its first tick.

:class:`CrashDetector` tells when the vehicle is lost: tilted beyond ``crash_tilt_rad`` for
``crash_time_s`` (flipped, or lying on its side), whatever the mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from vnd_core.state import POS, QUAT
from vnd_core.units import NS_PER_S

from vnd_flight.blind import tilt_rad

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

    max_tilt_rad: float = 1.2  # measured tilt beyond this ...
    tilt_ticks: int = 3  # ... for this many ticks in a row: the policy misbehaves
    max_body_rate_radps: float = 15.0  # measured roll/pitch rate (norm) beyond this
    max_commanded_rate_radps: float = 10.5  # commanded roll/pitch rate (norm) beyond this
    max_tracking_error_m: float = 1.0  # distance from the reference that counts as lost ...
    tracking_error_ticks: int = 10  # ... for this many ticks in a row
    brake_accel_mps2: float = 4.0  # geofence: the stopping point at this deceleration
    odom_jump_m: float = 0.3  # a sample this far from the predicted position is a jump ...
    odom_jump_accel_mps2: float = 20.0  # ... plus what this acceleration adds since the last
    odom_frozen_samples: int = 3  # this many exact pose repeats in a row: frozen (0 = off)
    crash_tilt_rad: float = 1.3  # tilt beyond this ...
    crash_time_s: float = 0.3  # ... for this long: the vehicle is lost, motors off

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name, value in vars(self).items():
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        for name in ("max_tilt_rad", "crash_tilt_rad"):
            if not 0 < getattr(self, name) < math.pi:
                raise ValueError(f"{name} must be within (0, pi), got {getattr(self, name)}")
        if self.tilt_ticks < 1:
            raise ValueError(f"tilt_ticks must be >= 1, got {self.tilt_ticks}")
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
        new, old = state[0:7].tolist(), last_state[0:10].tolist()
        self._repeats = self._repeats + 1 if new == old[0:7] else 0
        if c.odom_frozen_samples and self._repeats >= c.odom_frozen_samples and not resting:
            return Verdict(FAULT_ODOM_FROZEN, f"pose repeated {self._repeats} times")
        dt_s = max((stamp_ns - last_stamp_ns) / NS_PER_S, 0.0)
        miss_m = math.sqrt(sum((new[i] - old[i] - old[7 + i] * dt_s) ** 2 for i in range(3)))
        gate_m = c.odom_jump_m + 0.5 * c.odom_jump_accel_mps2 * dt_s * dt_s
        if miss_m > gate_m:
            return Verdict(FAULT_ODOM_JUMP, f"position {miss_m:.2f} m from the prediction")
        return None


class PolicyEnvelope:
    """Per-tick limits on the policy's behaviour (see the module docstring)."""

    def __init__(self, config: EnvelopeConfig, fence_min_m: Vec3, fence_max_m: Vec3) -> None:
        self.config = config
        self._fence_min = tuple(float(v) for v in fence_min_m)
        self._fence_max = tuple(float(v) for v in fence_max_m)
        self._off_track_ticks = 0
        self._tilted_ticks = 0

    def reset(self) -> None:
        """Forget the tilt and tracking-error counts."""
        self._off_track_ticks = 0
        self._tilted_ticks = 0

    def check(
        self, state: np.ndarray, action: np.ndarray | None, reference_m: np.ndarray | None
    ) -> Verdict | None:
        """The first limit ``state`` (13,), the policy's ``action`` (4,) and the reference
        position ``reference_m`` (3,) break this tick, or None."""
        c = self.config
        tilt = tilt_rad(state[QUAT])
        self._tilted_ticks = self._tilted_ticks + 1 if tilt > c.max_tilt_rad else 0
        if self._tilted_ticks >= c.tilt_ticks:
            detail = (
                f"tilt {math.degrees(tilt):.0f} deg > {_deg(c.max_tilt_rad)} for "
                f"{self._tilted_ticks} ticks"
            )
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
        # Scalar arithmetic: a handful of numpy calls on 3-vectors cost more than the check.
        px, py, pz = (float(v) for v in state[0:3])
        vx, vy, vz = (float(v) for v in state[7:10])
        scale = math.sqrt(vx * vx + vy * vy + vz * vz) / (2.0 * self.config.brake_accel_mps2)
        position = (px, py, pz)
        stop = (px + vx * scale, py + vy * scale, pz + vz * scale)
        for point, what in ((position, "position"), (stop, "stopping point")):
            bounds = zip(point, self._fence_min, self._fence_max, strict=True)
            if any(p < lo or p > hi for p, lo, hi in bounds):
                where = ", ".join(f"{p:.2f}" for p in point)
                return Verdict(FAULT_GEOFENCE, f"{what} ({where}) m outside the geofence")
        return None

    def _check_action(self, state: np.ndarray, action: np.ndarray | None) -> Verdict | None:
        """Commanded roll/pitch rates beyond the limit."""
        if action is None:
            return None
        c = self.config
        commanded = math.hypot(action[1], action[2])
        if commanded > c.max_commanded_rate_radps:
            return Verdict(
                FAULT_BODY_RATE,
                f"commanded body rate {commanded:.1f} rad/s > {c.max_commanded_rate_radps:.1f} "
                "rad/s",
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


def _deg(angle_rad: float) -> str:
    return f"{math.degrees(angle_rad):.0f} deg"
