"""A fake flight stack for the ``vnd preflight`` tests, run as its own OS process.

    python preflight_fake_stack.py '[{"vehicle": "ok"}, {"vehicle": "slow", "mocap_rate_hz": 20}]'

For each vehicle spec (fields of :class:`FakeVehicle`) it publishes, in that namespace, what the
real stack publishes: the mocap stream (PoseStamped, or Odometry when ``mocap_type`` is
odometry), odometry, a CtbrCommand on every second mocap frame, NodeStatus reports of an
encoder and a policy node (which also answer CheckpointCommand requests), and LearnerStatus.
Faults are injected by the spec: a slow mocap rate, different active versions, an old learner
version (stale bundle), no learner. Mocap stamps lie on an exact grid (a camera clock) and
are published once wall time passes them. Prints 'READY' once every entity exists.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

from vnd_core.units import NS_PER_S
from vnd_ros.messages import get_message
from vnd_ros.qos import QoSProfile, qos_profile_default, qos_profile_sensor_data, qos_profile_status
from vnd_ros.runtime import Node, SingleThreadedExecutor, init, try_shutdown

STATUS_PERIOD_S = 0.5  # NodeStatus and LearnerStatus period [s]
HOVER_THRUST_N = 7.0  # thrust of the fake commands [N]


def set_stamp(stamp, ns: int) -> None:
    """Write ``ns`` into a builtin_interfaces/Time (vnd_core's copy would import torch: slow)."""
    stamp.sec, stamp.nanosec = divmod(int(ns), NS_PER_S)


@dataclass(frozen=True)
class FakeVehicle:
    """One fake stack (namespace) and the faults it injects."""

    vehicle: str  # namespace
    mocap_type: str = "pose"  # pose (PoseStamped + odom) or odometry (one Odometry stream)
    mocap_rate_hz: float = 100.0  # mocap frame rate [Hz]
    encoder_version: int = 3  # encoder active version (< 0: no encoder node)
    policy_version: int = 3  # policy active version (< 0: no policy node)
    learner_version: int = 3  # LearnerStatus.latest_version (< 0: no learner node)
    learner_refusal: str = ""  # LearnerStatus.refusal of the newest bundle ("" = none refused)


class ModelNode(Node):
    """Fake encoder or policy: NodeStatus at 2 Hz and answers to CheckpointCommand."""

    def __init__(self, name: str, namespace: str, version: int) -> None:
        super().__init__(name, namespace=namespace)
        self.version = version
        self.NodeStatus = get_message("vnd_msgs/msg/NodeStatus")
        self.CheckpointStatus = get_message("vnd_msgs/msg/CheckpointStatus")
        self.status_pub = self.create_publisher(
            self.NodeStatus, "vnd/node_status", qos_profile_status
        )
        self.answer_pub = self.create_publisher(
            self.CheckpointStatus, "vnd/checkpoint/status", QoSProfile(depth=50)
        )
        self.create_subscription(
            get_message("vnd_msgs/msg/CheckpointCommand"),
            "vnd/checkpoint/command",
            self.on_command,
            qos_profile_default,
        )
        self.create_timer(STATUS_PERIOD_S, self.report)
        self.report()

    def report(self) -> None:
        """Publish one NodeStatus."""
        msg = self.NodeStatus(
            node=self.get_fully_qualified_name(),
            mode=1 if self.get_name() == "policy" else 0,
            active_version=self.version,
            previous_version=max(self.version - 1, 0),
            rate_hz=50.0,
            ticks=100,
            counters_json="{}",
        )
        set_stamp(msg.header.stamp, time.time_ns())
        self.status_pub.publish(msg)

    def on_command(self, msg) -> None:
        """Answer LIST (and refuse everything else: this fake holds no bundles)."""
        answer = self.CheckpointStatus(
            request_id=msg.request_id,
            node=self.get_fully_qualified_name(),
            accepted=msg.action == 0,
            message="listed" if msg.action == 0 else "fake node: only LIST",
            active_version=self.version,
            available_versions=list(range(1, self.version + 1)),
        )
        set_stamp(answer.header.stamp, time.time_ns())
        self.answer_pub.publish(answer)


class LearnerNode(Node):
    """Fake learner: LearnerStatus at 2 Hz."""

    def __init__(self, namespace: str, version: int, refusal: str = "") -> None:
        super().__init__("learner", namespace=namespace)
        self.version = version
        self.refusal = refusal
        self.LearnerStatus = get_message("vnd_msgs/msg/LearnerStatus")
        self.pub = self.create_publisher(
            self.LearnerStatus, "vnd/learner/status", qos_profile_status
        )
        self.create_timer(STATUS_PERIOD_S, self.report)

    def report(self) -> None:
        """Publish one LearnerStatus (collecting)."""
        msg = self.LearnerStatus(
            state=1,
            ticks_stored=500,
            latest_version=self.version,
            bundles_refused=1 if self.refusal else 0,
            latest_refused=bool(self.refusal),
            refusal=self.refusal,
        )
        set_stamp(msg.header.stamp, time.time_ns())
        self.pub.publish(msg)


class StreamNode(Node):
    """Fake mocap driver + pose filter + policy output: mocap, odom and vnd/command."""

    def __init__(self, spec: FakeVehicle) -> None:
        super().__init__("mocap_driver", namespace="/" + spec.vehicle)
        self.spec = spec
        self.Odometry = get_message("nav_msgs/msg/Odometry")
        self.PoseStamped = get_message("geometry_msgs/msg/PoseStamped")
        self.Command = get_message("vnd_msgs/msg/CtbrCommand")
        if spec.mocap_type == "pose":
            self.mocap_pub = self.create_publisher(
                self.PoseStamped, "mocap/pose", qos_profile_sensor_data
            )
            self.odom_pub = self.create_publisher(self.Odometry, "odom", qos_profile_sensor_data)
        else:
            self.mocap_pub = self.create_publisher(
                self.Odometry, "mocap/odom", qos_profile_sensor_data
            )
            self.odom_pub = None
        self.command_pub = self.create_publisher(
            self.Command, "vnd/command", qos_profile_sensor_data
        )
        self.period_ns = round(NS_PER_S / spec.mocap_rate_hz)
        self.next_ns = time.time_ns()
        self.frame = 0
        self.create_timer(min(self.period_ns / NS_PER_S, 0.01) / 2, self.on_timer)

    def on_timer(self) -> None:
        """Publish every frame whose grid stamp has passed."""
        while self.next_ns <= time.time_ns():
            self.publish_frame(self.next_ns)
            self.next_ns += self.period_ns

    def publish_frame(self, stamp_ns: int) -> None:
        """Mocap (and odom) at 1 m height, level; a command every second frame."""
        odom = self.Odometry()
        set_stamp(odom.header.stamp, stamp_ns)
        odom.pose.pose.position.z = 1.0
        odom.pose.pose.orientation.w = 1.0
        if self.odom_pub is None:
            self.mocap_pub.publish(odom)
        else:
            pose = self.PoseStamped()
            set_stamp(pose.header.stamp, stamp_ns)
            pose.pose = odom.pose.pose
            self.mocap_pub.publish(pose)
            self.odom_pub.publish(odom)
        self.frame += 1
        if self.frame % 2 == 0 and self.spec.policy_version >= 0:
            command = self.Command(
                thrust_n=HOVER_THRUST_N, mode=1, policy_version=self.spec.policy_version
            )
            set_stamp(command.header.stamp, stamp_ns)
            self.command_pub.publish(command)


def build(spec: FakeVehicle) -> list[Node]:
    """The nodes of one fake vehicle."""
    namespace = "/" + spec.vehicle
    nodes: list[Node] = [StreamNode(spec)]
    for name, version in (("encoder", spec.encoder_version), ("policy", spec.policy_version)):
        if version >= 0:
            nodes.append(ModelNode(name, namespace, version))
    if spec.learner_version >= 0:
        nodes.append(LearnerNode(namespace, spec.learner_version, spec.learner_refusal))
    return nodes


def main() -> None:
    """Run the vehicles of ``sys.argv[1]`` (a JSON list of specs) until SIGINT/SIGTERM."""
    specs = [FakeVehicle(**item) for item in json.loads(sys.argv[1])]
    init(args=[])
    executor = SingleThreadedExecutor()
    for spec in specs:
        for node in build(spec):
            executor.add_node(node)
    print("READY", flush=True)
    try:
        executor.spin()
    except KeyboardInterrupt:
        pass
    finally:
        for node in executor.get_nodes():
            node.destroy_node()
        try_shutdown()


if __name__ == "__main__":
    main()
