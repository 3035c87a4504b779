"""The pose filter node as a real OS process: poses in, odometry with velocity out."""

from __future__ import annotations

import json
import math
import time

from vnd_flight.msgfields import odometry_state, set_stamp, stamp_ns
from vnd_ros.qos import qos_profile_sensor_data, qos_profile_status

SPEED_MPS = 1.0  # along world x
YAW_RATE_RADPS = 0.5  # about body z


def test_poses_become_odometry_with_velocity_and_bad_poses_are_counted(harness, middleware):
    H = harness
    node = H.NodeProcess(
        "vnd_encoder.pose_filter_node", ["-r", "__ns:=/pf", "-p", "status_period_s:=0.25"]
    )
    peer = H.Peer("/pf")
    try:
        pose_cls, pose_pub = peer.publisher(
            "geometry_msgs/msg/PoseStamped", "mocap/pose", qos_profile_sensor_data
        )
        odom = peer.record("nav_msgs/msg/Odometry", "odom", qos_profile_sensor_data)
        status = peer.record("vnd_msgs/msg/NodeStatus", "vnd/node_status", qos_profile_status)
        command_cls, command_pub = peer.publisher(
            "vnd_msgs/msg/CtbrCommand", "vnd/command", qos_profile_sensor_data
        )
        peer.start()
        node.wait_log("filtering")
        H.wait_for(lambda: status, 10.0, "the first status (discovery)")

        start_ns = time.time_ns()

        def pose(k: int, jump_m: float = 0.0, norm: float = 1.0):
            t_s = 0.01 * k
            yaw = YAW_RATE_RADPS * t_s
            msg = pose_cls()
            set_stamp(msg.header.stamp, start_ns + k * 10_000_000)
            msg.header.frame_id = "world"
            p, q = msg.pose.position, msg.pose.orientation
            p.x, p.y, p.z = SPEED_MPS * t_s + jump_m, 0.5, 1.0
            q.w, q.x, q.y, q.z = norm * math.cos(yaw / 2), 0.0, 0.0, norm * math.sin(yaw / 2)
            return msg

        bad = {60: pose(60, norm=1.5), 80: pose(80, jump_m=1.0)}
        for k in range(150):
            pose_pub.publish(bad.get(k, pose(k)))
            if k == 100:
                pose_pub.publish(pose(100))  # the same stamp again
            time.sleep(0.01)
        H.wait_for(lambda: len(odom) >= 140, 5.0, "odometry")
        msg = odom[-1][1]
        assert (msg.header.frame_id, msg.child_frame_id) == ("world", "base_link")
        assert stamp_ns(msg.header.stamp) == start_ns + 149 * 10_000_000
        state = odometry_state(msg)
        assert abs(state[7] - SPEED_MPS) < 0.05 and abs(state[8]) < 0.05  # world velocity
        assert abs(state[12] - YAW_RATE_RADPS) < 0.05  # body yaw rate
        assert abs(state[0] - SPEED_MPS * 1.49) < 0.01
        broken = command_cls(thrust_n=9.0, body_rate_radps=[math.nan, 0.0, 0.0])
        set_stamp(broken.header.stamp, start_ns + 149 * 10_000_000)
        command_pub.publish(broken)  # the rate prediction reads vnd/command; NaN is refused
        time.sleep(0.1)  # the last odometry samples arrive
        # Two statuses with the same count after the last odometry: the flight's final count
        # (best-effort transport may drop an odometry message on its way to the recorder,
        # so the count is checked against what arrived within a few messages).
        H.wait_for(
            lambda: status[-1][1].ticks == status[-2][1].ticks >= len(odom),
            2.0,
            "a status after the flight",
        )
        assert status[-1][1].ticks - len(odom) <= 3, (status[-1][1].ticks, len(odom))
        H.wait_for(
            lambda: "rate_command_not_finite" in json.loads(status[-1][1].counters_json),
            2.0,
            "the refused command in the counters",
        )
        counters = json.loads(status[-1][1].counters_json)
        assert counters == {
            "duplicate_stamp": 1,
            "non_unit_quaternion": 1,
            "position_jump": 1,
            "rate_command_not_finite": 1,
        }
        assert 140 <= len(odom) <= 150 - 2 - 2  # two rejected, two warm-up samples: no output
        node.wait_log("pose filter:")  # the throttled rejection summary
    finally:
        peer.close()
        node.stop()
