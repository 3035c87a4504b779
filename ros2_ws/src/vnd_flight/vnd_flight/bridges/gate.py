"""Which CTBR commands a bridge may forward to an autopilot.

A bridge forwards each command the moment it arrives, and the offboard heartbeat rides on the
same publication. So the gate below is the only thing between the policy and the vehicle: when
it refuses (stale, out of order, non-finite, or a mode that must not fly), nothing is
published, the heartbeat stops with the setpoints, and the autopilot's own offboard-loss
failsafe (PX4 COM_OF_LOSS_T) takes over.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class CtbrSample:
    """One collective-thrust / body-rate command, as carried by vnd_msgs/CtbrCommand."""

    stamp_s: float  # header stamp: stamp of the odometry the command answers [s, ROS time]
    thrust_n: float  # collective thrust [N]
    body_rate_flu_radps: Vec3  # body-rate set point (roll, pitch, yaw) in FLU [rad/s]
    mode: int  # controller mode (vnd_msgs/CtbrCommand MODE_*)


class Verdict(enum.Enum):
    """Outcome of :meth:`CommandGate.admit`."""

    FORWARD = "forward"  # valid and fresh: publish setpoint and heartbeat
    MODE = "mode"  # a mode that must not fly (idle, disarmed, unknown)
    NON_FINITE = "non_finite"  # NaN or inf in thrust, rates or stamp
    NEGATIVE_THRUST = "negative_thrust"  # thrust_n < 0
    STALE = "stale"  # stamp older than max_age_s at arrival
    FUTURE = "future"  # stamp more than max_age_s ahead of the bridge clock (clock offset)
    OUT_OF_ORDER = "out_of_order"  # stamp older than the last forwarded command


class CommandGate:
    """Admits a command for forwarding only when it is valid now.

    Args:
        forward_modes: controller modes whose commands are flown (policy and the fallbacks).
        max_age_s: largest accepted age of a command's stamp on arrival [s], e.g. one 50 Hz
            period plus margin; 0 disables the age check (only for clocks that are not
            synchronised with the stamp source).
    """

    def __init__(self, forward_modes: Iterable[int], max_age_s: float) -> None:
        if not (math.isfinite(max_age_s) and max_age_s >= 0):
            raise ValueError(f"max_age_s must be finite and >= 0, got {max_age_s}")
        self.forward_modes = frozenset(int(m) for m in forward_modes)
        if not self.forward_modes:
            raise ValueError("forward_modes is empty: the bridge would never fly")
        self.max_age_s = max_age_s
        self.counts: Counter[Verdict] = Counter()  # verdicts so far, for status and logs
        self._last_forwarded_stamp_s = -math.inf

    def admit(self, sample: CtbrSample, now_s: float) -> Verdict:
        """Verdict on ``sample`` arriving at ``now_s`` [s, same clock as the stamps]."""
        verdict = self._judge(sample, now_s)
        self.counts[verdict] += 1
        if verdict is Verdict.FORWARD:
            self._last_forwarded_stamp_s = sample.stamp_s
        return verdict

    def _judge(self, sample: CtbrSample, now_s: float) -> Verdict:
        if sample.mode not in self.forward_modes:
            return Verdict.MODE
        values = (sample.stamp_s, sample.thrust_n, *sample.body_rate_flu_radps)
        if not all(math.isfinite(v) for v in values):
            return Verdict.NON_FINITE
        if sample.thrust_n < 0:
            return Verdict.NEGATIVE_THRUST
        if self.max_age_s > 0:
            age_s = now_s - sample.stamp_s
            if age_s > self.max_age_s:
                return Verdict.STALE
            if age_s < -self.max_age_s:
                return Verdict.FUTURE
        # Equal stamps are legal: two ticks may answer the same odometry message.
        if sample.stamp_s < self._last_forwarded_stamp_s:
            return Verdict.OUT_OF_ORDER
        return Verdict.FORWARD


class StreamMonitor:
    """Whether forwarded set points (and so the heartbeat) are flowing, for operator logs.

    Args:
        stopped_after_s: time without a forwarded command after which the stream counts as
            stopped [s].
    """

    def __init__(self, stopped_after_s: float) -> None:
        if not (math.isfinite(stopped_after_s) and stopped_after_s > 0):
            raise ValueError(f"stopped_after_s must be finite and > 0, got {stopped_after_s}")
        self.stopped_after_s = stopped_after_s
        self.streaming = False  # a command was forwarded within stopped_after_s
        self._last_forward_s = -math.inf

    def forwarded(self, now_s: float) -> bool:
        """Record a forwarded command at ``now_s`` [s]; True when this (re)starts the stream."""
        started = not self.streaming
        self.streaming = True
        self._last_forward_s = now_s
        return started

    def check(self, now_s: float) -> bool:
        """True exactly once when the stream has stopped by ``now_s`` [s]."""
        if self.streaming and now_s - self._last_forward_s > self.stopped_after_s:
            self.streaming = False
            return True
        return False
