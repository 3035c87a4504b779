"""Time, Duration and Clock of the dds backend, with rclpy's surface.

ROS time here is the system (wall) clock in nanoseconds since the Unix epoch, as rclpy's ROS
clock without ``use_sim_time``. Timers do not use it: they run on the monotonic clock so a
wall-clock step never bunches or skips ticks.
"""

from __future__ import annotations

import time
from functools import total_ordering
from typing import Any

from vnd_core.units import NS_PER_S


@total_ordering
class Duration:
    """A signed span of time (rclpy.duration.Duration subset)."""

    __slots__ = ("_ns",)

    def __init__(self, *, seconds: float = 0, nanoseconds: int = 0) -> None:
        self._ns = round(seconds * NS_PER_S) + int(nanoseconds)

    @property
    def nanoseconds(self) -> int:
        """Length in nanoseconds."""
        return self._ns

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and self._ns == other._ns

    def __lt__(self, other: Duration) -> bool:
        return self._ns < other._ns

    def __hash__(self) -> int:
        return hash(self._ns)

    def __repr__(self) -> str:
        return f"Duration(nanoseconds={self._ns})"

    def to_msg(self) -> Any:
        """builtin_interfaces/msg/Duration of this span."""
        from vnd_ros.messages import get_message

        sec, nanosec = divmod(self._ns, NS_PER_S)
        return get_message("builtin_interfaces/msg/Duration")(sec=sec, nanosec=nanosec)


@total_ordering
class Time:
    """A point in ROS time (rclpy.time.Time subset): ``seconds`` + ``nanoseconds`` since epoch."""

    __slots__ = ("_ns",)

    def __init__(self, *, seconds: float = 0, nanoseconds: int = 0) -> None:
        self._ns = int(seconds * NS_PER_S) + int(nanoseconds)
        if self._ns < 0:
            raise ValueError(f"Time cannot be negative ({self._ns} ns)")

    @property
    def nanoseconds(self) -> int:
        """Nanoseconds since the Unix epoch."""
        return self._ns

    def seconds_nanoseconds(self) -> tuple[int, int]:
        """(whole seconds, remaining nanoseconds), like rclpy."""
        sec, nanosec = divmod(self._ns, NS_PER_S)
        return sec, nanosec

    def to_msg(self) -> Any:
        """builtin_interfaces/msg/Time of this instant."""
        from vnd_ros.messages import get_message

        sec, nanosec = self.seconds_nanoseconds()
        return get_message("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)

    @classmethod
    def from_msg(cls, msg: Any) -> Time:
        """Time of a builtin_interfaces/msg/Time (anything with ``sec`` and ``nanosec``)."""
        return cls(seconds=msg.sec, nanoseconds=msg.nanosec)

    def __add__(self, other: Duration) -> Time:
        return Time(nanoseconds=self._ns + other.nanoseconds)

    def __sub__(self, other: Time | Duration) -> Any:
        if isinstance(other, Time):
            return Duration(nanoseconds=self._ns - other._ns)
        return Time(nanoseconds=self._ns - other.nanoseconds)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and self._ns == other._ns

    def __lt__(self, other: Time) -> bool:
        return self._ns < other._ns

    def __hash__(self) -> int:
        return hash(self._ns)

    def __repr__(self) -> str:
        return f"Time(nanoseconds={self._ns})"


class Clock:
    """The system clock as rclpy's ROS clock (``now()``)."""

    def now(self) -> Time:
        """Current wall-clock time."""
        return Time(nanoseconds=time.time_ns())
