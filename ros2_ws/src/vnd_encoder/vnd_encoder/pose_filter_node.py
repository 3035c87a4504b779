"""Pose filter node: motion-capture poses -> filtered odometry.

Subscribes ``mocap/pose`` (geometry_msgs/PoseStamped, sensor QoS, 100-360 Hz) and publishes
``odom`` (nav_msgs/Odometry, sensor QoS) with the stamp of the pose it includes. Frames: header
``world`` (ENU), child ``base_link`` (FLU); ``twist.linear`` is the velocity in the **world**
frame (the stack's state layout), ``twist.angular`` the body rates (see
``vnd_flight.msgfields``). Bad poses (non-finite, non-unit quaternion, repeated or
out-of-order stamps, position jumps) are rejected by ``vnd_flight.PoseFilter``, counted,
and summarised in the log at most once per ``log_period_s``. ``vnd/node_status`` at 1 Hz.
With ``use_rate_commands``, ``vnd/command`` (CtbrCommand, sensor QoS) feeds the commanded body
rates to the filter's rate prediction, through the rate-loop time constant of ``vehicle``.
A mocap driver that already publishes Odometry is remapped straight onto ``odom`` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vnd_core.config_io import ConfigError
from vnd_core.vehicle import load_vehicle
from vnd_flight.msgfields import fill_odometry, pose_fields, set_stamp, stamp_ns
from vnd_flight.pose_filter import PoseFilter, PoseFilterConfig
from vnd_flight.realtime import request_realtime
from vnd_flight.stats import LatencyWindow, RateEstimator
from vnd_ros.messages import get_message
from vnd_ros.params import freeze_parameters, param
from vnd_ros.qos import qos_profile_sensor_data, qos_profile_status
from vnd_ros.runtime import Node, init, spin_until_shutdown, start_node


@dataclass(frozen=True)
class PoseFilterNodeConfig:
    """Parameters of the pose filter node."""

    world_frame: str = param("world", "frame_id of the odometry (ENU world)")
    realtime_priority: int = param(0, "SCHED_FIFO priority of the filter, 1-99; 0 = off")
    body_frame: str = param("base_link", "child_frame_id of the odometry (FLU body)")
    status_period_s: float = param(1.0, "period of vnd/node_status reports (s)")
    log_period_s: float = param(1.0, "shortest interval between rejection summaries (s)")
    vehicle: str = param("agile", "vehicle name or YAML path (its body-rate time constant)")
    use_rate_commands: bool = param(True, "predict body rates from vnd/command (rate loop model)")
    filter: PoseFilterConfig = field(default_factory=PoseFilterConfig)  # filter tuning


class PoseFilterNode(Node):
    """mocap/pose -> PoseFilter -> odom."""

    def __init__(self) -> None:
        super().__init__("pose_filter")
        self.cfg = freeze_parameters(self, PoseFilterNodeConfig)
        self.get_logger().info(request_realtime(self.cfg.realtime_priority))
        rate_loop_s = load_vehicle(self.cfg.vehicle).body_rate_time_constant_s
        self.filter = PoseFilter(self.cfg.filter, rate_time_constant_s=rate_loop_s)
        self.Odometry = get_message("nav_msgs/msg/Odometry")
        self.NodeStatus = get_message("vnd_msgs/msg/NodeStatus")
        self.published = 0
        self.rate = RateEstimator()
        self.latency = LatencyWindow(window=1000)
        self.odom_pub = self.create_publisher(self.Odometry, "odom", qos_profile_sensor_data)
        self.status_pub = self.create_publisher(
            self.NodeStatus, "vnd/node_status", qos_profile_status
        )
        self.create_subscription(
            get_message("geometry_msgs/msg/PoseStamped"),
            "mocap/pose",
            self.on_pose,
            qos_profile_sensor_data,
        )
        if self.cfg.use_rate_commands:
            self.create_subscription(
                get_message("vnd_msgs/msg/CtbrCommand"),
                "vnd/command",
                self.on_command,
                qos_profile_sensor_data,
            )
        self.create_timer(self.cfg.status_period_s, self.publish_status)
        self.create_timer(self.cfg.log_period_s, self.log_rejections)
        self.get_logger().info(
            f"filtering {self.resolve_topic_name('mocap/pose')} -> "
            f"{self.resolve_topic_name('odom')}"
        )

    def on_pose(self, msg: Any) -> None:
        """Filter one pose; publish odometry when the filter gives an estimate."""
        stamp_ns, position, quaternion = pose_fields(msg)
        estimate = self.filter.update(stamp_ns, position, quaternion)
        if estimate is None:
            return
        odom = self.Odometry()
        odom.header.stamp = msg.header.stamp
        odom.header.frame_id = self.cfg.world_frame
        odom.child_frame_id = self.cfg.body_frame
        fill_odometry(odom, estimate.as_state())
        self.odom_pub.publish(odom)
        now_ns = self.get_clock().now().nanoseconds
        self.published += 1
        self.rate.add(now_ns)
        self.latency.add_ns(now_ns - stamp_ns)

    def on_command(self, msg: Any) -> None:
        """The body rates just commanded, stamped with the odometry they answer."""
        self.filter.set_rate_command(stamp_ns(msg.header.stamp), msg.body_rate_radps)

    def log_rejections(self) -> None:
        """Summarise the poses rejected since the last summary (nothing when none)."""
        new = self.filter.counters.drain_new()
        if new:
            self.get_logger().warning(f"pose filter: {self.filter.counters.format(new)}")

    def publish_status(self) -> None:
        """vnd/node_status: output rate, pose-stamp -> odometry latency, counters."""
        now = self.get_clock().now()
        status = self.NodeStatus(
            node=self.get_fully_qualified_name(),
            rate_hz=self.rate.rate_hz(now.nanoseconds),
            latency_p50_ms=_finite(self.latency.p50_ms),
            latency_p99_ms=_finite(self.latency.p99_ms),
            ticks=self.published,
            counters_json=json.dumps(self.filter.counters.totals, sort_keys=True),
        )
        set_stamp(status.header.stamp, now.nanoseconds)
        self.status_pub.publish(status)


def _finite(value: float) -> float:
    """NaN (an empty latency window) reported as 0."""
    return value if value == value else 0.0


def main(args: list[str] | None = None) -> None:
    """Run the pose filter node until Ctrl-C or SIGTERM."""
    init(args=args)
    node = start_node(PoseFilterNode, (ConfigError, ValueError), "pose_filter")
    spin_until_shutdown(node)


if __name__ == "__main__":
    main()
