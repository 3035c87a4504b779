"""Which middleware backend runs the nodes, and which ROS 2 distro's wire format to speak.

``VND_MIDDLEWARE=rclpy|dds|auto`` (default auto: rclpy when it imports, else dds).
``VND_ROS_DISTRO`` (else ``ROS_DISTRO``, else jazzy) picks the standard message definitions and
the graph-discovery details (Gid size, type hashes) of the dds backend.
"""

from __future__ import annotations

import importlib.util
import os

BACKENDS = ("rclpy", "dds")
SUPPORTED_DISTROS = ("jazzy", "humble")


def rclpy_available() -> bool:
    """True when a ROS 2 install provides rclpy in this interpreter."""
    return importlib.util.find_spec("rclpy") is not None


def backend_name() -> str:
    """The selected backend, ``rclpy`` or ``dds``; an unknown value raises ValueError."""
    choice = os.environ.get("VND_MIDDLEWARE", "auto").strip().lower()
    if choice == "auto":
        return "rclpy" if rclpy_available() else "dds"
    if choice not in BACKENDS:
        raise ValueError(f"VND_MIDDLEWARE={choice!r}: expected one of rclpy, dds, auto")
    if choice == "rclpy" and not rclpy_available():
        raise ValueError("VND_MIDDLEWARE=rclpy but rclpy does not import: source a ROS 2 setup")
    return choice


def ros_distro() -> str:
    """ROS 2 distro whose message definitions and discovery format the dds backend uses."""
    distro = (os.environ.get("VND_ROS_DISTRO") or os.environ.get("ROS_DISTRO") or "jazzy").lower()
    if distro not in SUPPORTED_DISTROS:
        raise ValueError(f"ROS distro {distro!r} not supported (use one of {SUPPORTED_DISTROS})")
    return distro
