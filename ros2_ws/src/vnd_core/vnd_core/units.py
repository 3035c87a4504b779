"""Unit conversion factors shared by every package (one definition of each)."""

from __future__ import annotations

NS_PER_S = 1_000_000_000  # nanoseconds per second (ROS stamps and clocks count nanoseconds)
NS_PER_MS = 1_000_000  # nanoseconds per millisecond
