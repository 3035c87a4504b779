"""The safety envelope: odometry jump and frozen-source checks, the policy's limits, crash
detection, and how the safety filter acts on them (suspension, mode changes with reasons)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from vnd_core.vehicle import load_vehicle
from vnd_core.wire import Mode
from vnd_flight.envelope import (
    FAULT_BODY_RATE,
    FAULT_GEOFENCE,
    FAULT_ODOM_FROZEN,
    FAULT_ODOM_JUMP,
    FAULT_TILT,
    FAULT_TRACKING,
    CrashDetector,
    EnvelopeConfig,
    OdometryGuard,
    PolicyEnvelope,
)
from vnd_flight.safety import POLICY_SUSPENDED, SafetyFilter
from vnd_flight.safety_config import SafetyConfig

VEHICLE = load_vehicle("agile")
HOVER = np.array([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0])
TICK_NS = 20_000_000
_NOISE = itertools.count()


def state(position=(0.0, 0.0, 1.0), tilt_deg=0.0, velocity=(0.0, 0.0, 0.0), rates=(0, 0, 0)):
    """A state rolled by ``tilt_deg``, with a micrometre of mocap noise on the height."""
    s = np.zeros(13)
    s[:3] = position
    s[2] += 1e-6 * math.sin(next(_NOISE))
    half = math.radians(tilt_deg) / 2
    s[3:7] = (math.cos(half), math.sin(half), 0.0, 0.0)
    s[7:10] = velocity
    s[10:13] = rates
    return s


def envelope(**overrides) -> PolicyEnvelope:
    config = EnvelopeConfig(**overrides)
    return PolicyEnvelope(config, (-3, -3, -0.2), (3, 3, 3))


def test_guard_rejects_a_jump_but_not_motion_the_last_velocity_explains() -> None:
    guard = OdometryGuard(EnvelopeConfig())
    last = state(velocity=(2.0, 0.0, 0.0))
    moved = state(position=(0.04, 0.0, 1.0))  # 2 m/s for 20 ms
    assert guard.check(moved, TICK_NS, last, 0, resting=False) is None
    jumped = state(position=(1.04, 0.0, 1.0))
    verdict = guard.check(jumped, TICK_NS, last, 0, resting=False)
    assert verdict.reason == FAULT_ODOM_JUMP and "1.00 m" in verdict.detail
    # after a long gap the prediction is uncertain: the same offset passes
    assert guard.check(jumped, 400 * 1_000_000, last, 0, resting=False) is None


def test_guard_calls_a_bit_exact_repeated_pose_frozen_unless_resting() -> None:
    guard = OdometryGuard(EnvelopeConfig(odom_frozen_samples=3))
    pose = state()
    verdicts = [guard.check(pose.copy(), k * TICK_NS, pose, 0, resting=False) for k in (1, 2, 3)]
    assert verdicts[:2] == [None, None] and verdicts[2].reason == FAULT_ODOM_FROZEN
    guard.reset()
    assert all(guard.check(pose.copy(), k, pose, 0, resting=True) is None for k in range(1, 6))


def test_policy_limits_name_the_figure_that_failed() -> None:
    env = envelope()
    assert env.check(state(tilt_deg=10), HOVER, np.array([0, 0, 1.0])) is None
    assert env.check(state(tilt_deg=75), HOVER, None) is None  # a transient ...
    assert env.check(state(tilt_deg=75), HOVER, None) is None
    tilt = env.check(state(tilt_deg=75), HOVER, None)  # ... until it lasts
    assert tilt.reason == FAULT_TILT and "75 deg > 69 deg for 3 ticks" in tilt.detail
    rate = env.check(state(rates=(15.5, 0, 0)), HOVER, None)
    assert rate.reason == FAULT_BODY_RATE and "15.5 rad/s" in rate.detail
    commanded = env.check(state(), np.array([10.0, 8.0, -8.0, 0.0]), None)
    assert commanded.reason == FAULT_BODY_RATE and commanded.detail.startswith("commanded")


def test_tracking_error_must_last_before_it_counts() -> None:
    env = envelope(tracking_error_ticks=3)
    far = np.array([1.5, 0.0, 1.0])
    results = [env.check(state(), HOVER, far) for _ in range(3)]
    assert results[:2] == [None, None] and results[2].reason == FAULT_TRACKING
    assert env.check(state(), HOVER, np.array([0.1, 0, 1])) is None  # back on track: reset
    assert env.check(state(), HOVER, far) is None


def test_geofence_sees_the_stopping_point() -> None:
    env = envelope(brake_accel_mps2=4.0)
    assert env.outside_fence(state(position=(2.0, 0, 1), velocity=(1.0, 0, 0))) is None
    fast = env.outside_fence(state(position=(2.0, 0, 1), velocity=(3.5, 0, 0)))
    assert fast.reason == FAULT_GEOFENCE and "stopping point" in fast.detail


def test_crash_detector_needs_the_tilt_to_last() -> None:
    detector = CrashDetector(EnvelopeConfig(crash_tilt_rad=1.3, crash_time_s=0.3))
    flipped = state(tilt_deg=90)
    assert detector.check(0, flipped) is None
    assert detector.check(200_000_000, flipped) is None
    assert detector.check(300_000_000, flipped).reason == "crash_detected"
    assert detector.check(320_000_000, state()) is None  # level again: a new stretch


def _flying(config: SafetyConfig | None = None) -> tuple[SafetyFilter, int]:
    safety = SafetyFilter(VEHICLE, config)
    for k in range(5):
        assert safety.step(k * TICK_NS, state(), k * TICK_NS, HOVER).mode == Mode.POLICY
    return safety, 5


def test_an_absurd_policy_command_suspends_the_policy_until_a_new_bundle() -> None:
    safety, k = _flying(SafetyConfig(recovery_s=0.1))
    absurd = np.array([30.0, 8.0, -8.0, 3.0])  # what a first layer x 1e6 gives, saturated
    out = safety.step(k * TICK_NS, state(), k * TICK_NS, absurd)
    assert out.mode == Mode.FALLBACK_HOLD  # on this very tick: the absurd command never flies
    assert np.all(np.abs(out.action[1:]) < 1.0) and out.action[0] < 10.0
    assert FAULT_BODY_RATE in out.reasons and POLICY_SUSPENDED in out.reasons
    # the policy behaves again, faults clear: still suspended, never back to POLICY
    for j in range(k + 1, k + 40):
        out = safety.step(j * TICK_NS, state(), j * TICK_NS, HOVER)
    assert out.mode == Mode.FALLBACK_HOLD and out.reasons == (POLICY_SUSPENDED,)
    safety.resume_policy()  # a different bundle became active
    for j in range(k + 40, k + 50):
        out = safety.step(j * TICK_NS, state(), j * TICK_NS, HOVER)
    assert out.mode == Mode.POLICY
    changes = safety.pop_mode_changes()
    assert [(c.previous, c.mode) for c in changes] == [
        (Mode.IDLE, Mode.POLICY),
        (Mode.POLICY, Mode.FALLBACK_HOLD),
        (Mode.FALLBACK_HOLD, Mode.POLICY),
    ]
    assert "commanded body rate 11.3 rad/s > 10.5 rad/s" in changes[1].reason
    assert safety.pop_mode_changes() == []


def test_an_odometry_fault_does_not_suspend_the_policy() -> None:
    safety, k = _flying(SafetyConfig(recovery_s=0.1))
    out = safety.step(k * TICK_NS, state(position=(1.0, 0, 1)), k * TICK_NS, HOVER)
    assert out.mode == Mode.FALLBACK_HOLD and FAULT_ODOM_JUMP in out.reasons
    assert safety.suspended is None
    for j in range(k + 1, k + 20):
        out = safety.step(j * TICK_NS, state(), j * TICK_NS, HOVER)
    assert out.mode == Mode.POLICY


def test_a_flipped_vehicle_is_disarmed_and_the_mode_says_why() -> None:
    safety, k = _flying()
    for j in range(k, k + 30):
        out = safety.step(j * TICK_NS, state(tilt_deg=100), j * TICK_NS, HOVER)
    assert out.mode == Mode.DISARMED and not out.action.any()
    last = safety.pop_mode_changes()[-1]
    assert last.mode == Mode.DISARMED and last.reason.startswith("crash_detected (tilt 100 deg")


def test_invalid_limits_are_named() -> None:
    with pytest.raises(ValueError, match="max_tilt_rad"):
        EnvelopeConfig(max_tilt_rad=0.0).validate()
    with pytest.raises(ValueError, match="tracking_error_ticks"):
        EnvelopeConfig(tracking_error_ticks=0).validate()
