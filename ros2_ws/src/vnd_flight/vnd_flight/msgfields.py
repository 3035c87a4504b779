"""Field-level conversions between flight-node messages and the stack's numpy layouts.

Pure attribute access on message objects (``nav_msgs/Odometry``, ``std_msgs/Header``, ...) of
whichever backend created them: nothing here imports a middleware, and the node passes the
message instances in. Both the encoder and the policy node read odometry through
:func:`odometry_state`, so the state layout is decoded in one place.

Odometry convention of this stack (``odom``, REP 103/105 frames): ``header.frame_id`` is the
ENU world frame, ``child_frame_id`` the FLU body frame; ``pose`` is the body pose in the world;
``twist.twist.linear`` is the velocity **in the world frame** (our state layout, not the
child-frame velocity nav_msgs documents), ``twist.twist.angular`` the body (FLU) rates.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from vnd_core.state import STATE_DIM
from vnd_core.units import NS_PER_S


def stamp_ns(stamp: Any) -> int:
    """Nanoseconds of a ``builtin_interfaces/Time`` (``sec``, ``nanosec``)."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def set_stamp(stamp: Any, ns: int) -> None:
    """Write ``ns`` nanoseconds into a ``builtin_interfaces/Time`` in place."""
    stamp.sec, stamp.nanosec = divmod(int(ns), NS_PER_S)


def odometry_state(odom: Any) -> np.ndarray:
    """State (13,) p, q (w x y z), v (world), omega (body) of a ``nav_msgs/Odometry``."""
    p = odom.pose.pose.position
    q = odom.pose.pose.orientation
    v = odom.twist.twist.linear
    w = odom.twist.twist.angular
    return np.array(
        [p.x, p.y, p.z, q.w, q.x, q.y, q.z, v.x, v.y, v.z, w.x, w.y, w.z], dtype=float
    ).reshape(STATE_DIM)


def fill_odometry(odom: Any, state: np.ndarray) -> None:
    """Write state (13,) into the pose and twist of a ``nav_msgs/Odometry`` in place."""
    s = [float(x) for x in np.asarray(state).reshape(STATE_DIM)]
    pose, twist = odom.pose.pose, odom.twist.twist
    pose.position.x, pose.position.y, pose.position.z = s[0:3]
    q = pose.orientation
    q.w, q.x, q.y, q.z = s[3:7]
    twist.linear.x, twist.linear.y, twist.linear.z = s[7:10]
    twist.angular.x, twist.angular.y, twist.angular.z = s[10:13]


def pose_fields(pose_stamped: Any) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
    """(stamp ns, position (3,) m, quaternion (4,) w x y z) of a ``geometry_msgs/PoseStamped``."""
    p, q = pose_stamped.pose.position, pose_stamped.pose.orientation
    return stamp_ns(pose_stamped.header.stamp), (p.x, p.y, p.z), (q.w, q.x, q.y, q.z)
