"""The streams a flight log provides, in the stack's frames, before any check or resampling."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from vnd_core.state import STATE_DIM

from vnd_tools.logimport.thrust_curve import ThrustCurve


@dataclass
class FlightStreams:
    """Time-stamped odometry and command streams of one log file, in file order.

    Frames are the stack's: position and velocity in world ENU, attitude body FLU to world
    ENU (w x y z), body rates FLU. Stamps may repeat or go backwards: the checks handle that.
    """

    source: str  # what the streams came from (file path, with topic or message names)
    state_stamp_ns: np.ndarray  # (N,) int64, stamp of each odometry sample [ns]
    state: np.ndarray  # (N, 13) float64, p [m], q (w x y z), v [m/s], omega [rad/s]
    command_stamp_ns: np.ndarray  # (M,) int64, stamp of each command [ns]
    command: np.ndarray  # (M, 4) float64, collective thrust [N], body rates [rad/s] FLU
    substitutions: list[str] = field(default_factory=list)  # streams made up, and from what
    # (N,) int flight phase of each odometry sample (a mode, say): a change splits the
    # segment, -1 marks samples not in flight (on the ground, disarmed); None: all in flight
    phase: np.ndarray | None = None
    # curve that turned the log's normalised thrust into newtons; None: logged in newtons
    thrust_curve: ThrustCurve | None = None
    notes: list[str] = field(default_factory=list)  # choices the reader made (e.g. instances)

    def __post_init__(self) -> None:
        self.state_stamp_ns = np.asarray(self.state_stamp_ns, dtype=np.int64)
        self.state = np.asarray(self.state, dtype=np.float64)
        self.command_stamp_ns = np.asarray(self.command_stamp_ns, dtype=np.int64)
        self.command = np.asarray(self.command, dtype=np.float64)
        n, m = len(self.state_stamp_ns), len(self.command_stamp_ns)
        if self.state.shape != (n, STATE_DIM):
            raise ValueError(f"{self.source}: state must be ({n}, 13), got {self.state.shape}")
        if self.command.shape != (m, 4):
            raise ValueError(f"{self.source}: command must be ({m}, 4), got {self.command.shape}")
        if self.phase is not None:
            self.phase = np.asarray(self.phase, dtype=np.int64)
            if self.phase.shape != (n,):
                raise ValueError(f"{self.source}: phase must be ({n},), got {self.phase.shape}")


def held_values(stamps: np.ndarray, values: np.ndarray, at: np.ndarray, before: int) -> np.ndarray:
    """``values`` (M,) last logged at or before each of ``at`` (N,), stamps (M,) sorted and on
    the same clock; ``before`` ahead of the first."""
    index = np.searchsorted(stamps, at, side="right") - 1
    return np.where(index >= 0, values[np.maximum(index, 0)], before)
