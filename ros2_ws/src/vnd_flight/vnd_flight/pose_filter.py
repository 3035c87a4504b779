"""Motion-capture pose -> filtered state estimate (position, attitude, velocity, body rates).

Position and velocity come from a constant-velocity Kalman filter per world axis. Body rates
come from an error-state Kalman filter on the attitude with angle and rate states per body
axis: it predicts the attitude with the rate estimate, takes the SO(3) log
of measured vs predicted attitude as the innovation, and corrects both. When the body rates
just commanded are known (:meth:`PoseFilter.set_rate_command`), the rate prediction follows the
vehicle's first-order rate loop towards them, and the filter trusts that model more
(``commanded_rate_noise_radps2``). The loop settles towards the command plus an offset the
filter estimates as a third state per axis: a torque (a weak rotor, a payload off the centre)
leaves the vehicle turning beyond its commands under a proportional rate loop, and a model that
pulls the rates towards the commands alone reports only part of a steady offset, and the force
observer downstream then compensates only that part. The offset moves slowly (seconds): the
first-order loop model misses the vehicle's motor lag during manoeuvres, and an offset free to
follow that mismatch wanders in calm air, where the fault flights' blind landings then ended
farther off. Why a model: differences of 100 Hz
attitude samples with 4 mrad of noise, low-pass filtered, gave rates so noisy that the base
policy flew a calm figure-eight at 0.046 m, against 0.027 m on the true rates; this filter
without commands gave 0.032 m, with them 0.025 m (simulated time, seed 0). The attitude itself
is passed through as measured. Bad samples are rejected and counted by reason.

This runs once per mocap message (100-360 Hz) on the estimator's thread, so it works on plain
floats: a handful of numpy calls on 3-vectors would already cost more than the whole update
(< 50 us budget).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from vnd_core.counters import ReasonCounter
from vnd_core.state import OMEGA, POS, QUAT, STATE_DIM, VEL
from vnd_core.units import NS_PER_S

# Rejection and reset reasons, as counted in ``PoseFilter.counters``.
REJECT_NON_FINITE = "non_finite"
REJECT_NON_UNIT_QUAT = "non_unit_quaternion"
REJECT_DUPLICATE = "duplicate_stamp"
REJECT_OUT_OF_ORDER = "out_of_order_stamp"
REJECT_JUMP = "position_jump"
RESET_GAP = "reset_after_gap"
RESET_JUMPS = "reset_after_jumps"
COMMAND_NOT_USABLE = "rate_command_not_finite"


@dataclass(frozen=True)
class PoseFilterConfig:
    """Tuning and rejection thresholds of :class:`PoseFilter`."""

    position_noise_m: float = 0.001  # std of mocap position noise (Kalman measurement noise)
    accel_noise_mps2: float = 0.5  # std of unmodelled acceleration per sqrt(s) (process noise)
    initial_velocity_std_mps: float = 2.0  # velocity uncertainty right after a (re)start
    attitude_noise_rad: float = 0.004  # std of mocap attitude noise per axis (rotation vector)
    angular_accel_noise_radps2: float = 20.0  # rate process noise without a command [/sqrt(s)]
    commanded_rate_noise_radps2: float = 6.0  # rate process noise given the command [/sqrt(s)]
    rate_offset_noise_radps: float = 0.05  # random walk of the rate offset [rad/s per sqrt(s)]
    initial_rate_offset_std_radps: float = 0.3  # rate-offset uncertainty after a (re)start
    command_timeout_s: float = 0.1  # a rate command older than this (vs the sample) is not used
    initial_rate_std_radps: float = 2.0  # body-rate uncertainty right after a (re)start [rad/s]
    position_jump_m: float = 0.3  # reject a sample this far from the predicted position
    max_consecutive_jumps: int = 20  # after this many jump rejections in a row, restart there
    quat_norm_tol: float = 0.01  # reject a quaternion whose norm differs from 1 by more
    gap_reset_s: float = 0.1  # restart the filter when samples are this far apart
    warmup_samples: int = 3  # accepted samples after a (re)start before estimates are given

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field."""
        for name in (
            "position_noise_m",
            "accel_noise_mps2",
            "initial_velocity_std_mps",
            "attitude_noise_rad",
            "angular_accel_noise_radps2",
            "commanded_rate_noise_radps2",
            "rate_offset_noise_radps",
            "initial_rate_offset_std_radps",
            "command_timeout_s",
            "initial_rate_std_radps",
            "position_jump_m",
            "quat_norm_tol",
            "gap_reset_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_consecutive_jumps < 1:
            raise ValueError(
                f"max_consecutive_jumps must be >= 1, got {self.max_consecutive_jumps}"
            )
        if self.warmup_samples < 2:
            raise ValueError(f"warmup_samples must be >= 2, got {self.warmup_samples}")


@dataclass(frozen=True)
class PoseEstimate:
    """Filtered state at ``stamp_ns`` (the stamp of the mocap sample it includes)."""

    stamp_ns: int  # time of the latest accepted mocap sample
    position_m: np.ndarray  # (3,) ENU world
    quaternion_wxyz: np.ndarray  # (4,) unit, body (FLU) to world, sign kept continuous
    velocity_mps: np.ndarray  # (3,) world frame
    body_rate_radps: np.ndarray  # (3,) FLU body frame

    def as_state(self) -> np.ndarray:
        """The 13-D state vector (p, q, v, omega) of ``vnd_core.state``."""
        state = np.empty(STATE_DIM)
        state[POS] = self.position_m
        state[QUAT] = self.quaternion_wxyz
        state[VEL] = self.velocity_mps
        state[OMEGA] = self.body_rate_radps
        return state


class PoseFilter:
    """Mocap pose stream -> :class:`PoseEstimate`, rejecting and counting bad samples.

    Call :meth:`update` for each sample in arrival order. Samples with a non-increasing stamp,
    non-finite values, a non-unit quaternion or a position more than ``position_jump_m`` from
    the prediction are rejected (``None`` returned, ``counters`` incremented by reason). A gap
    longer than ``gap_reset_s`` restarts the filter from the new sample; so do
    ``max_consecutive_jumps`` jump rejections in a row (the body really is somewhere else).
    After a restart no estimate is returned until ``warmup_samples`` samples were accepted.
    """

    def __init__(
        self, config: PoseFilterConfig | None = None, rate_time_constant_s: float = 0.06
    ) -> None:
        """``rate_time_constant_s``: the vehicle's first-order body-rate loop (its
        ``body_rate_time_constant_s``), through which rate commands predict the rates."""
        self.config = config or PoseFilterConfig()
        self.config.validate()
        if not rate_time_constant_s > 0:
            raise ValueError(f"rate_time_constant_s must be > 0, got {rate_time_constant_s}")
        self.rate_time_constant_s = rate_time_constant_s
        self.counters = ReasonCounter()
        self._r = self.config.position_noise_m**2
        self._q = self.config.accel_noise_mps2**2
        self._r_att = self.config.attitude_noise_rad**2
        self._q_free = self.config.angular_accel_noise_radps2**2
        self._q_cmd = self.config.commanded_rate_noise_radps2**2
        self._q_offset = self.config.rate_offset_noise_radps**2
        self._command: tuple[int, tuple[float, ...]] | None = None  # (stamp ns, rates rad/s)
        self.reset()

    def reset(self) -> None:
        """Forget everything; the next accepted sample starts the filter afresh."""
        self._last_stamp_ns: int | None = None  # stamp of the last accepted sample
        self._accepted = 0  # samples accepted since the last restart
        self._jumps_in_row = 0
        self._p = [0.0, 0.0, 0.0]  # position estimate, m
        self._v = [0.0, 0.0, 0.0]  # velocity estimate, m/s
        self._w = [0.0, 0.0, 0.0]  # body-rate estimate, rad/s
        self._b = [0.0, 0.0, 0.0]  # the rate loop's steady offset beyond the command, rad/s
        # last accepted attitude (unit, continuous sign)
        self._quat: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0)
        # filtered attitude (the rate filter's angle state)
        self._att: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0)
        # Covariance of (p, v) per axis; identical on every axis, so three scalars suffice.
        self._p11 = self._p12 = self._p22 = 0.0
        # same for (attitude error, rate, rate offset) per body axis: the upper triangle
        self._a = [0.0] * 6  # a11, a12, a13, a22, a23, a33

    def set_rate_command(
        self, stamp_ns: int, body_rate_radps: Sequence[float] | np.ndarray
    ) -> None:
        """The body rates (3,) rad/s FLU commanded at ``stamp_ns`` (the clock of the mocap
        stamps); used by the rate prediction until ``command_timeout_s`` after it. A
        non-finite command is ignored (counted)."""
        rates = tuple(float(v) for v in body_rate_radps)
        if len(rates) != 3 or not all(map(math.isfinite, rates)):
            self.counters.count(COMMAND_NOT_USABLE)
            return
        self._command = (int(stamp_ns), rates)

    @property
    def ready(self) -> bool:
        """True once enough samples were accepted since the last restart."""
        return self._accepted >= self.config.warmup_samples

    def update(
        self,
        stamp_ns: int,
        position_m: Sequence[float] | np.ndarray,
        quaternion_wxyz: Sequence[float] | np.ndarray,
    ) -> PoseEstimate | None:
        """Fold in one mocap sample: position (3,) m and quaternion (4,) w x y z.

        Returns the estimate at ``stamp_ns``, or None when the sample was rejected or the
        filter is still warming up.
        """
        px, py, pz = np.asarray(position_m, dtype=float).reshape(3).tolist()
        qw, qx, qy, qz = np.asarray(quaternion_wxyz, dtype=float).reshape(4).tolist()
        reason = self._check(stamp_ns, (px, py, pz), (qw, qx, qy, qz))
        if reason is not None:
            self.counters.count(reason)
            return None
        norm = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
        quat = (qw / norm, qx / norm, qy / norm, qz / norm)
        dt_s = None if self._last_stamp_ns is None else (stamp_ns - self._last_stamp_ns) / NS_PER_S
        if dt_s is None or self._accepted == 0:
            self._restart((px, py, pz), quat)
        else:
            self._correct(dt_s, (px, py, pz))
            self._correct_attitude(dt_s, quat, self._fresh_command(stamp_ns))
        self._last_stamp_ns = stamp_ns
        self._accepted += 1
        return self._estimate(stamp_ns) if self.ready else None

    def _check(
        self, stamp_ns: int, pos: tuple[float, float, float], quat: tuple[float, ...]
    ) -> str | None:
        """Reason to reject the sample, or None; restarts the filter after a gap."""
        if not all(map(math.isfinite, (*pos, *quat))):
            return REJECT_NON_FINITE
        norm = math.hypot(*quat)
        if abs(norm - 1.0) > self.config.quat_norm_tol:
            return REJECT_NON_UNIT_QUAT
        if self._last_stamp_ns is None:
            return None
        dt_ns = stamp_ns - self._last_stamp_ns
        if dt_ns == 0:
            return REJECT_DUPLICATE
        if dt_ns < 0:
            return REJECT_OUT_OF_ORDER
        if dt_ns > self.config.gap_reset_s * NS_PER_S:
            self.counters.count(RESET_GAP)
            self._accepted = 0
            return None
        dt_s = dt_ns / NS_PER_S
        offset = math.dist(pos, [p + v * dt_s for p, v in zip(self._p, self._v, strict=True)])
        if offset > self.config.position_jump_m:
            self._jumps_in_row += 1
            if self._jumps_in_row < self.config.max_consecutive_jumps:
                return REJECT_JUMP
            self.counters.count(RESET_JUMPS)
            self._accepted = 0
        self._jumps_in_row = 0
        return None

    def _restart(self, pos: tuple[float, float, float], quat: tuple[float, ...]) -> None:
        """Start from one sample: position measured, velocity and rates unknown (zero)."""
        self._p = list(pos)
        self._v = [0.0, 0.0, 0.0]
        self._w = [0.0, 0.0, 0.0]
        self._b = [0.0, 0.0, 0.0]
        self._quat = quat if quat[0] >= 0.0 else tuple(-v for v in quat)
        self._att = self._quat
        self._jumps_in_row = 0
        self._p11, self._p12, self._p22 = self._r, 0.0, self.config.initial_velocity_std_mps**2
        rate_var = self.config.initial_rate_std_radps**2
        offset_var = self.config.initial_rate_offset_std_radps**2
        self._a = [self._r_att, 0.0, 0.0, rate_var, 0.0, offset_var]

    def _correct(self, dt_s: float, pos: tuple[float, float, float]) -> None:
        """Kalman predict over ``dt_s`` (constant velocity, white acceleration) and update."""
        q = self._q
        p11 = self._p11 + dt_s * (2.0 * self._p12 + dt_s * self._p22) + q * dt_s**3 / 3.0
        p12 = self._p12 + dt_s * self._p22 + q * dt_s**2 / 2.0
        p22 = self._p22 + q * dt_s
        s = p11 + self._r
        k1, k2 = p11 / s, p12 / s
        for i in range(3):
            predicted = self._p[i] + self._v[i] * dt_s
            innovation = pos[i] - predicted
            self._p[i] = predicted + k1 * innovation
            self._v[i] += k2 * innovation
        self._p11, self._p12, self._p22 = (1.0 - k1) * p11, (1.0 - k1) * p12, p22 - k2 * p12

    def _fresh_command(self, stamp_ns: int) -> tuple[float, ...] | None:
        """The rate command in force at ``stamp_ns``, or None (none yet, or too old)."""
        if self._command is None:
            return None
        age_ns = stamp_ns - self._command[0]
        return self._command[1] if age_ns <= self.config.command_timeout_s * NS_PER_S else None

    def _correct_attitude(
        self, dt_s: float, quat: tuple[float, ...], command: tuple[float, ...] | None
    ) -> None:
        """Error-state Kalman step of (attitude, body rate, rate offset): predict over ``dt_s``
        (constant rate, or the first-order rate loop towards ``command`` plus the offset),
        correct with ``quat``."""
        if command is None:
            # without a command the offset has nothing to act on: it is kept as it is
            decay, gain, q, q_offset = 1.0, 0.0, self._q_free, 0.0
            w_pred = self._w
        else:
            gain = 1.0 - math.exp(-dt_s / self.rate_time_constant_s)
            decay, q, q_offset = 1.0 - gain, self._q_cmd, self._q_offset
            w_pred = [
                w + gain * (c + b - w) for w, c, b in zip(self._w, command, self._b, strict=True)
            ]
        half_dt = 0.5 * dt_s
        predicted = quat_mul(
            self._att, quat_exp(*(half_dt * (a + b) for a, b in zip(self._w, w_pred, strict=True)))
        )
        a11, a12, a13, a22, a23, a33 = self._predicted_covariance(dt_s, decay, gain, q, q_offset)
        s = a11 + self._r_att
        k1, k2, k3 = a11 / s, a12 / s, a13 / s
        pw, px, py, pz = predicted
        mw, mx, my, mz = quat
        if pw * mw + px * mx + py * my + pz * mz < 0.0:  # same hemisphere as the prediction
            mw, mx, my, mz = -mw, -mx, -my, -mz
        # conj(predicted) * measured: the innovation rotation, in the predicted body frame.
        innovation = quat_log(
            pw * mw + px * mx + py * my + pz * mz,
            pw * mx - px * mw - py * mz + pz * my,
            pw * my + px * mz - py * mw - pz * mx,
            pw * mz - px * my + py * mx - pz * mw,
        )
        self._att = quat_mul(predicted, quat_exp(*(k1 * e for e in innovation)))
        self._w = [w + k2 * e for w, e in zip(w_pred, innovation, strict=True)]
        self._b = [b + k3 * e for b, e in zip(self._b, innovation, strict=True)]
        self._a = [
            a11 - k1 * a11,
            a12 - k1 * a12,
            a13 - k1 * a13,
            a22 - k2 * a12,
            a23 - k2 * a13,
            a33 - k3 * a13,
        ]
        if sum(a * b for a, b in zip(quat, self._quat, strict=True)) < 0.0:
            quat = tuple(-v for v in quat)  # the output keeps a continuous sign
        self._quat = quat

    def _predicted_covariance(
        self, dt_s: float, decay: float, gain: float, q: float, q_offset: float
    ) -> tuple[float, float, float, float, float, float]:
        """F A F^T + Q of the (angle, rate, offset) covariance, upper triangle: the angle
        integrates the mean of the old and new rate, the new rate is ``decay`` times the old
        plus ``gain`` times the offset, the offset walks with ``q_offset``; ``q`` is white
        angular acceleration."""
        a11, a12, a13, a22, a23, a33 = self._a
        f12, f13 = 0.5 * dt_s * (1.0 + decay), 0.5 * dt_s * gain  # angle row
        # rows of F A: angle, rate, offset
        r1 = (a11 + f12 * a12 + f13 * a13, a12 + f12 * a22 + f13 * a23, a13 + f12 * a23 + f13 * a33)
        r2 = (decay * a12 + gain * a13, decay * a22 + gain * a23, decay * a23 + gain * a33)
        return (
            r1[0] + f12 * r1[1] + f13 * r1[2] + q * dt_s**3 / 3.0,
            decay * r1[1] + gain * r1[2] + q * dt_s**2 / 2.0,
            r1[2],
            decay * r2[1] + gain * r2[2] + q * dt_s,
            r2[2],
            a33 + q_offset * dt_s,
        )

    def _estimate(self, stamp_ns: int) -> PoseEstimate:
        return PoseEstimate(
            stamp_ns=stamp_ns,
            position_m=np.array(self._p),
            quaternion_wxyz=np.array(self._quat),
            velocity_mps=np.array(self._v),
            body_rate_radps=np.array(self._w),
        )


def quat_log(w: float, x: float, y: float, z: float) -> tuple[float, float, float]:
    """Rotation vector (3 floats, rad) of the unit quaternion (w, x, y, z), w >= 0.

    Scalar code on purpose: transforms3d's ``quat2axangle`` costs ~30 us per call, more than
    the pose filter's whole per-sample budget.
    """
    sin_half = math.sqrt(x * x + y * y + z * z)
    if sin_half < 1e-9:  # small-angle limit of angle / sin(angle / 2)
        return 2.0 * x, 2.0 * y, 2.0 * z
    scale = 2.0 * math.atan2(sin_half, w) / sin_half
    return scale * x, scale * y, scale * z


def quat_mul(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """Hamilton product ``a * b`` of two quaternions (w, x, y, z), renormalised (the filter
    composes thousands of them). Scalar code for the same reason as :func:`quat_log`."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    w = aw * bw - ax * bx - ay * by - az * bz
    x = aw * bx + ax * bw + ay * bz - az * by
    y = aw * by - ax * bz + ay * bw + az * bx
    z = aw * bz + ax * by - ay * bx + az * bw
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    return w / norm, x / norm, y / norm, z / norm


def quat_exp(x: float, y: float, z: float) -> tuple[float, float, float, float]:
    """Unit quaternion (w, x, y, z) of the rotation vector (x, y, z) rad."""
    angle = math.sqrt(x * x + y * y + z * z)
    if angle < 1e-9:
        return 1.0, 0.5 * x, 0.5 * y, 0.5 * z
    scale = math.sin(0.5 * angle) / angle
    return math.cos(0.5 * angle), scale * x, scale * y, scale * z
