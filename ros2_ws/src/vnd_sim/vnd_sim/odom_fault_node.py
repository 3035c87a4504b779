"""Odometry fault injector: a drill tool that sits between the pose filter and the policy.

Remap the pose filter's output onto ``odom_in`` and this node republishes it on ``odom``, the
policy's input, unchanged until a fault is requested; from then on every sample goes through
``vnd_flight.odometry_faults`` (stop, freeze with fresh or old stamps, a 1 m jump,
half rate, NaN position). A fault is requested by the ``fault`` parameter (acting
``fault_after_s`` after the first odometry sample) or at any time by a ``sim/odom_fault``
message (std_msgs/String, the fault's name; reliable, transient local, so a request sent
before this node matched still arrives). Meant for the simulated stack and bench drills, never
for a flight with a real vehicle.

    in   odom_in (nav_msgs/Odometry, sensor QoS), sim/odom_fault (std_msgs/String)
    out  odom (nav_msgs/Odometry, sensor QoS), vnd/node_status (1 Hz)

Run: ``ros2 run vnd_sim odom_fault_node --ros-args -r odom_in:=odom_filtered``, with the pose
filter remapped ``-r odom:=odom_filtered``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from vnd_core.config_io import ConfigError
from vnd_core.units import NS_PER_S
from vnd_flight.msgfields import fill_odometry, odometry_state, set_stamp, stamp_ns
from vnd_flight.odometry_faults import FAULTS, OdometryFault, check_fault
from vnd_ros.messages import get_message
from vnd_ros.params import freeze_parameters, param
from vnd_ros.qos import qos_profile_sensor_data, qos_profile_status
from vnd_ros.runtime import Node, init, spin_until_shutdown, start_node

STATUS_PERIOD_S = 1.0


@dataclass(frozen=True)
class OdomFaultNodeConfig:
    """Parameters of the odometry fault injector."""

    fault: str = param("none", f"fault injected from fault_after_s on, one of {FAULTS}")
    fault_after_s: float = param(0.0, "delay of ``fault`` from the first odometry sample (s)")


class OdomFaultNode(Node):
    """odom_in -> OdometryFault -> odom."""

    def __init__(self) -> None:
        super().__init__("odom_fault")
        self.cfg = freeze_parameters(self, OdomFaultNodeConfig)
        check_fault(self.cfg.fault)
        if not self.cfg.fault_after_s >= 0.0:
            raise ValueError(f"fault_after_s must be >= 0, got {self.cfg.fault_after_s}")
        self.Odometry = get_message("nav_msgs/msg/Odometry")
        self.NodeStatus = get_message("vnd_msgs/msg/NodeStatus")
        self.fault: OdometryFault | None = None
        self.requested = self.cfg.fault  # applied from the next sample when not "none"
        self.delayed = self.cfg.fault != "none"  # the parameter's fault waits fault_after_s
        self.first_stamp_ns: int | None = None
        self.passed = 0
        self.odom_pub = self.create_publisher(self.Odometry, "odom", qos_profile_sensor_data)
        self.status_pub = self.create_publisher(
            self.NodeStatus, "vnd/node_status", qos_profile_status
        )
        self.create_subscription(self.Odometry, "odom_in", self.on_odom, qos_profile_sensor_data)
        String = get_message("std_msgs/msg/String")
        self.create_subscription(String, "sim/odom_fault", self.on_request, qos_profile_status)
        self.create_timer(STATUS_PERIOD_S, self.publish_status)
        self.get_logger().info(
            f"odometry faults: {self.resolve_topic_name('odom_in')} -> "
            f"{self.resolve_topic_name('odom')}, fault {self.cfg.fault!r}"
        )

    def on_request(self, msg: Any) -> None:
        """A fault by name, from the next sample on; an unknown name is logged and ignored."""
        try:
            self.requested = check_fault(msg.data)
            self.delayed = False
        except ValueError as err:
            self.get_logger().error(f"odometry fault request refused: {err}")

    def on_odom(self, msg: Any) -> None:
        """Pass one sample through the active fault."""
        stamp = stamp_ns(msg.header.stamp)
        if self.first_stamp_ns is None:
            self.first_stamp_ns = stamp
        self._start_requested(stamp)
        state = odometry_state(msg)
        out = self.fault(state, stamp) if self.fault is not None else (state, stamp)
        if out is None:
            return
        if self.fault is not None and self.fault.active(stamp):
            msg = self._message(msg, *out)
        self.odom_pub.publish(msg)
        self.passed += 1

    def _start_requested(self, stamp: int) -> None:
        """Start the requested fault once its delay has passed."""
        if self.requested == "none":
            return
        first_ns = stamp if self.first_stamp_ns is None else self.first_stamp_ns
        if self.delayed and stamp - first_ns < round(self.cfg.fault_after_s * NS_PER_S):
            return
        self.fault = OdometryFault(self.requested, stamp)
        self.get_logger().warning(f"odometry fault {self.requested} from stamp {stamp}")
        self.requested, self.delayed = "none", False

    def _message(self, template: Any, state: np.ndarray, stamp: int) -> Any:
        """An Odometry like ``template`` carrying ``state`` stamped ``stamp``."""
        odom = self.Odometry()
        set_stamp(odom.header.stamp, stamp)
        odom.header.frame_id = template.header.frame_id
        odom.child_frame_id = template.child_frame_id
        fill_odometry(odom, state)
        return odom

    def publish_status(self) -> None:
        """vnd/node_status: the active fault and the samples it acted on."""
        now_ns = self.get_clock().now().nanoseconds
        counters = {
            "passed": self.passed,
            "faulty": self.fault.faulty if self.fault is not None else 0,
        }
        status = self.NodeStatus(
            node=self.get_fully_qualified_name(),
            ticks=self.passed,
            counters_json=json.dumps(counters, sort_keys=True),
            warnings=[] if self.fault is None else [f"odometry fault drill: {self.fault.fault}"],
        )
        set_stamp(status.header.stamp, now_ns)
        self.status_pub.publish(status)


def main(args: list[str] | None = None) -> None:
    """Run the odometry fault injector until Ctrl-C or SIGTERM."""
    init(args=args)
    node = start_node(OdomFaultNode, (ConfigError, ValueError), "odom_fault")
    spin_until_shutdown(node)


if __name__ == "__main__":
    main()
