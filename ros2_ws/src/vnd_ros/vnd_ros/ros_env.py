"""The environment node processes start with: DDS on loopback, and rclpy from the PyPI wheels.

Both middlewares stay on this machine unless the operator chooses otherwise: the dds backend
(Cyclone DDS) reads ``CYCLONEDDS_URI`` and rclpy's rmw_fastrtps_cpp reads
``FASTDDS_DEFAULT_PROFILES_FILE`` (``FASTRTPS_DEFAULT_PROFILES_FILE`` for older Fast DDS); each
is set to the project's loopback file only when unset, so a flight computer's own choice wins.

When rclpy comes from the ``ros-jazzy-*`` wheels in this venv (``make ros``) rather than a
sourced ``/opt/ros/jazzy``, its shared libraries live in ``<venv>/lib`` and
``site-packages/ros_*.libs``: :func:`wheel_environment` gives the ``LD_LIBRARY_PATH`` and
``RMW_IMPLEMENTATION`` that let it find them (rmw and typesupport libraries are loaded by name
through ``LD_LIBRARY_PATH``). ``AMENT_PREFIX_PATH`` is left as it is: with the venv on it, the
dds backend would read vnd_msgs' definitions from the built copy in ``<venv>/share`` instead
of the source tree, stale as soon as a ``.msg`` file changes before the next ``make ros``. The
wheels' ``ros_wheels_bootstrapper`` otherwise re-executes every Python start of the venv to
set ``LD_LIBRARY_PATH``; its guard variable is set too, as the variables are then right.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from vnd_ros.paths import REPO_ROOT

LOOPBACK_CYCLONEDDS = REPO_ROOT / "config" / "cyclonedds_loopback.xml"
LOOPBACK_FASTDDS = REPO_ROOT / "config" / "fastdds_loopback.xml"
FASTDDS_PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
WHEEL_RMW = "rmw_fastrtps_cpp"  # the only RMW the PyPI wheels carry
BOOTSTRAP_GUARD = "_ROS_WHEELS_BOOTSTRAP_COMPLETE"


def loopback_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default os.environ) with the loopback Cyclone and Fast DDS files when unset."""
    env = dict(os.environ if base is None else base)
    if "CYCLONEDDS_URI" not in env and LOOPBACK_CYCLONEDDS.exists():
        env["CYCLONEDDS_URI"] = f"file://{LOOPBACK_CYCLONEDDS}"
    if LOOPBACK_FASTDDS.exists():
        for name in FASTDDS_PROFILE_VARIABLES:
            env.setdefault(name, str(LOOPBACK_FASTDDS))
    return env


def wheel_library_dirs(prefix: Path | str | None = None) -> list[Path]:
    """``<prefix>/lib`` and the ``ros_*.libs`` folders of the wheels ([] when not installed)."""
    root = Path(sys.prefix if prefix is None else prefix)
    libs = sorted(p for p in root.glob("lib/python3*/site-packages/ros_*.libs") if p.is_dir())
    return [root / "lib", *libs] if libs else []


def wheel_environment(
    base: Mapping[str, str] | None = None, prefix: Path | str | None = None
) -> dict[str, str]:
    """``base`` (default os.environ) plus what rclpy from the wheels under ``prefix`` (default
    this interpreter's venv) needs; ``base`` unchanged when the wheels are not installed."""
    env = dict(os.environ if base is None else base)
    dirs = wheel_library_dirs(prefix)
    if not dirs:
        return env
    env["LD_LIBRARY_PATH"] = _prepend([str(d.resolve()) for d in dirs], env.get("LD_LIBRARY_PATH"))
    env.setdefault("RMW_IMPLEMENTATION", WHEEL_RMW)
    env[BOOTSTRAP_GUARD] = "1"
    return env


def node_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Loopback DDS files and the wheels' variables: what every node process starts with."""
    return wheel_environment(loopback_environment(base))


def _prepend(entries: list[str], current: str | None) -> str:
    existing = [p for p in (current or "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(entries + existing))
