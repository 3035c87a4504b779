"""PoseFilter: estimation accuracy on a noisy synthetic flight, rejection of each bad input."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from transforms3d.quaternions import axangle2quat, qmult
from vnd_flight.pose_filter import (
    COMMAND_NOT_USABLE,
    REJECT_DUPLICATE,
    REJECT_JUMP,
    REJECT_NON_FINITE,
    REJECT_NON_UNIT_QUAT,
    REJECT_OUT_OF_ORDER,
    RESET_GAP,
    RESET_JUMPS,
    PoseFilter,
    PoseFilterConfig,
    quat_exp,
    quat_mul,
)

NS = 1_000_000_000
LEVEL = np.array([1.0, 0.0, 0.0, 0.0])
ATTITUDE_NOISE_RAD = math.radians(0.1)  # of the synthetic mocap stream


def truth(t_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Figure-eight with yaw and roll motion: position, quaternion, velocity, body rates."""
    w = 2.0 * math.pi / 4.0
    pos = np.array([math.sin(w * t_s), 0.5 * math.sin(2 * w * t_s), 1.0 + 0.2 * math.sin(w * t_s)])
    vel = w * np.array([math.cos(w * t_s), math.cos(2 * w * t_s), 0.2 * math.cos(w * t_s)])
    yaw, yaw_rate = 1.5 * math.sin(1.3 * t_s), 1.5 * 1.3 * math.cos(1.3 * t_s)
    roll, roll_rate = 0.4 * math.sin(2.0 * t_s), 0.8 * math.cos(2.0 * t_s)
    quat = qmult(axangle2quat([0, 0, 1], yaw), axangle2quat([1, 0, 0], roll))
    # q = Rz(yaw) Rx(roll): omega_body = (roll', sin(roll) yaw', cos(roll) yaw').
    rates = np.array([roll_rate, math.sin(roll) * yaw_rate, math.cos(roll) * yaw_rate])
    return pos, quat, vel, rates


def fly(rate_hz: float, duration_s: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Feed a noisy mocap stream; return (velocity errors (N, 3), rate errors (N, 3))."""
    rng = np.random.default_rng(seed)
    # This flight turns gently (angular accelerations below 3 rad/s^2); the filter is told so.
    filt = PoseFilter(
        PoseFilterConfig(attitude_noise_rad=ATTITUDE_NOISE_RAD, angular_accel_noise_radps2=3.0)
    )
    vel_err, rate_err = [], []
    for k in range(int(duration_s * rate_hz)):
        t_s = k / rate_hz
        pos, quat, vel, rates = truth(t_s)
        noise_rot = axangle2quat(rng.normal(size=3), ATTITUDE_NOISE_RAD * rng.normal())
        est = filt.update(round(t_s * NS), pos + rng.normal(0.0, 0.001, 3), qmult(quat, noise_rot))
        if est is not None and t_s > 0.5:  # skip the start-up transient
            vel_err.append(est.velocity_mps - vel)
            rate_err.append(est.body_rate_radps - rates)
            sign = 1.0 if np.dot(est.quaternion_wxyz, quat) >= 0 else -1.0
            assert np.allclose(sign * est.quaternion_wxyz, quat, atol=0.01)
    assert filt.counters.total() == 0
    return np.array(vel_err), np.array(rate_err)


@pytest.mark.parametrize("rate_hz", [100.0, 360.0])
def test_velocity_and_rates_match_truth_on_noisy_stream(rate_hz: float) -> None:
    vel_err, rate_err = fly(rate_hz, duration_s=8.0)
    vel_rms = np.sqrt(np.mean(vel_err**2, axis=0))
    rate_rms = np.sqrt(np.mean(rate_err**2, axis=0))
    assert np.all(vel_rms < 0.09), vel_rms
    assert np.all(rate_rms < 0.1), rate_rms


def test_estimate_as_state_layout() -> None:
    filt = PoseFilter()
    for k in range(3):
        est = filt.update(k * 10_000_000, [1.0, 2.0, 3.0], LEVEL)
    state = est.as_state()
    assert state.shape == (13,)
    assert np.allclose(state[:3], [1, 2, 3], atol=1e-6)
    assert np.allclose(state[3:7], LEVEL)
    assert np.allclose(state[7:], 0.0, atol=1e-6)


def warm_filter() -> PoseFilter:
    filt = PoseFilter()
    for k in range(5):
        assert (filt.update(k * 10_000_000, [0.0, 0.0, 1.0], LEVEL) is None) == (k < 2)
    return filt


@pytest.mark.parametrize(
    ("stamp_ns", "position", "quat", "reason"),
    [
        (50_000_000, [0.0, 0.0, 1.0], LEVEL, REJECT_NON_FINITE),  # filled below
        (50_000_000, [0.0, 0.0, 1.0], [0.9, 0.0, 0.0, 0.0], REJECT_NON_UNIT_QUAT),
        (40_000_000, [0.0, 0.0, 1.0], LEVEL, REJECT_DUPLICATE),
        (30_000_000, [0.0, 0.0, 1.0], LEVEL, REJECT_OUT_OF_ORDER),
        (50_000_000, [0.5, 0.0, 1.0], LEVEL, REJECT_JUMP),
    ],
)
def test_each_bad_input_is_rejected_and_counted(stamp_ns, position, quat, reason) -> None:
    filt = warm_filter()
    if reason == REJECT_NON_FINITE:
        for bad_pos, bad_quat in (([math.nan, 0, 1], LEVEL), ([0, 0, 1], [1, math.inf, 0, 0])):
            assert filt.update(stamp_ns, bad_pos, bad_quat) is None
        assert filt.counters.totals == {REJECT_NON_FINITE: 2}
    else:
        assert filt.update(stamp_ns, position, quat) is None
        assert filt.counters.totals == {reason: 1}
    # The filter carries on with the next good sample and the new counts drain once.
    assert filt.update(60_000_000, [0.0, 0.0, 1.0], LEVEL) is not None
    assert sum(filt.counters.drain_new().values()) >= 1
    assert filt.counters.drain_new() == {}


def test_long_gap_restarts_and_warms_up_again() -> None:
    filt = warm_filter()
    t0 = 40_000_000 + 500_000_000
    assert filt.update(t0, [2.0, 0.0, 1.0], LEVEL) is None  # restart: 1st sample
    assert filt.counters.totals == {RESET_GAP: 1}
    assert filt.update(t0 + 10_000_000, [2.0, 0.0, 1.0], LEVEL) is None
    est = filt.update(t0 + 20_000_000, [2.0, 0.0, 1.0], LEVEL)
    assert est is not None
    assert np.allclose(est.position_m, [2.0, 0.0, 1.0], atol=1e-6)
    assert np.allclose(est.velocity_mps, 0.0, atol=1e-6)  # no velocity from the jump across


def test_persistent_jump_restarts_at_the_new_position() -> None:
    config = PoseFilterConfig(max_consecutive_jumps=3)
    filt = PoseFilter(config)
    for k in range(5):
        filt.update(k * 10_000_000, [0.0, 0.0, 1.0], LEVEL)
    stamps = [(5 + k) * 10_000_000 for k in range(6)]
    results = [filt.update(s, [1.0, 0.0, 1.0], LEVEL) for s in stamps]
    assert filt.counters.totals == {REJECT_JUMP: 2, RESET_JUMPS: 1}
    assert results[:4] == [None] * 4  # two rejected, then restart + warm-up
    assert np.allclose(results[-1].position_m, [1.0, 0.0, 1.0], atol=1e-6)


def test_quaternion_sign_flip_is_not_a_rotation() -> None:
    filt = warm_filter()
    est = filt.update(50_000_000, [0.0, 0.0, 1.0], -LEVEL)
    assert np.allclose(est.body_rate_radps, 0.0)
    assert np.allclose(est.quaternion_wxyz, LEVEL)  # sign kept continuous


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="gap_reset_s"):
        PoseFilter(PoseFilterConfig(gap_reset_s=0.0))


def test_update_is_fast() -> None:
    filt = PoseFilter()
    positions = np.random.default_rng(1).normal(0.0, 0.001, (1000, 3))
    batches_us = []
    for batch in range(5):
        # CPU time of this process: the machine is shared, wall time measures the others too.
        start = time.process_time()
        for k, pos in enumerate(positions):
            filt.update((batch * len(positions) + k) * 5_000_000, pos, LEVEL)
        batches_us.append((time.process_time() - start) / len(positions) * 1e6)
    assert min(batches_us) < 50.0, batches_us


def rate_loop_flight(
    use_commands: bool,
    duration_s: float = 6.0,
    seed: int = 0,
    offset_radps: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> tuple[np.ndarray, PoseFilter]:
    """A vehicle whose body rates follow random rate commands through a 60 ms first-order
    loop, settling ``offset_radps`` beyond them (a torque under a proportional rate loop), seen
    by 100 Hz mocap with 4 mrad attitude noise; the rate errors (N, 3) after 0.5 s."""
    rng = np.random.default_rng(seed)
    tau_s, dt_s = 0.06, 0.01
    filt = PoseFilter(rate_time_constant_s=tau_s)
    quat, rates, command = LEVEL.copy(), np.zeros(3), np.zeros(3)
    errors = []
    for k in range(int(duration_s / dt_s)):
        stamp = k * 10_000_000
        if k % 2 == 0:  # the controller runs at 50 Hz; a new command every 0.2 s
            if k % 20 == 0:
                command = rng.uniform(-3.0, 3.0, 3)
            if use_commands:
                filt.set_rate_command(stamp, command)
        noise = axangle2quat(rng.normal(size=3), 0.004 * rng.normal())
        est = filt.update(stamp, [0.0, 0.0, 1.0], qmult(quat, noise))
        if est is not None and k * dt_s > 0.5:
            errors.append(est.body_rate_radps - rates)
        settled = command + np.asarray(offset_radps)
        new_rates = settled + (rates - settled) * math.exp(-dt_s / tau_s)
        mean = 0.5 * (rates + new_rates)
        quat = qmult(quat, axangle2quat(mean, np.linalg.norm(mean) * dt_s))
        rates = new_rates
    return np.array(errors), filt


def test_rate_commands_make_the_rate_estimate_several_times_cleaner() -> None:
    blind, _ = rate_loop_flight(use_commands=False)
    informed, filt = rate_loop_flight(use_commands=True)
    blind_rms, informed_rms = np.sqrt(np.mean(blind**2)), np.sqrt(np.mean(informed**2))
    assert informed_rms < 0.25 and informed_rms < 0.6 * blind_rms, (informed_rms, blind_rms)
    assert filt.counters.total() == 0


def test_a_torques_steady_rate_offset_is_estimated_without_bias() -> None:
    """A weak rotor or an offset payload leaves the vehicle turning beyond its rate commands;
    the filter estimates that offset, so the rates it reports are not pulled towards the
    commands (the observer downstream compensates what the rates show), and they are about
    as clean as without an offset."""
    offset = (1.0, -0.6, 0.3)
    errors, _ = rate_loop_flight(use_commands=True, duration_s=20.0, offset_radps=offset)
    settled = errors[len(errors) // 2 :]
    np.testing.assert_allclose(settled.mean(axis=0), 0.0, atol=0.02)
    plain, _ = rate_loop_flight(use_commands=True, duration_s=20.0)
    assert np.sqrt(np.mean(settled**2)) < 1.3 * np.sqrt(np.mean(plain**2))


def test_stale_or_broken_rate_commands_are_not_used() -> None:
    filt = warm_filter()
    filt.set_rate_command(0, [float("nan"), 0.0, 0.0])
    assert filt.counters.totals == {COMMAND_NOT_USABLE: 1}
    filt.set_rate_command(0, [5.0, 0.0, 0.0])  # then 0.5 s of a vehicle at rest
    for k in range(3, 53):
        est = filt.update(k * 10_000_000, [0.0, 0.0, 1.0], LEVEL)
    assert np.allclose(est.body_rate_radps, 0.0, atol=0.05)


def test_scalar_quaternion_helpers_match_transforms3d() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = qmult(axangle2quat(rng.normal(size=3), rng.normal()), LEVEL)
        b = axangle2quat(rng.normal(size=3), rng.normal())
        assert np.allclose(quat_mul(a, b), qmult(a, b))
        rotvec = rng.normal(size=3)
        assert np.allclose(quat_exp(*rotvec), axangle2quat(rotvec, np.linalg.norm(rotvec)))
    assert np.allclose(quat_exp(0.0, 0.0, 0.0), LEVEL)
