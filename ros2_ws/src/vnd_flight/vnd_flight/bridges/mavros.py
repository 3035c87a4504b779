"""CTBR command -> mavros_msgs/AttitudeTarget on ``/mavros/setpoint_raw/attitude``.

Interface facts (MAVROS 2.x, mavros_msgs/msg/AttitudeTarget): ``body_rate`` is in the ROS body
frame (FLU; MAVROS turns it into FRD for MAVLink SET_ATTITUDE_TARGET itself), ``thrust`` is the
normalised collective thrust in [0, 1], and ``type_mask`` IGNORE_ATTITUDE makes the autopilot
track body rates and thrust only. The orientation is ignored and sent as identity.
"""

from __future__ import annotations

from dataclasses import dataclass

from vnd_flight.bridges.gate import CommandGate, CtbrSample, Verdict
from vnd_flight.bridges.thrust import ThrustModel

ATTITUDE_TARGET_TOPIC = "/mavros/setpoint_raw/attitude"
IGNORE_ATTITUDE = 128  # mavros_msgs/AttitudeTarget.IGNORE_ATTITUDE
BODY_FRAME_ID = "base_link"  # REP 105 body frame (FLU), as MAVROS expects
IDENTITY_WXYZ = (1.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class AttitudeTargetFields:
    """Field values of mavros_msgs/msg/AttitudeTarget (nested messages flattened)."""

    stamp_ns: int  # header.stamp [ns, ROS time]
    frame_id: str  # header.frame_id
    type_mask: int  # IGNORE_* bits
    orientation_wxyz: tuple[float, float, float, float]  # ignored (IGNORE_ATTITUDE)
    body_rate_flu_radps: tuple[float, float, float]  # body_rate x, y, z in FLU [rad/s]
    thrust: float  # normalised collective thrust in [0, 1]


def ctbr_to_attitude_target(
    sample: CtbrSample, thrust_model: ThrustModel, stamp_ns: int
) -> AttitudeTargetFields:
    """AttitudeTarget for ``sample`` (FLU rates, thrust in N) stamped ``stamp_ns`` [ns]."""
    roll, pitch, yaw = (float(v) for v in sample.body_rate_flu_radps)
    return AttitudeTargetFields(
        stamp_ns=stamp_ns,
        frame_id=BODY_FRAME_ID,
        type_mask=IGNORE_ATTITUDE,
        orientation_wxyz=IDENTITY_WXYZ,
        body_rate_flu_radps=(roll, pitch, yaw),
        thrust=thrust_model.normalized(sample.thrust_n),
    )


class MavrosBridge:
    """Gate + conversion: the AttitudeTarget to publish for each arriving command, or None.

    Args:
        gate: decides whether a command may fly (see :class:`CommandGate`).
        thrust_model: the vehicle's newtons -> normalised thrust map.
    """

    def __init__(self, gate: CommandGate, thrust_model: ThrustModel) -> None:
        self.gate = gate
        self.thrust_model = thrust_model
        self.last_verdict: Verdict | None = None  # verdict on the latest command

    def on_command(self, sample: CtbrSample, now_ns: int) -> AttitudeTargetFields | None:
        """AttitudeTarget for ``sample`` arriving at ``now_ns`` [ns, ROS time], or None when
        the gate refuses it (then nothing is published and the autopilot's setpoint stream
        times out)."""
        self.last_verdict = self.gate.admit(sample, now_ns / 1e9)
        if self.last_verdict is not Verdict.FORWARD:
            return None
        return ctbr_to_attitude_target(sample, self.thrust_model, now_ns)
