"""Publisher process for the bag and topic tests (real DDS, dds backend).

    python bag_talker.py PREFIX COUNT

Publishes, under the topic prefix PREFIX:
    PREFIX/model   vnd_msgs/ModelBundle, model QoS (reliable, transient local), once at start
    PREFIX/chatter std_msgs/String 'msg <i>', default QoS (reliable)
    PREFIX/pose    geometry_msgs/PoseStamped, sensor-data QoS (best effort)
Waits until chatter and pose have a subscriber, then sends COUNT messages on each with the
spacing of ``interval_s(i)``, prints 'DONE <count>' and keeps spinning until SIGINT/SIGTERM.
With COUNT = 0 it publishes forever at 20 Hz (for ``vnd topic hz``).
"""

from __future__ import annotations

import sys
import time

from vnd_ros import qos
from vnd_ros.messages import get_message
from vnd_ros.runtime import ExternalShutdownException, Node, init, spin, try_shutdown

SUBSCRIBER_TIMEOUT_S = 30.0
FOREVER_PERIOD_S = 0.05


def interval_s(index: int) -> float:
    """Irregular but deterministic spacing (20, 50, 80 ms) so playback timing is testable."""
    return 0.02 + 0.03 * (index % 3)


def expected_pose(index: int):
    """The PoseStamped sent as message ``index``."""
    pose = get_message("geometry_msgs/msg/PoseStamped")()
    pose.header.stamp.sec = index
    pose.header.stamp.nanosec = index * 1000
    pose.header.frame_id = "map"
    pose.pose.position.x = index * 0.5
    pose.pose.position.z = -1.25
    return pose


def expected_bundle():
    """The latched ModelBundle."""
    bundle = get_message("vnd_msgs/msg/ModelBundle")
    return bundle(version=3, parent_version=2, sha256="ab" * 32, payload=bytes(range(256)) * 4)


def main() -> int:
    prefix, count = sys.argv[1], int(sys.argv[2])
    init(args=[])
    node = Node("bag_talker")
    try:
        string = get_message("std_msgs/msg/String")
        model = node.create_publisher(
            type(expected_bundle()), f"{prefix}/model", qos.qos_profile_model
        )
        model.publish(expected_bundle())
        chatter = node.create_publisher(string, f"{prefix}/chatter", qos.qos_profile_default)
        pose = node.create_publisher(
            type(expected_pose(0)), f"{prefix}/pose", qos.qos_profile_sensor_data
        )
        if count == 0:
            sent = iter(range(10**9))
            node.create_timer(
                FOREVER_PERIOD_S, lambda: chatter.publish(string(data=f"msg {next(sent)}"))
            )
            print("STREAMING", flush=True)
            spin(node)
            return 0
        deadline = time.monotonic() + SUBSCRIBER_TIMEOUT_S
        while chatter.get_subscription_count() == 0 or pose.get_subscription_count() == 0:
            if time.monotonic() > deadline:
                print("NO SUBSCRIBER", flush=True)
                return 1
            time.sleep(0.02)
        time.sleep(0.3)  # the recorder subscribes to each topic as it discovers it
        for index in range(count):
            chatter.publish(string(data=f"msg {index}"))
            pose.publish(expected_pose(index))
            time.sleep(interval_s(index))
        chatter.wait_for_acks(5.0)
        print(f"DONE {count}", flush=True)
        spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
