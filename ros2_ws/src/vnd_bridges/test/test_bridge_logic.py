"""Bridge logic without middleware: thrust models, PX4 and MAVROS field values for known
commands, and the gate that stops set points and heartbeat together (injected clock)."""

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from vnd_flight.bridges.gate import CommandGate, CtbrSample, StreamMonitor, Verdict
from vnd_flight.bridges.mavros import IGNORE_ATTITUDE, MavrosBridge, ctbr_to_attitude_target
from vnd_flight.bridges.px4 import (
    Px4Bridge,
    ctbr_to_px4,
    px4_timestamp_us,
    px4_topic,
)
from vnd_flight.bridges.thrust import ThrustModel
from vnd_ros.messages import get_message

CTBR = get_message("vnd_msgs/msg/CtbrCommand")
FLYING_MODES = (CTBR.MODE_POLICY, CTBR.MODE_FALLBACK_HOLD, CTBR.MODE_FALLBACK_LAND)
PERIOD_S = 0.02  # 50 Hz control period
MAX_AGE_S = 0.03  # one period plus 10 ms margin
T0_NS = 1_700_000_000_000_000_000  # an epoch instant, like ROS time


def sample(stamp_s, thrust_n=5.0, rates=(0.1, 0.2, 0.3), mode=CTBR.MODE_POLICY):
    return CtbrSample(stamp_s=stamp_s, thrust_n=thrust_n, body_rate_flu_radps=rates, mode=mode)


def gate():
    return CommandGate(FLYING_MODES, MAX_AGE_S)


# --- thrust model ---------------------------------------------------------------------------


def test_linear_thrust_model():
    model = ThrustModel.linear(30.0)
    assert model.normalized(7.5) == pytest.approx(0.25)
    assert model.normalized(-1.0) == 0.0
    assert model.normalized(45.0) == 1.0


def test_quadratic_thrust_model_hand_values():
    model = ThrustModel(quadratic_n=20.0, linear_n=10.0)  # T(u) = 20 u^2 + 10 u
    assert model.thrust_max_n == 30.0
    assert model.normalized(10.0) == pytest.approx(0.5)  # 20 * 0.25 + 10 * 0.5
    assert model.normalized(30.0) == pytest.approx(1.0)


@given(
    st.floats(-50.0, 50.0),
    st.floats(0.0, 50.0),
    st.floats(0.0, 1.0),
)
def test_thrust_model_inverts(quadratic_n, linear_n, u):
    # Only increasing models exist (construction refuses the others: tested below).
    assume(2 * quadratic_n + linear_n >= 0 and quadratic_n + linear_n > 0.1)
    model = ThrustModel(quadratic_n, linear_n)
    assert model.thrust_n(model.normalized(model.thrust_n(u))) == pytest.approx(
        model.thrust_n(u), abs=1e-9
    )


def test_thrust_model_rejects_bad_fits():
    with pytest.raises(ValueError, match="not increasing"):
        ThrustModel(quadratic_n=-10.0, linear_n=5.0)
    with pytest.raises(ValueError, match="no thrust"):
        ThrustModel(quadratic_n=0.0, linear_n=0.0)
    with pytest.raises(ValueError, match="finite"):
        ThrustModel(quadratic_n=math.nan, linear_n=1.0)
    with pytest.raises(ValueError, match="finite"):
        ThrustModel.linear(30.0).normalized(math.inf)


# --- field values for known commands --------------------------------------------------------


def test_px4_fields_for_a_known_command():
    out = ctbr_to_px4(
        sample(0.0, thrust_n=7.5, rates=(0.5, -0.25, 1.0)), ThrustModel.linear(30.0), 42
    )
    mode = out.offboard_control_mode
    assert (mode.timestamp, mode.body_rate) == (42, True)
    assert not any(
        (
            mode.position,
            mode.velocity,
            mode.acceleration,
            mode.attitude,
            mode.thrust_and_torque,
            mode.direct_actuator,
        )
    )
    rates = out.vehicle_rates_setpoint
    # FLU (p, q, r) = (0.5, -0.25, 1.0) is FRD (0.5, 0.25, -1.0); 7.5 N of 30 N is u = 0.25,
    # pointing up = -z in FRD.
    assert (rates.timestamp, rates.roll, rates.pitch, rates.yaw) == (42, 0.5, 0.25, -1.0)
    assert rates.thrust_body == (0.0, 0.0, -0.25)
    assert rates.reset_integral is False


def test_mavros_fields_for_a_known_command():
    cmd = sample(0.0, thrust_n=10.0, rates=(0.5, -0.25, 1.0))
    out = ctbr_to_attitude_target(cmd, ThrustModel(quadratic_n=20.0, linear_n=10.0), 123)
    assert out.stamp_ns == 123
    assert out.frame_id == "base_link"
    assert out.type_mask == IGNORE_ATTITUDE == 128
    assert out.orientation_wxyz == (1.0, 0.0, 0.0, 0.0)
    assert out.body_rate_flu_radps == (0.5, -0.25, 1.0)  # MAVROS takes ROS body rates
    assert out.thrust == pytest.approx(0.5)  # 20 * 0.5^2 + 10 * 0.5 = 10 N


def test_px4_topic_names():
    assert px4_topic("vehicle_rates_setpoint") == "/fmu/in/vehicle_rates_setpoint"
    assert px4_topic("offboard_control_mode", "/px4_1/fmu/in/", "_v1") == (
        "/px4_1/fmu/in/offboard_control_mode_v1"
    )
    with pytest.raises(ValueError, match="absolute"):
        px4_topic("vehicle_rates_setpoint", "fmu/in")
    assert px4_timestamp_us(1_234_567_891) == 1_234_567


# --- gate: what may fly ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmd", "verdict"),
    [
        (sample(1.0), Verdict.FORWARD),
        (sample(1.0, mode=CTBR.MODE_FALLBACK_HOLD), Verdict.FORWARD),
        (sample(1.0, mode=CTBR.MODE_FALLBACK_LAND), Verdict.FORWARD),
        (sample(1.0, mode=CTBR.MODE_IDLE), Verdict.MODE),
        (sample(1.0, mode=CTBR.MODE_DISARMED), Verdict.MODE),
        (sample(1.0, mode=17), Verdict.MODE),
        (sample(1.0, thrust_n=math.nan), Verdict.NON_FINITE),
        (sample(1.0, rates=(0.0, math.inf, 0.0)), Verdict.NON_FINITE),
        (sample(math.nan), Verdict.NON_FINITE),
        (sample(1.0, thrust_n=-0.1), Verdict.NEGATIVE_THRUST),
        (sample(1.0 - MAX_AGE_S - 0.001), Verdict.STALE),
        (sample(1.0 + MAX_AGE_S + 0.001), Verdict.FUTURE),
    ],
)
def test_gate_verdicts(cmd, verdict):
    g = gate()
    assert g.admit(cmd, now_s=1.0) is verdict
    assert g.counts[verdict] == 1


def test_gate_drops_out_of_order_but_accepts_a_repeated_stamp():
    g = gate()
    assert g.admit(sample(1.00), 1.001) is Verdict.FORWARD
    assert g.admit(sample(0.99), 1.002) is Verdict.OUT_OF_ORDER
    assert g.admit(sample(1.00), 1.003) is Verdict.FORWARD


def test_age_check_can_be_disabled():
    g = CommandGate(FLYING_MODES, max_age_s=0.0)
    assert g.admit(sample(1.0), now_s=500.0) is Verdict.FORWARD


def test_gate_refuses_bad_configuration():
    with pytest.raises(ValueError, match="never fly"):
        CommandGate((), MAX_AGE_S)
    with pytest.raises(ValueError, match="max_age_s"):
        CommandGate(FLYING_MODES, -1.0)


# --- heartbeat: stops within one period after commands stop or turn invalid ------------------


def fly(bridge, commands, delivery_delay_s=0.002):
    """Deliver ``commands`` (stamp_s relative to T0, sample) with a fixed transport delay on an
    injected clock; return the arrival times [s] of everything the bridge published."""
    published = []
    for cmd in commands:
        now_s = cmd.stamp_s + delivery_delay_s
        absolute = CtbrSample(
            T0_NS / 1e9 + cmd.stamp_s, cmd.thrust_n, cmd.body_rate_flu_radps, cmd.mode
        )
        if bridge.on_command(absolute, T0_NS + round(now_s * 1e9)) is not None:
            published.append(now_s)
    return published


@pytest.mark.parametrize("make_bridge", [Px4Bridge, MavrosBridge])
def test_heartbeat_stops_when_commands_stop(make_bridge):
    bridge = make_bridge(gate(), ThrustModel.linear(30.0))
    stamps = [k * PERIOD_S for k in range(50)]
    published = fly(bridge, [sample(t) for t in stamps])
    assert len(published) == 50
    # After the last command nothing else is ever published: the stream (and PX4's proof of
    # life) ends within one period of the last command.
    assert published[-1] <= stamps[-1] + PERIOD_S


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": CTBR.MODE_DISARMED},
        {"mode": CTBR.MODE_IDLE},
        {"thrust_n": math.nan},
        {"rates": (math.nan, 0.0, 0.0)},
    ],
)
def test_heartbeat_stops_within_one_period_when_commands_turn_invalid(bad):
    bridge = Px4Bridge(gate(), ThrustModel.linear(30.0))
    good = [sample(k * PERIOD_S) for k in range(25)]
    invalid = [sample(k * PERIOD_S, **bad) for k in range(25, 50)]
    published = fly(bridge, good + invalid)
    assert len(published) == 25
    assert published[-1] < 25 * PERIOD_S  # nothing at or after the first invalid command
    assert bridge.last_verdict is not Verdict.FORWARD


def test_heartbeat_stops_when_commands_arrive_late():
    # A stalled link delivers a backlog 100 ms late: none of it may fly.
    bridge = Px4Bridge(gate(), ThrustModel.linear(30.0))
    on_time = fly(bridge, [sample(k * PERIOD_S) for k in range(10)])
    late = fly(bridge, [sample(k * PERIOD_S) for k in range(10, 20)], delivery_delay_s=0.1)
    assert len(on_time) == 10
    assert late == []
    assert bridge.gate.counts[Verdict.STALE] == 10


def test_heartbeat_resumes_with_valid_commands():
    bridge = Px4Bridge(gate(), ThrustModel.linear(30.0))
    commands = [sample(0.0), sample(PERIOD_S, mode=CTBR.MODE_DISARMED), sample(2 * PERIOD_S)]
    assert fly(bridge, commands) == pytest.approx([0.002, 2 * PERIOD_S + 0.002])


def test_stream_monitor_reports_start_and_stop_once():
    monitor = StreamMonitor(stopped_after_s=0.1)
    assert monitor.forwarded(0.0) is True
    assert monitor.forwarded(0.02) is False
    assert monitor.check(0.1) is False
    assert monitor.check(0.121) is True
    assert monitor.check(0.2) is False  # reported once
    assert monitor.forwarded(0.3) is True
    with pytest.raises(ValueError, match="stopped_after_s"):
        StreamMonitor(0.0)
