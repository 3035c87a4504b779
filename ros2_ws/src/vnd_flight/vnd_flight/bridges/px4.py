"""CTBR command -> PX4 offboard messages (uXRCE-DDS): OffboardControlMode + VehicleRatesSetpoint.

Interface facts (px4_msgs of PX4 v1.15, unchanged on PX4 main where VehicleRatesSetpoint has
MESSAGE_VERSION 0): inputs live under ``/fmu/in/``; ``timestamp`` is microseconds; rates are
FRD body rates [rad/s]; ``thrust_body`` is the normalised thrust vector in the FRD body frame,
so a multicopter's collective thrust is ``[0, 0, -u]``. PX4 leaves offboard mode (failsafe
after COM_OF_LOSS_T) when OffboardControlMode stops arriving, which is why the heartbeat is
only ever published together with a setpoint that passed the gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from vnd_flight.bridges.frames import flu_to_frd
from vnd_flight.bridges.gate import CommandGate, CtbrSample, Verdict
from vnd_flight.bridges.thrust import ThrustModel

OFFBOARD_CONTROL_MODE_TOPIC = "offboard_control_mode"  # px4_msgs/msg/OffboardControlMode
VEHICLE_RATES_SETPOINT_TOPIC = "vehicle_rates_setpoint"  # px4_msgs/msg/VehicleRatesSetpoint
NS_PER_US = 1000


def px4_topic(name: str, prefix: str = "/fmu/in", suffix: str = "") -> str:
    """Full PX4 topic name, e.g. ``/fmu/in/vehicle_rates_setpoint_v1``.

    ``prefix`` carries a multi-vehicle namespace (``/px4_1/fmu/in``); ``suffix`` is the
    message-version suffix newer PX4 releases append to versioned topics (``_v1``).
    """
    if not prefix.startswith("/"):
        raise ValueError(f"PX4 topic prefix must be absolute, got {prefix!r}")
    return f"{prefix.rstrip('/')}/{name}{suffix}"


def px4_timestamp_us(now_ns: int) -> int:
    """PX4 ``timestamp`` field [us] of the instant ``now_ns`` [ns]."""
    return now_ns // NS_PER_US


@dataclass(frozen=True)
class OffboardControlModeFields:
    """Field values of px4_msgs/msg/OffboardControlMode for body-rate control."""

    timestamp: int  # [us]
    position: bool = False
    velocity: bool = False
    acceleration: bool = False
    attitude: bool = False
    body_rate: bool = True  # the only loop we close: rates + collective thrust
    thrust_and_torque: bool = False
    direct_actuator: bool = False


@dataclass(frozen=True)
class VehicleRatesSetpointFields:
    """Field values of px4_msgs/msg/VehicleRatesSetpoint."""

    timestamp: int  # [us]
    roll: float  # roll rate set point, FRD [rad/s]
    pitch: float  # pitch rate set point, FRD [rad/s]
    yaw: float  # yaw rate set point, FRD [rad/s]
    thrust_body: tuple[float, float, float]  # normalised thrust vector, FRD body, in [-1, 1]
    reset_integral: bool = False  # never reset PX4's rate integrators from here


@dataclass(frozen=True)
class Px4Setpoint:
    """The pair published for one forwarded command: heartbeat and set point."""

    offboard_control_mode: OffboardControlModeFields
    vehicle_rates_setpoint: VehicleRatesSetpointFields


def ctbr_to_px4(sample: CtbrSample, thrust_model: ThrustModel, timestamp_us: int) -> Px4Setpoint:
    """PX4 messages for ``sample`` (FLU rates, thrust in N) stamped ``timestamp_us`` [us]."""
    roll, pitch, yaw = (float(v) for v in flu_to_frd(sample.body_rate_flu_radps))
    thrust_normalized = thrust_model.normalized(sample.thrust_n)
    return Px4Setpoint(
        offboard_control_mode=OffboardControlModeFields(timestamp=timestamp_us),
        vehicle_rates_setpoint=VehicleRatesSetpointFields(
            timestamp=timestamp_us,
            roll=roll,
            pitch=pitch,
            yaw=yaw,
            thrust_body=(0.0, 0.0, -thrust_normalized),
        ),
    )


class Px4Bridge:
    """Gate + conversion: the PX4 messages to publish for each arriving command, or None.

    Args:
        gate: decides whether a command may fly (see :class:`CommandGate`).
        thrust_model: the vehicle's newtons -> normalised thrust map.
    """

    def __init__(self, gate: CommandGate, thrust_model: ThrustModel) -> None:
        self.gate = gate
        self.thrust_model = thrust_model
        self.last_verdict: Verdict | None = None  # verdict on the latest command

    def on_command(self, sample: CtbrSample, now_ns: int) -> Px4Setpoint | None:
        """Messages for ``sample`` arriving at ``now_ns`` [ns, ROS time], or None when the gate
        refuses it (then nothing is published: no set point and no heartbeat)."""
        self.last_verdict = self.gate.admit(sample, now_ns / 1e9)
        if self.last_verdict is not Verdict.FORWARD:
            return None
        return ctbr_to_px4(sample, self.thrust_model, px4_timestamp_us(now_ns))
