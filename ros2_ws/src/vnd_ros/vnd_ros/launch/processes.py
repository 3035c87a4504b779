"""Records of the processes a launch runs: the respawn policy, what a process is and did
(:class:`ProcessInfo`), the launch events, and where logs go by default.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RespawnPolicy:
    """When ``vnd launch`` stops respawning a crash-looping process."""

    startup_window_s: float = 10.0  # a run shorter than this counts as a start-up failure
    startup_failure_limit: int = 3  # start-up failures in a row after which respawning stops
    backoff_max_s: float = 30.0  # cap of the delay, which doubles per start-up failure
    backoff_min_s: float = 0.25  # base of the doubling when the file's respawn_delay is 0


@dataclass(frozen=True)
class ProcessInfo:
    """A snapshot of one launched process."""

    name: str  # unique label from the launch file
    pid: int | None  # OS pid of the current (or last) run, None if it never started
    running: bool  # True while the process is alive
    returncode: int | None  # exit status of the last run, None while running
    starts: int  # how many times it was started (1 + respawns)
    node_name: str | None  # fully qualified node name when the launch file set one
    required: bool = False  # on_exit: shutdown -- its exit ends the launch
    respawn_pending: bool = False  # exited and waiting for its scheduled respawn
    gave_up: str | None = None  # why respawning stopped (budget used up), None otherwise

    @property
    def respawns(self) -> int:
        """How many times the process was restarted after an exit."""
        return max(self.starts - 1, 0)


@dataclass(frozen=True)
class LaunchEvent:
    """Something the launcher did or saw, in order (``LaunchService.events``)."""

    kind: str  # "exit", "respawn" (scheduled), "gave_up" or "required_exit"
    name: str  # process label
    time_s: float  # time.monotonic() when it happened
    pid: int | None  # pid of the run concerned
    returncode: int | None  # exit status of that run ("exit", "gave_up", "required_exit")
    uptime_s: float | None  # how long that run lived
    detail: str  # the line reported for it


def default_log_dir() -> Path:
    """``$ROS_LOG_DIR`` or ``~/.ros/log``, plus a per-run folder like ros2 launch uses."""
    root = Path(os.environ.get("ROS_LOG_DIR") or Path.home() / ".ros" / "log")
    return root / time.strftime(f"vnd-launch-%Y-%m-%d-%H-%M-%S-{os.getpid()}")
