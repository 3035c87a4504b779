"""The rclpy backend's Node: rclpy's own, with the conversions node code relies on.

``vnd_ros.runtime`` exports it as ``Node`` when ``VND_MIDDLEWARE=rclpy``; the node-contract
tests import it directly to run the same behaviour checks on both backends in one process.
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node as _RclpyNode

from vnd_ros.log import RclpyLogger
from vnd_ros.qos import to_rclpy_qos


class Node(_RclpyNode):
    """rclpy's Node, accepting the vnd_ros.qos profiles (or an int depth) like the dds one,
    with the logger of :class:`vnd_ros.log.RclpyLogger`."""

    def create_publisher(self, msg_type: Any, topic: str, qos_profile: Any, **kwargs: Any) -> Any:
        """rclpy create_publisher with ``qos_profile`` converted to rclpy's type."""
        return super().create_publisher(msg_type, topic, to_rclpy_qos(qos_profile), **kwargs)

    def create_subscription(
        self, msg_type: Any, topic: str, callback: Any, qos_profile: Any, **kwargs: Any
    ) -> Any:
        """rclpy create_subscription with ``qos_profile`` converted to rclpy's type."""
        return super().create_subscription(
            msg_type, topic, callback, to_rclpy_qos(qos_profile), **kwargs
        )

    def get_logger(self) -> RclpyLogger:
        """This node's logger (one call site may log at several severities)."""
        logger = self.__dict__.get("_vnd_logger")
        if logger is None:
            logger = self.__dict__["_vnd_logger"] = RclpyLogger(super().get_logger().name)
        return logger
