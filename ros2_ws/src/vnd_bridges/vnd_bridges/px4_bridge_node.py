"""PX4 bridge node: vnd CtbrCommand -> px4_msgs OffboardControlMode + VehicleRatesSetpoint.

Each valid command is forwarded the moment it arrives, and the offboard heartbeat
(OffboardControlMode) is published in the same callback, right before the set point. A refused
command (stale, non-finite, idle/disarmed) publishes nothing, so when the policy stops or goes
bad the heartbeat stops too and PX4's offboard-loss failsafe (COM_OF_LOSS_T, COM_OBL_RC_ACT)
takes over. No timer republishes old set points.

Run: ``ros2 run vnd_bridges px4_bridge_node --ros-args -p fmu_prefix:=/fmu/in``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vnd_flight.bridges.px4 import (
    OFFBOARD_CONTROL_MODE_TOPIC,
    VEHICLE_RATES_SETPOINT_TOPIC,
    Px4Bridge,
    px4_topic,
)
from vnd_ros.messages import get_message
from vnd_ros.params import freeze_parameters
from vnd_ros.qos import qos_profile_default, qos_profile_sensor_data
from vnd_ros.runtime import Node, init, spin_until_shutdown

from vnd_bridges.common import (
    CTBR_COMMAND_TYPE,
    WATCH_PERIOD_S,
    CommandInputConfig,
    StreamLog,
    ThrustConfig,
    log_thrust_model,
    make_gate,
    make_thrust_model,
    sample_from_msg,
)

OFFBOARD_CONTROL_MODE_TYPE = "px4_msgs/msg/OffboardControlMode"
VEHICLE_RATES_SETPOINT_TYPE = "px4_msgs/msg/VehicleRatesSetpoint"


@dataclass(frozen=True)
class Px4BridgeConfig:
    """Parameters of the PX4 bridge node."""

    command: CommandInputConfig = field(default_factory=CommandInputConfig)
    thrust: ThrustConfig = field(default_factory=ThrustConfig)
    fmu_prefix: str = "/fmu/in"  # PX4 input topic prefix (/px4_1/fmu/in for vehicle 1)
    topic_suffix: str = ""  # message-version suffix of PX4 input topics, e.g. '_v1'; '' for v1.15


class Px4BridgeNode(Node):
    """Forwards valid CTBR commands to PX4 offboard body-rate control."""

    def __init__(self) -> None:
        super().__init__("px4_bridge")
        self.config = freeze_parameters(self, Px4BridgeConfig)
        ctbr_cls = get_message(CTBR_COMMAND_TYPE)
        self._mode_cls = get_message(OFFBOARD_CONTROL_MODE_TYPE)
        self._rates_cls = get_message(VEHICLE_RATES_SETPOINT_TYPE)
        self.bridge = Px4Bridge(
            make_gate(self.config.command, ctbr_cls), make_thrust_model(self.config.thrust)
        )
        self._log = StreamLog(self.get_logger(), "PX4", self.config.command.stopped_after_s)
        # Reliable writers also match PX4's best-effort readers (and a reliable `ros2 topic echo`).
        self._mode_pub = self.create_publisher(
            self._mode_cls, self._topic(OFFBOARD_CONTROL_MODE_TOPIC), qos_profile_default
        )
        self._rates_pub = self.create_publisher(
            self._rates_cls, self._topic(VEHICLE_RATES_SETPOINT_TOPIC), qos_profile_default
        )
        self.create_subscription(
            ctbr_cls, self.config.command.topic, self._on_command, qos_profile_sensor_data
        )
        self.create_timer(WATCH_PERIOD_S, self._watch)
        rates_topic = self._topic(VEHICLE_RATES_SETPOINT_TOPIC)
        self.get_logger().info(f"PX4 bridge: {self.config.command.topic} -> {rates_topic}")
        log_thrust_model(self.get_logger(), self.config.thrust, self.bridge.thrust_model)

    def _topic(self, name: str) -> str:
        return px4_topic(name, self.config.fmu_prefix, self.config.topic_suffix)

    def _on_command(self, msg: Any) -> None:
        now_ns = self.get_clock().now().nanoseconds
        setpoint = self.bridge.on_command(sample_from_msg(msg), now_ns)
        if setpoint is None:
            self._log.refused(self.bridge.last_verdict, self.bridge.gate)
            return
        # Heartbeat and set point leave together: one never flows without the other.
        self._mode_pub.publish(fill_message(self._mode_cls(), setpoint.offboard_control_mode))
        self._rates_pub.publish(fill_message(self._rates_cls(), setpoint.vehicle_rates_setpoint))
        self._log.forwarded(now_ns)

    def _watch(self) -> None:
        self._log.check(self.get_clock().now().nanoseconds)


def fill_message(msg: Any, fields: Any) -> Any:
    """``msg`` with every field of the dataclass ``fields`` assigned (flat PX4 messages)."""
    for name, value in asdict(fields).items():
        setattr(msg, name, list(value) if isinstance(value, tuple) else value)
    return msg


def main(args: list[str] | None = None) -> None:
    """Entry point of ``px4_bridge_node``."""
    init(args=args)
    spin_until_shutdown(Px4BridgeNode())


if __name__ == "__main__":
    main()
