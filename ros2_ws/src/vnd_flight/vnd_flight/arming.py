"""Operator arm and disarm requests (``vnd_msgs/CheckpointCommand`` ACTION_ARM / ACTION_DISARM)
on the safety filter.

Disarm is the operator kill switch: always carried out, whatever the mode; thrust is zero from
the next tick on. Arm only leaves DISARMED, and only while the vehicle is known to sit on the
floor: odometry fresh (``odom_timeout_s``), finite and resting in the filter's touchdown sense
(``touchdown_height_m``, ``touchdown_speed_mps``). The filter then restarts in IDLE and its
IDLE -> POLICY rule hands control to the policy on the first good tick. Arm while IDLE is
accepted and changes nothing; arm while flying (policy, hold, land) is refused.

Call these between two ticks on the control thread: the next tick runs in the new mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from vnd_core.units import NS_PER_S
from vnd_core.wire import Mode

from vnd_flight.safety import SafetyFilter
from vnd_flight.safety_config import SafetyConfig, not_resting_reason

Odometry = tuple[np.ndarray, int]  # (state (13,), stamp ns) of the newest odometry


@dataclass(frozen=True)
class ArmingReply:
    """Outcome of one arm or disarm request (the accepted / message of a CheckpointStatus)."""

    accepted: bool  # the request was carried out
    message: str  # what happened, or why not ("arm rejected: ...")


def arm_decision(
    mode: Mode, now_ns: int, odom: Odometry | None, config: SafetyConfig
) -> ArmingReply:
    """Whether an arm request may be carried out in ``mode`` at ``now_ns`` (the odometry
    stamps' clock) with the newest odometry ``odom`` (None before any); the rejection message
    names the first thing wrong."""
    if mode == Mode.IDLE:
        return ArmingReply(True, "already armed (mode idle): nothing to do")
    if mode != Mode.DISARMED:
        return _rejected(f"mode {mode.name.lower()} (already flying)")
    if odom is None:
        return _rejected("no odometry received")
    state, stamp_ns = odom
    if not np.isfinite(state).all():
        return _rejected("odometry not finite")
    age_ns = now_ns - stamp_ns
    if age_ns > round(config.odom_timeout_s * NS_PER_S):
        return _rejected(
            f"odometry stale {age_ns / 1e6:.0f} ms (limit {config.odom_timeout_s * 1e3:.0f} ms)"
        )
    reason = not_resting_reason(state, config)
    if reason is not None:
        return _rejected(f"not resting on the floor: {reason}")
    return ArmingReply(True, "armed: mode disarmed -> idle, the policy takes over when all is well")


def arm(safety: SafetyFilter, now_ns: int, odom: Odometry | None) -> ArmingReply:
    """Carry out an operator arm request on ``safety`` if :func:`arm_decision` allows it."""
    reply = arm_decision(safety.mode, now_ns, odom, safety.config)
    if reply.accepted and safety.mode == Mode.DISARMED:
        safety.rearm()
    return reply


def disarm(safety: SafetyFilter, now_ns: int) -> ArmingReply:
    """Operator kill switch: DISARMED from any mode; always accepted."""
    was = safety.mode.name.lower()
    safety.disarm(now_ns)
    return ArmingReply(True, f"disarmed (was {was}): thrust 0 until armed")


def _rejected(reason: str) -> ArmingReply:
    return ArmingReply(False, f"arm rejected: {reason}")
