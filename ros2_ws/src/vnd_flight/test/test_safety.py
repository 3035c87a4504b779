"""SafetyFilter: watchdog, NaN guards, clamps and slew limits, geofence, mode machine."""

from __future__ import annotations

import itertools
import math
import re
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from vnd_core.config_io import repo_root
from vnd_core.counters import ReasonCounter
from vnd_core.dynamics import NominalModel
from vnd_core.vehicle import load_vehicle
from vnd_core.wire import Mode
from vnd_flight.envelope import EnvelopeConfig
from vnd_flight.safety import (
    EVENT_BLIND_DISARM,
    EVENT_TOUCHDOWN,
    FAULT_ACTION_MISSING,
    FAULT_ACTION_NON_FINITE,
    FAULT_GEOFENCE,
    FAULT_ODOM_MISSING,
    FAULT_ODOM_NON_FINITE,
    FAULT_ODOM_STALE,
    LIMIT_SLEW,
    LIMIT_THRUST,
    SafetyFilter,
)
from vnd_flight.safety_config import SafetyConfig
from vnd_flight.stats import (
    LatencyWindow,
    RateEstimator,
    ThreadSchedStat,
    TickMonitor,
    late_tick_breakdown,
)

TICK_NS = 20_000_000
VEHICLE = load_vehicle("agile")
HOVER = np.array([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0])


_SAMPLES = itertools.count()


def hover_state(position=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Level and still at ``position``, with a micrometre of motion-capture noise: a source that
    repeats a pose to the last bit is a frozen one."""
    state = np.zeros(13)
    state[:3] = position
    state[2] += 1e-6 * math.sin(next(_SAMPLES))
    state[3] = 1.0
    return state


def flying(
    config: SafetyConfig | None = None, ticks: int = 10, position=(0.0, 0.0, 1.0)
) -> SafetyFilter:
    """A filter that has flown ``ticks`` clean POLICY ticks at hover (t = 0 .. ticks-1) at
    ``position``."""
    safety = SafetyFilter(VEHICLE, config)
    for k in range(ticks):
        out = safety.step(k * TICK_NS, hover_state(position), k * TICK_NS, HOVER)
        assert out.mode == Mode.POLICY
    assert np.allclose(out.action, HOVER) and out.reasons == ()
    return safety


def test_mode_numbers_match_the_message_definition() -> None:
    msg = (repo_root() / "ros2_ws/src/vnd_msgs/msg/CtbrCommand.msg").read_text()
    declared = {name: int(v) for name, v in re.findall(r"uint8 MODE_(\w+)=(\d+)", msg)}
    assert declared == {mode.name: mode.value for mode in Mode}


def test_idle_until_odometry_and_action_then_policy_takes_over_from_hover() -> None:
    safety = SafetyFilter(VEHICLE)
    out = safety.step(0, None, None, HOVER)
    assert out.mode == Mode.IDLE and FAULT_ODOM_MISSING in out.reasons
    assert np.array_equal(out.action, np.zeros(4))
    out = safety.step(TICK_NS, hover_state(), TICK_NS, None)
    assert out.mode == Mode.IDLE and out.reasons == (FAULT_ACTION_MISSING,)
    low = HOVER.copy()
    low[0] = 0.0
    out = safety.step(2 * TICK_NS, hover_state(), 2 * TICK_NS, low)
    assert out.mode == Mode.POLICY
    # the slew starts from hover thrust (a hand-over in flight), not from motors off
    hover_n = VEHICLE.hover_thrust_n
    assert out.action[0] == pytest.approx(hover_n - safety.config.max_thrust_step_n)
    assert LIMIT_SLEW in out.reasons


def test_only_a_step_past_the_limit_counts_as_slew_limited() -> None:
    safety = SafetyFilter(VEHICLE)
    action = HOVER + np.array([0.1, 0.3, -0.7, 0.1])
    safety.step(0, hover_state(), 0, action)
    rng = np.random.default_rng(0)
    # small float64 steps of rates around zero (as the policy gives them): base + (out - base)
    # is not out for about 12 % of such values per component
    for k in range(1, 100):
        action = HOVER + 0.5 * (action - HOVER) + rng.normal(0.0, 0.4, 4) * [1.0, 1.0, 1.0, 0.1]
        out = safety.step(k * TICK_NS, hover_state(), k * TICK_NS, action)
        assert LIMIT_SLEW not in out.reasons and np.array_equal(out.action, action)
    jump = action + np.array([0.0, 5.0, 0.2, 0.0])  # one body rate past the 3 rad/s step
    out = safety.step(100 * TICK_NS, hover_state(), 100 * TICK_NS, jump)
    assert LIMIT_SLEW in out.reasons
    step = safety.config.max_rate_step_radps
    np.testing.assert_allclose(out.action, action + np.array([0.0, step, 0.2, 0.0]), atol=1e-6)


def test_stale_odometry_switches_to_fallback_within_one_tick_then_lands() -> None:
    config = SafetyConfig(hold_timeout_s=1.0, blind_land_margin_s=1.0)
    safety = flying(config)
    last_stamp = 9 * TICK_NS
    # Odometry stops. 100 ms old is still fresh, the next tick (120 ms) is stale.
    for k in range(10, 15):
        assert safety.step(k * TICK_NS, hover_state(), last_stamp, HOVER).mode == Mode.POLICY
    out = safety.step(15 * TICK_NS, hover_state(), last_stamp, HOVER)
    assert out.mode == Mode.FALLBACK_HOLD and FAULT_ODOM_STALE in out.reasons
    # Blind: a level, slow descent on dead reckoning; thrust just under hover, no rates.
    modes, thrusts = [], []
    for k in range(16, 16 + round(1.5 / 0.02)):
        out = safety.step(k * TICK_NS, hover_state(), last_stamp, HOVER)
        modes.append(out.mode)
        thrusts.append(out.action[0])
        assert np.all(np.abs(out.action[1:]) < 1e-6)
    assert 0.7 * HOVER[0] < min(thrusts) and max(thrusts) <= HOVER[0] + 1e-9
    hold_ticks = round(1.0 / 0.02)
    assert modes[: hold_ticks - 2] == [Mode.FALLBACK_HOLD] * (hold_ticks - 2)
    assert modes[-1] == Mode.FALLBACK_LAND
    # Predicted to reach the floor ~3.3 s after the loss, then 1 s margin -> disarmed.
    for k in range(16 + len(modes), 16 + len(modes) + round(4.0 / 0.02)):
        out = safety.step(k * TICK_NS, hover_state(), last_stamp, HOVER)
        if out.mode == Mode.DISARMED:
            break
    assert out.mode == Mode.DISARMED and np.array_equal(out.action, np.zeros(4))
    assert safety.counters.total(EVENT_BLIND_DISARM) == 1
    assert safety.counters.total(FAULT_ODOM_STALE) > 100


def test_nan_odometry_is_dropped_counted_and_triggers_fallback() -> None:
    safety = flying()
    bad = hover_state((0.5, 0.0, 1.0))
    bad[8] = math.nan
    out = safety.step(10 * TICK_NS, bad, 10 * TICK_NS, HOVER)
    assert out.mode == Mode.FALLBACK_HOLD and out.reasons[0] == FAULT_ODOM_NON_FINITE
    assert np.isfinite(out.action).all()
    assert np.allclose(safety.hold_setpoint.position_m, [0.0, 0.0, 1.0])  # last good odometry
    # The same message passed again is not counted twice; the last good one is 20 ms old.
    out = safety.step(11 * TICK_NS, bad, 10 * TICK_NS, HOVER)
    assert out.mode == Mode.FALLBACK_HOLD and out.reasons == ()
    assert safety.counters.total(FAULT_ODOM_NON_FINITE) == 1


@pytest.mark.parametrize(
    ("action", "fault"),
    [
        (None, FAULT_ACTION_MISSING),
        (np.array([math.nan, 0.0, 0.0, 0.0]), FAULT_ACTION_NON_FINITE),
        (np.array([7.0, math.inf, 0.0, 0.0]), FAULT_ACTION_NON_FINITE),
        (np.array([7.0, 0.0, 0.0]), FAULT_ACTION_NON_FINITE),  # wrong shape
    ],
)
def test_bad_action_falls_back_and_is_counted(action, fault) -> None:
    safety = flying()
    out = safety.step(10 * TICK_NS, hover_state(), 10 * TICK_NS, action)
    assert out.mode == Mode.FALLBACK_HOLD and out.reasons == (fault,)
    assert np.allclose(out.action, HOVER)  # holding at the hover point: hover thrust
    assert safety.counters.total(fault) == 1


def test_recovery_needs_the_fault_to_stay_clear() -> None:
    config = SafetyConfig(recovery_s=0.2)
    safety = flying(config)
    k = 10
    assert safety.step(k * TICK_NS, hover_state(), k * TICK_NS, None).mode == Mode.FALLBACK_HOLD
    modes = []
    for k in range(11, 11 + 25):
        action = None if k == 15 else HOVER  # one relapse restarts the recovery clock
        modes.append(safety.step(k * TICK_NS, hover_state(), k * TICK_NS, action).mode)
    first_policy = modes.index(Mode.POLICY)
    assert first_policy == (16 + 10) - 11  # clear from tick 16, 10 ticks (200 ms) later
    assert set(modes[first_policy:]) == {Mode.POLICY}


def test_hold_timeout_lands_and_disarms_in_closed_loop() -> None:
    torch.set_num_threads(1)
    config = SafetyConfig(hold_timeout_s=1.0, floor_z_m=0.0)
    safety = flying(config, position=(0.3, -0.2, 1.2))
    model = NominalModel(VEHICLE)
    state = torch.tensor(hover_state((0.3, -0.2, 1.2)), dtype=torch.float64)
    modes = []
    with torch.no_grad():
        for k in range(10, 10 + round(8.0 / 0.02)):
            out = safety.step(k * TICK_NS, state.numpy(), k * TICK_NS, None)  # policy dead
            modes.append(out.mode)
            if out.mode == Mode.DISARMED:
                break
            state = model(state, torch.from_numpy(out.action))
    assert modes[0] == Mode.FALLBACK_HOLD
    land_at = modes.index(Mode.FALLBACK_LAND)
    assert land_at == pytest.approx(50, abs=1)  # after hold_timeout_s
    assert modes[-1] == Mode.DISARMED and safety.counters.total(EVENT_TOUCHDOWN) == 1
    assert abs(float(state[2])) < config.touchdown_height_m
    assert np.allclose(state[:2].numpy(), [0.3, -0.2], atol=0.05)


def test_landing_is_final_even_if_faults_clear() -> None:
    config = SafetyConfig(hold_timeout_s=0.1, recovery_s=0.0)
    safety = flying(config)
    for k in range(10, 20):
        out = safety.step(k * TICK_NS, hover_state(), k * TICK_NS, None)
    assert out.mode == Mode.FALLBACK_LAND
    out = safety.step(20 * TICK_NS, hover_state(), 20 * TICK_NS, HOVER)
    assert out.mode == Mode.FALLBACK_LAND


def test_geofence_exit_holds_at_the_nearest_point_inside() -> None:
    config = SafetyConfig(
        geofence_min_m=(-1, -1, 0),
        geofence_max_m=(1, 1, 2),
        recovery_s=0.2,
        envelope=EnvelopeConfig(odom_jump_m=5.0),  # the test teleports the vehicle outside
    )
    safety = flying(config)
    outside = hover_state((1.4, 0.2, 2.5))
    out = safety.step(10 * TICK_NS, outside, 10 * TICK_NS, HOVER)
    assert out.mode == Mode.FALLBACK_HOLD and out.reasons[0] == FAULT_GEOFENCE
    assert np.allclose(safety.hold_setpoint.position_m, [0.7, 0.2, 1.7])
    # Closed loop: the fallback flies back inside, then the policy resumes after recovery.
    model = NominalModel(VEHICLE)
    state = torch.tensor(outside, dtype=torch.float64)
    with torch.no_grad():
        for k in range(10, 10 + round(4.0 / 0.02)):
            out = safety.step(k * TICK_NS, state.numpy(), k * TICK_NS, HOVER)
            if out.mode == Mode.POLICY:
                break
            state = model(state, torch.from_numpy(out.action))
    assert out.mode == Mode.POLICY
    assert np.all(np.abs(state[:2].numpy()) <= 1.0) and 0.0 <= float(state[2]) <= 2.0


def test_clamps_apply_and_are_counted() -> None:
    # The envelope would take an absurd command from the policy (its own test); the clamps
    # are the last line behind it and must hold whatever asks for the command.
    no_envelope = EnvelopeConfig(max_commanded_rate_radps=1e3)
    safety = flying(SafetyConfig(envelope=no_envelope))
    for k in range(10, 40):
        out = safety.step(k * TICK_NS, hover_state(), k * TICK_NS, np.array([1e3, 50, -50, 9]))
    rate_max = np.array(VEHICLE.body_rate_max_radps)
    assert out.mode == Mode.POLICY
    assert out.action[0] == VEHICLE.thrust_max_n
    assert np.array_equal(out.action[1:], [rate_max[0], -rate_max[1], rate_max[2]])
    assert safety.counters.total(LIMIT_THRUST) == 30


def test_disarm_and_rearm() -> None:
    safety = flying()
    safety.disarm(10 * TICK_NS)
    out = safety.step(10 * TICK_NS, hover_state(), 10 * TICK_NS, HOVER)
    assert out.mode == Mode.DISARMED and np.array_equal(out.action, np.zeros(4))
    safety.rearm()
    assert safety.step(11 * TICK_NS, hover_state(), 11 * TICK_NS, HOVER).mode == Mode.POLICY


def test_invalid_config_is_named() -> None:
    with pytest.raises(ValueError, match="geofence"):
        SafetyFilter(VEHICLE, SafetyConfig(geofence_min_m=(0, 0, 0), geofence_max_m=(0.5, 1, 1)))


finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=64)
tick_strategy = st.tuples(
    st.sampled_from(["fresh", "fresh", "fresh", "silent", "nan"]),  # odometry this tick
    st.tuples(*[st.floats(-4.0, 4.0)] * 3),  # position, partly outside the default fence
    st.one_of(st.none(), st.tuples(*[finite_or_not] * 4), st.tuples(*[st.floats(-50, 50)] * 4)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(tick_strategy, min_size=1, max_size=120))
def test_output_is_always_finite_clamped_and_slew_limited(ticks) -> None:
    config = SafetyConfig(hold_timeout_s=0.3, recovery_s=0.1)
    safety = SafetyFilter(VEHICLE, config)
    rate_max = np.array(VEHICLE.body_rate_max_radps)
    step = np.array([config.max_thrust_step_n, *[config.max_rate_step_radps] * 3])
    previous = np.zeros(4)
    stamp = None
    for k, (odom, position, action) in enumerate(ticks):
        state = hover_state(position)
        if odom == "fresh":
            stamp = k * TICK_NS
        elif odom == "nan":
            stamp, state[3] = k * TICK_NS, math.nan
        out = safety.step(k * TICK_NS, state, stamp, None if action is None else np.array(action))
        assert np.isfinite(out.action).all()
        assert VEHICLE.thrust_min_n <= out.action[0] <= VEHICLE.thrust_max_n
        assert np.all(np.abs(out.action[1:]) <= rate_max)
        if out.mode in (Mode.IDLE, Mode.DISARMED):
            assert np.array_equal(out.action, np.zeros(4))
        else:  # a take-over from motors off slews from hover
            base = previous if previous.any() else np.array([VEHICLE.hover_thrust_n, 0, 0, 0])
            assert np.all(np.abs(out.action - base) <= step + 1e-9)
        previous = out.action


def limit_reference(vehicle, config, target, previous):
    """The limiting rule in vector form: clamp to the box, then step at most the slew limit
    from the previous output (hover after motors-off) on the components past it."""
    rate_max = np.array(vehicle.body_rate_max_radps)
    low = np.array([vehicle.thrust_min_n, *(-rate_max)])
    high = np.array([vehicle.thrust_max_n, *rate_max])
    step = np.array([config.max_thrust_step_n, *[config.max_rate_step_radps] * 3])
    clamped = np.clip(target, low, high)
    base = previous if previous.any() else np.array([vehicle.hover_thrust_n, 0.0, 0.0, 0.0])
    over = np.abs(clamped - base) > step
    return np.where(over, base + np.clip(clamped - base, -step, step), clamped), over.any()


@settings(max_examples=200, deadline=None)
@given(
    st.tuples(*[st.floats(-60.0, 60.0)] * 4),
    st.one_of(st.just((0.0,) * 4), st.tuples(*[st.floats(-8.0, 8.0)] * 4)),
)
def test_scalar_limit_equals_the_vector_rule(target, previous) -> None:
    config = SafetyConfig()
    safety = SafetyFilter(VEHICLE, config)
    safety.last_output = np.clip(previous, -VEHICLE.thrust_max_n, VEHICLE.thrust_max_n)
    expected, slewed = limit_reference(VEHICLE, config, np.array(target), safety.last_output)
    out, limits = safety._limit(np.array(target))
    np.testing.assert_array_equal(out, expected)
    assert (LIMIT_SLEW in limits) == slewed


# Run-time statistics the control node reports next to the safety counters (flight/stats.py;
# kept here because the helper's file list has no test_stats.py).


def test_tick_monitor_counts_missed_ticks_from_overruns() -> None:
    monitor = TickMonitor(period_s=0.02)
    intervals_ms = [20, 21, 29, 31, 40, 61, 20]  # 31 > 1.5 periods; 40 = 1 lost; 61 = 2 lost
    now_ns = 0
    missed = [monitor.tick(now_ns)]
    for interval in intervals_ms:
        now_ns += interval * 1_000_000
        missed.append(monitor.tick(now_ns))
    assert missed == [0, 0, 0, 0, 1, 1, 2, 0]
    assert monitor.ticks == 8 and monitor.missed_ticks == 4
    assert monitor.max_interval_ns == 61_000_000
    assert monitor.last_interval_ns == 20_000_000


@pytest.mark.skipif(ThreadSchedStat().read() is None, reason="no /proc/thread-self/schedstat")
def test_thread_schedstat_counts_this_threads_cpu_time_and_not_its_sleep() -> None:
    sched = ThreadSchedStat()
    before = sched.read()
    end = time.thread_time_ns() + 30_000_000
    while time.thread_time_ns() < end:  # 30 ms on a CPU
        pass
    time.sleep(0.05)  # 50 ms off it
    after = sched.read()
    sched.close()
    assert sched.read() is None  # closed
    ran_ms = (after[0] - before[0]) / 1e6
    assert 29.0 <= ran_ms < 60.0
    assert after[1] >= before[1]  # run-queue wait never goes back


def test_late_tick_breakdown_splits_the_interval() -> None:
    split = late_tick_breakdown(43_000_000, (100_000_000, 5_000_000), (101_500_000, 20_000_000))
    assert split == {
        "interval_ms": 43.0,
        "ran_ms": 1.5,
        "waited_for_cpu_ms": 15.0,
        "off_cpu_ms": 26.5,
    }


def test_latency_window_percentiles_over_the_last_samples() -> None:
    window = LatencyWindow(window=100)
    assert math.isnan(window.p50_ms)
    for k in range(1000):  # only the last 100 (900 .. 999 us) count
        window.add_ns(k * 1000)
    assert len(window) == 100
    assert window.p50_ms == pytest.approx(0.9495)
    assert window.p99_ms == pytest.approx(0.99801)


def test_rate_estimator_over_a_sliding_window() -> None:
    rate = RateEstimator(window_s=1.0)
    assert rate.rate_hz() == 0.0
    for k in range(300):  # 100 Hz for 3 s
        rate.add(k * 10_000_000)
    assert rate.rate_hz() == pytest.approx(100.0)
    assert rate.rate_hz(now_ns=10 * 10**9) == 0.0  # silent since: the window emptied


def test_reason_counter_drains_only_what_is_new() -> None:
    counter = ReasonCounter()
    counter.count("a")
    counter.count("b", 2)
    assert counter.drain_new() == {"a": 1, "b": 2}
    counter.count("a")
    assert ReasonCounter.format(counter.drain_new()) == "a=1"
    assert counter.totals == {"a": 2, "b": 2} and counter.total() == 4
