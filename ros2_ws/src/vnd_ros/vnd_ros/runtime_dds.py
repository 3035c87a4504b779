"""What :mod:`vnd_ros.runtime` adds to the dds backend's node API (the VND middleware's own)."""

from __future__ import annotations

from typing import Any

from vnd_ros import dds_node as _dds
from vnd_ros.dds_node import SingleThreadedExecutor, spin


class ExternalShutdownException(Exception):  # noqa: N818 - rclpy's name
    """Never raised by the dds backend (spin returns on SIGTERM); exported so node code
    can catch it the same way on both backends."""


def node_executor() -> Any:
    """The executor a node process spins on: the dds backend's own."""
    return SingleThreadedExecutor()


def spin_node(node: Any) -> None:
    """Spin ``node`` until Ctrl-C or SIGTERM (the dds backend's spin returns on SIGTERM)."""
    spin(node)


def start(args: list[str] | None, recorded: list[str], **kwargs: Any) -> None:
    """Start the dds backend with the ``recorded`` process arguments (``args`` or sys.argv)."""
    _dds.init(args=recorded, **kwargs)
