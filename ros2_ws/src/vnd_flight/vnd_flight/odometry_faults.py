"""Odometry faults a fault drill injects between the pose filter and the policy.

Shared by the in-process fault flights (``vnd_flight.fault_flight``) and the fault
injector node of the simulated stack (``vnd_sim.odom_fault_node``), so both inject exactly the
same faults. From the first faulty sample on:

- ``stop``: no odometry at all (the pose filter died);
- ``freeze_fresh``: the last good message repeated with fresh stamps (a frozen driver);
- ``freeze_old``: the last good message repeated with its old stamp;
- ``jump``: every sample 1 m off along x (a motion-capture re-origin);
- ``half_rate``: every other sample dropped;
- ``nan``: every sample's position is NaN.
"""

from __future__ import annotations

import math

import numpy as np
from vnd_core.state import POS

FAULTS = ("none", "stop", "freeze_fresh", "freeze_old", "jump", "half_rate", "nan")
JUMP_M = 1.0  # the re-origin of ``jump``, along x


def check_fault(name: str) -> str:
    """``name`` if it is one of FAULTS; otherwise ValueError listing them."""
    if name not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}, got {name!r}")
    return name


class OdometryFault:
    """Turns the pose filter's output into what the policy receives.

    Samples stamped before ``fault_at_ns`` pass unchanged (the newest is remembered as the last
    good one); from it on ``fault`` acts. ``faulty`` counts the samples the fault acted on.
    """

    def __init__(self, fault: str, fault_at_ns: int) -> None:
        self.fault = check_fault(fault)
        self.fault_at_ns = fault_at_ns
        self.faulty = 0
        self._last_good: tuple[np.ndarray, int] | None = None

    def active(self, stamp_ns: int) -> bool:
        """Whether the fault acts on a sample stamped ``stamp_ns``."""
        return self.fault != "none" and stamp_ns >= self.fault_at_ns

    def __call__(self, state: np.ndarray, stamp_ns: int) -> tuple[np.ndarray, int] | None:
        """(state (13,), stamp) to deliver for a sample, or None when the fault drops it."""
        if not self.active(stamp_ns):
            self._last_good = (state, stamp_ns)
            return state, stamp_ns
        self.faulty += 1
        if self.fault == "stop":
            return None
        if self.fault == "freeze_fresh":
            return None if self._last_good is None else (self._last_good[0], stamp_ns)
        if self.fault == "freeze_old":
            return self._last_good
        if self.fault == "jump":
            moved = state.copy()
            moved[0] += JUMP_M
            return moved, stamp_ns
        if self.fault == "half_rate":
            return (state, stamp_ns) if self.faulty % 2 else None
        broken = state.copy()
        broken[POS] = math.nan
        return broken, stamp_ns
