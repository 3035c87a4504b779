"""Locate package share directories with or without a ROS install."""

from __future__ import annotations

import os
from pathlib import Path

WORKSPACE_SRC = Path(__file__).resolve().parents[2]  # ros2_ws/src of this checkout
REPO_ROOT = WORKSPACE_SRC.parents[1]


def find_package_share(package: str) -> Path:
    """Share directory of ``package``: the ament index first, then this source checkout.

    Raises LookupError naming the package when neither has it.
    """
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        marker = Path(prefix) / "share/ament_index/resource_index/packages" / package
        if marker.exists():
            return Path(prefix) / "share" / package
    source = WORKSPACE_SRC / package
    if (source / "package.xml").exists():
        return source
    raise LookupError(f"package '{package}' not found in AMENT_PREFIX_PATH nor in {WORKSPACE_SRC}")
