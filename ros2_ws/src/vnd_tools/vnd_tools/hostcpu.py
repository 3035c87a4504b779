"""The host's CPU time during a flight, to tell a slow tick the stack caused from one the host did.

On a virtual machine the hypervisor can take a vCPU away for milliseconds at a time ("steal"
time: the vCPU was ready to run and the host ran something else). No scheduling class inside
the guest helps against that, SCHED_FIFO included, and on a 2-vCPU guest the control path's
tail follows the steal: windows with steal have a p99 two to three times that of quiet ones.
So ``vnd fly`` samples the machine's CPU times ten times a second; the report splits the
control latency by the steal of each 10-s window, and tells the late ticks during which the
machine lost time to steal from the others.

Linux only (``/proc/stat``); elsewhere nothing is sampled and the report says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PROC_STAT = Path("/proc/stat")
# the aggregate "cpu" line's fields, in /proc/stat order (USER_HZ ticks)
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
STEAL = FIELDS.index("steal")
IDLE = FIELDS.index("idle")
SAMPLE_PERIOD_S = 0.1  # ten samples a second: steal is counted in 10-ms units
WINDOW_S = 10.0  # latency is split by the steal of windows this long
LOW_STEAL = 0.01  # a window with less steal than this share of its CPU time is "quiet"


def read_cpu_times(path: Path = PROC_STAT) -> np.ndarray | None:
    """The machine's cumulative CPU times (8,) in :data:`FIELDS` order, or None when
    ``path`` cannot be read (not Linux)."""
    try:
        with path.open() as stat:
            first = stat.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 1 + len(FIELDS):
        return None
    return np.array([int(v) for v in first[1 : 1 + len(FIELDS)]], dtype=np.int64)


@dataclass
class CpuSampler:
    """Samples :func:`read_cpu_times` at most once per :data:`SAMPLE_PERIOD_S`; call
    :meth:`poll` often (the flight monitor's loop does)."""

    path: Path = PROC_STAT
    wall_s: list[float] = field(default_factory=list)  # time.time() of each sample
    times: list[np.ndarray] = field(default_factory=list)  # (8,) CPU times of each sample

    def poll(self) -> None:
        """Take a sample when the last one is a period old."""
        now = time.time()
        if self.wall_s and now - self.wall_s[-1] < SAMPLE_PERIOD_S:
            return
        sample = read_cpu_times(self.path)
        if sample is not None:
            self.wall_s.append(now)
            self.times.append(sample)

    def save(self, path: Path) -> None:
        """Write the samples as a numpy archive (``wall_s`` (N,), ``cpu_times`` (N, 8))."""
        times = np.array(self.times, dtype=np.int64).reshape(-1, len(FIELDS))
        np.savez(path, wall_s=np.array(self.wall_s, dtype=float), cpu_times=times)


def steal_by_window(
    wall_s: np.ndarray,
    cpu_times: np.ndarray,
    tick_wall_s: np.ndarray,
    latency_ms: np.ndarray,
    period_s: float,
    window_s: float = WINDOW_S,
) -> dict | None:
    """The host's steal over the flight and the control latency split by each window's steal.

    ``wall_s`` (N,) and ``cpu_times`` (N, 8): the sampler's; ``tick_wall_s`` (M,) sorted wall
    times of the control ticks and ``latency_ms`` (M,) their latencies. Windows of
    ``window_s`` start at the first tick (the last one ends at the last tick); a window counts
    when samples bracket it, and its steal is measured between the bracketing samples. A gap of
    more than 1.5 ``period_s`` between consecutive ticks counts as a late tick of the window
    it ends in; it counts as "during steal" when the samples around its gap show steal time.
    None when fewer than two samples cover the ticks.
    """
    if len(wall_s) < 2 or len(tick_wall_s) == 0:
        return None
    start, end = float(tick_wall_s[0]), float(tick_wall_s[-1])
    inside = (wall_s >= start - SAMPLE_PERIOD_S) & (wall_s <= end + SAMPLE_PERIOD_S)
    if inside.sum() < 2:
        return None
    total = cpu_times[inside][-1] - cpu_times[inside][0]
    late = np.concatenate([[False], np.diff(tick_wall_s) > 1.5 * period_s])
    groups: dict[str, list[tuple[np.ndarray, float]]] = {"quiet": [], "steal": []}
    for lo in np.arange(start, end, window_s):
        first = np.searchsorted(wall_s, lo, side="right") - 1
        last = np.searchsorted(wall_s, min(lo + window_s, end), side="left")
        if first < 0 or last >= len(wall_s):
            continue
        used = cpu_times[last] - cpu_times[first]
        share = float(used[STEAL] / max(int(used.sum()), 1))
        ticks = (tick_wall_s >= lo) & (tick_wall_s < lo + window_s)
        groups["quiet" if share < LOW_STEAL else "steal"].append((ticks, share))
    split = {name: _group_figures(rows, latency_ms, late) for name, rows in groups.items()}
    during = sum(
        _steal_between(wall_s, cpu_times, tick_wall_s[i - 1], tick_wall_s[i]) > 0
        for i in np.flatnonzero(late)
    )
    return {
        "steal_fraction": round(float(total[STEAL] / max(int(total.sum()), 1)), 4),
        "idle_fraction": round(float(total[IDLE] / max(int(total.sum()), 1)), 4),
        "window_s": window_s,
        "quiet_below_steal": LOW_STEAL,
        **split,
        "late_ticks": int(late.sum()),
        "late_ticks_during_steal": int(during),
    }


def _steal_between(wall_s: np.ndarray, cpu_times: np.ndarray, t0_s: float, t1_s: float) -> int:
    """Steal time (USER_HZ ticks) between the last sample before ``t0_s`` and the first after
    ``t1_s`` (0 when samples do not bracket the span)."""
    first = np.searchsorted(wall_s, t0_s, side="right") - 1
    last = np.searchsorted(wall_s, t1_s, side="left")
    if first < 0 or last >= len(wall_s):
        return 0
    return int(cpu_times[last][STEAL] - cpu_times[first][STEAL])


def _group_figures(rows: list, latency_ms: np.ndarray, late: np.ndarray) -> dict:
    """Windows, ticks, p99 latency [ms] and late ticks of one group of windows."""
    if not rows:
        return {"windows": 0, "ticks": 0, "p99_ms": None, "late_ticks": 0, "max_steal": None}
    mask = np.any([ticks for ticks, _ in rows], axis=0)
    p99 = float(np.percentile(latency_ms[mask], 99)) if mask.any() else None
    return {
        "windows": len(rows),
        "ticks": int(mask.sum()),
        "p99_ms": None if p99 is None else round(p99, 3),
        "late_ticks": int(late[mask].sum()),
        "max_steal": round(max(share for _, share in rows), 4),
    }
