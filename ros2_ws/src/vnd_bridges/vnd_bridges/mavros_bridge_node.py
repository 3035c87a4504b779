"""MAVROS bridge node: vnd CtbrCommand -> mavros_msgs/AttitudeTarget (body rates + thrust).

Publishes on ``/mavros/setpoint_raw/attitude`` with type_mask IGNORE_ATTITUDE, body rates in
the ROS body frame (FLU; MAVROS converts to FRD) and normalised thrust. Like the PX4 bridge it
forwards each valid command as it arrives and publishes nothing for a refused one, so the
autopilot's own setpoint-loss failsafe takes over when the policy stops.

Run: ``ros2 run vnd_bridges mavros_bridge_node``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vnd_core.units import NS_PER_S
from vnd_flight.bridges.mavros import ATTITUDE_TARGET_TOPIC, AttitudeTargetFields, MavrosBridge
from vnd_ros.messages import get_message
from vnd_ros.params import freeze_parameters, param
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

ATTITUDE_TARGET_TYPE = "mavros_msgs/msg/AttitudeTarget"


@dataclass(frozen=True)
class MavrosBridgeConfig:
    """Parameters of the MAVROS bridge node."""

    command: CommandInputConfig = field(default_factory=CommandInputConfig)
    thrust: ThrustConfig = field(default_factory=ThrustConfig)
    output_topic: str = param(
        ATTITUDE_TARGET_TOPIC,
        "MAVROS setpoint_raw attitude topic; /<ns>/mavros/... for a namespaced MAVROS",
    )


class MavrosBridgeNode(Node):
    """Forwards valid CTBR commands to MAVROS as body-rate attitude targets."""

    def __init__(self) -> None:
        super().__init__("mavros_bridge")
        self.config = freeze_parameters(self, MavrosBridgeConfig)
        ctbr_cls = get_message(CTBR_COMMAND_TYPE)
        self._target_cls = get_message(ATTITUDE_TARGET_TYPE)
        self.bridge = MavrosBridge(
            make_gate(self.config.command, ctbr_cls), make_thrust_model(self.config.thrust)
        )
        self._log = StreamLog(self.get_logger(), "MAVROS", self.config.command.stopped_after_s)
        # MAVROS subscribes reliably: a best-effort writer would never match it.
        self._target_pub = self.create_publisher(
            self._target_cls, self.config.output_topic, qos_profile_default
        )
        self.create_subscription(
            ctbr_cls, self.config.command.topic, self._on_command, qos_profile_sensor_data
        )
        self.create_timer(WATCH_PERIOD_S, self._watch)
        self.get_logger().info(
            f"MAVROS bridge: {self.config.command.topic} -> {self.config.output_topic}"
        )
        log_thrust_model(self.get_logger(), self.config.thrust, self.bridge.thrust_model)

    def _on_command(self, msg: Any) -> None:
        now_ns = self.get_clock().now().nanoseconds
        target = self.bridge.on_command(sample_from_msg(msg), now_ns)
        if target is None:
            self._log.refused(self.bridge.last_verdict, self.bridge.gate)
            return
        self._target_pub.publish(fill_attitude_target(self._target_cls(), target))
        self._log.forwarded(now_ns)

    def _watch(self) -> None:
        self._log.check(self.get_clock().now().nanoseconds)


def fill_attitude_target(msg: Any, fields: AttitudeTargetFields) -> Any:
    """``msg`` (a default AttitudeTarget) filled from ``fields``."""
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(fields.stamp_ns, NS_PER_S)
    msg.header.frame_id = fields.frame_id
    msg.type_mask = fields.type_mask
    o = msg.orientation
    o.w, o.x, o.y, o.z = fields.orientation_wxyz
    r = msg.body_rate
    r.x, r.y, r.z = fields.body_rate_flu_radps
    msg.thrust = fields.thrust
    return msg


def main(args: list[str] | None = None) -> None:
    """Entry point of ``mavros_bridge_node``."""
    init(args=args)
    spin_until_shutdown(MavrosBridgeNode())


if __name__ == "__main__":
    main()
