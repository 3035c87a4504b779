"""Operator arm / disarm: every rejection reason, the accepted re-arm, the kill switch."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from vnd_core.config_io import repo_root
from vnd_core.vehicle import load_vehicle
from vnd_core.wire import Mode
from vnd_flight import bundle_runtime
from vnd_flight.arming import arm, arm_decision, disarm
from vnd_flight.safety import SafetyFilter
from vnd_flight.safety_config import SafetyConfig

TICK_NS = 20_000_000
VEHICLE = load_vehicle("agile")
HOVER = np.array([VEHICLE.hover_thrust_n, 0.0, 0.0, 0.0])
CONFIG = SafetyConfig()  # odometry timeout 100 ms, touchdown 0.05 m and 0.1 m/s


_SAMPLES = itertools.count()


def state_at(z_m: float, vz_mps: float = 0.0) -> np.ndarray:
    """Level at height ``z_m``, with a micrometre of motion-capture noise (a pose repeated to
    the last bit in flight is a frozen source)."""
    state = np.zeros(13)
    state[2], state[3], state[9] = z_m - 1e-6 * (1.0 + math.sin(next(_SAMPLES))), 1.0, vz_mps
    return state


def disarmed_filter() -> tuple[SafetyFilter, int]:
    """A filter that flew 10 clean ticks, then was disarmed; and the time of its next tick."""
    safety = SafetyFilter(VEHICLE, CONFIG)
    for k in range(10):
        assert safety.step(k * TICK_NS, state_at(1.0), k * TICK_NS, HOVER).mode == Mode.POLICY
    disarm(safety, 10 * TICK_NS)
    out = safety.step(10 * TICK_NS, state_at(0.0), 10 * TICK_NS, HOVER)
    assert out.mode == Mode.DISARMED
    return safety, 11 * TICK_NS


def test_action_numbers_match_the_message_definition() -> None:
    msg = (repo_root() / "ros2_ws/src/vnd_msgs/msg/CheckpointCommand.msg").read_text()
    declared = dict(re.findall(r"uint8 ACTION_(\w+)=(\d+)", msg))
    assert declared["ARM"] == str(bundle_runtime.ACTION_ARM) == "6"
    assert declared["DISARM"] == str(bundle_runtime.ACTION_DISARM) == "7"
    assert [bundle_runtime.ACTION_NAMES[action] for action in (6, 7)] == ["arm", "disarm"]


@pytest.mark.parametrize(
    ("mode", "odom", "message"),
    [
        (Mode.POLICY, (state_at(1.0), 0), "arm rejected: mode policy (already flying)"),
        (Mode.FALLBACK_HOLD, (state_at(1.0), 0), "arm rejected: mode fallback_hold (already"),
        (Mode.FALLBACK_LAND, (state_at(0.0), 0), "arm rejected: mode fallback_land (already"),
        (Mode.DISARMED, None, "arm rejected: no odometry received"),
        (Mode.DISARMED, (state_at(math.nan), 0), "arm rejected: odometry not finite"),
        (Mode.DISARMED, (state_at(0.0), -250_000_000), "arm rejected: odometry stale 250 ms"),
        (
            Mode.DISARMED,
            (state_at(0.42), 0),
            "arm rejected: not resting on the floor: 0.42 m above the floor",
        ),
        (
            Mode.DISARMED,
            (state_at(0.02, vz_mps=-0.3), 0),
            "arm rejected: not resting on the floor: vertical speed 0.30 m/s",
        ),
    ],
)
def test_each_rejection_names_what_is_wrong(mode, odom, message) -> None:
    reply = arm_decision(mode, 0, odom, CONFIG)
    assert not reply.accepted
    assert reply.message.startswith(message), reply.message


def test_limits_are_those_of_the_filter() -> None:
    assert arm_decision(Mode.DISARMED, 0, (state_at(0.05), -100_000_000), CONFIG).accepted
    assert arm_decision(Mode.DISARMED, 0, (state_at(0.0, vz_mps=0.09), 0), CONFIG).accepted
    strict = SafetyConfig(odom_timeout_s=0.05, touchdown_height_m=0.01, floor_z_m=0.3)
    assert arm_decision(Mode.DISARMED, 0, (state_at(0.305), 0), strict).accepted
    assert "0.04 m above" in arm_decision(Mode.DISARMED, 0, (state_at(0.34), 0), strict).message
    assert (
        "stale 60 ms"
        in arm_decision(Mode.DISARMED, 0, (state_at(0.3), -60_000_000), strict).message
    )


def test_rejected_arm_leaves_the_filter_disarmed() -> None:
    safety, now = disarmed_filter()
    reply = arm(safety, now, (state_at(0.0), now - 300_000_000))
    assert not reply.accepted and "stale 300 ms" in reply.message
    out = safety.step(now, state_at(0.0), now, HOVER)
    assert out.mode == Mode.DISARMED and not out.action.any()


def test_accepted_arm_goes_idle_then_policy() -> None:
    safety, now = disarmed_filter()
    reply = arm(safety, now, (state_at(0.01), now - TICK_NS))
    assert reply.accepted and reply.message.startswith("armed: mode disarmed -> idle")
    assert safety.mode == Mode.IDLE
    out = safety.step(now, state_at(0.01), now, HOVER)  # the IDLE -> POLICY rule
    assert out.mode == Mode.POLICY and np.allclose(out.action, HOVER)
    assert safety.counters.total("mode_policy_to_disarmed") == 1  # counters survive the re-arm


def test_arm_while_idle_is_a_no_op() -> None:
    safety = SafetyFilter(VEHICLE, CONFIG)
    reply = arm(safety, 0, None)  # no odometry yet: nothing is checked, nothing changes
    assert reply.accepted and "already armed" in reply.message and safety.mode == Mode.IDLE


def test_disarm_is_always_accepted_and_stays_until_armed() -> None:
    safety = SafetyFilter(VEHICLE, SafetyConfig(hold_timeout_s=0.1))
    for k in range(10):  # policy, then hold (no action), then landing
        safety.step(k * TICK_NS, state_at(1.0), k * TICK_NS, HOVER if k < 3 else None)
    assert safety.mode == Mode.FALLBACK_LAND
    reply = disarm(safety, 10 * TICK_NS)
    assert reply.accepted and reply.message == "disarmed (was fallback_land): thrust 0 until armed"
    for k in range(10, 40):  # clean odometry and actions do not bring the policy back
        out = safety.step(k * TICK_NS, state_at(1.0), k * TICK_NS, HOVER)
        assert out.mode == Mode.DISARMED and not out.action.any()
    assert disarm(safety, 40 * TICK_NS).accepted  # disarming a disarmed vehicle is fine too
    assert safety.mode == Mode.DISARMED
