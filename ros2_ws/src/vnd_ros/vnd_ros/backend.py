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
    missing = _import_problem("rclpy" if choice == "rclpy" else "cyclonedds")
    if missing:
        raise BackendUnavailableError(f"VND_MIDDLEWARE={choice}: {missing}")
    return choice


class BackendUnavailableError(ValueError):
    """The selected backend's middleware does not import in this environment."""


_HOW_TO_INSTALL = {
    "rclpy": "run `make ros` (ROS 2 Jazzy from the PyPI wheels into this venv) or source "
    "/opt/ros/jazzy/setup.bash",
    "cyclonedds": "run `make setup` (installs the cyclonedds package of requirements.txt)",
}


def _import_problem(module: str) -> str | None:
    """None when ``module`` imports, else one line: what failed and how to install it."""
    try:
        importlib.import_module(module)
    except ImportError as error:  # also a shared library that does not load
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"{module} does not import here ({first_line}); {_HOW_TO_INSTALL[module]}"
    return None


def ros_distro() -> str:
    """ROS 2 distro whose message definitions and discovery format the dds backend uses."""
    distro = (os.environ.get("VND_ROS_DISTRO") or os.environ.get("ROS_DISTRO") or "jazzy").lower()
    if distro not in SUPPORTED_DISTROS:
        raise ValueError(f"ROS distro {distro!r} not supported (use one of {SUPPORTED_DISTROS})")
    return distro
