"""Host stall probe: tells a late control tick the host caused from one the stack caused.

The 10-Hz steal samples of :mod:`vnd_tools.hostcpu` count steal in 10-ms units and
cannot place a short steal burst against one late tick. This probe can: one process per CPU,
pinned to it and run under SCHED_FIFO at the highest priority, sleeps ``period_s`` at a time
and records every wake-up that came more than ``threshold_s`` late. Nothing the stack runs can
delay such a process (the control path and the encoder run at lower FIFO priorities, the rest
under the normal or idle scheduler), so a stall it sees is the host's: the hypervisor took the
vCPU away, or the kernel ran with interrupts off. A late tick with no probe stall around it is
the stack's.

The probe costs about 2.7 % of a core per CPU (500 wake-ups a second; measured idle over
20 s). Linux only; without CAP_SYS_NICE it still runs, at normal priority, and says so
(``realtime`` false: its stalls then include ordinary scheduling delay and prove nothing about
the host).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vnd_tools.rtcensus import RealtimeUse

PROBE_PERIOD_S = 0.002  # sleep per probe iteration
STALL_THRESHOLD_S = 0.001  # a wake-up this much later than asked counts as a stall
PROBE_PRIORITY = 99  # above the control path's SCHED_FIFO priority (launch default 20)
_POLL_EVERY = 50  # probe iterations between checks of the stop pipe (0.1 s)


@dataclass
class CpuStalls:
    """What the probe pinned to one CPU saw."""

    cpu: int  # CPU index
    realtime: bool  # True when the probe ran under SCHED_FIFO
    wakeups: int  # probe iterations
    start_wall_s: np.ndarray  # (K,) wall time [s] the stalled sleep began
    end_wall_s: np.ndarray  # (K,) wall time [s] the probe woke from it
    period_s: float = PROBE_PERIOD_S  # the sleep the probe asked for [s]

    @property
    def lateness_s(self) -> np.ndarray:
        """(K,) how much later than asked each stalled wake-up came [s]."""
        return self.end_wall_s - self.start_wall_s - self.period_s


def _probe_cpu(cpu: int, period_s: float, threshold_s: float, priority: int) -> dict:
    """Pin to ``cpu``, try SCHED_FIFO, record late wake-ups until stdin has input or closes."""
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        realtime = True
    except OSError:
        realtime = False
    # Wall time from one monotonic reading: wall clock steps must not fake or hide a stall.
    offset_ns = time.time_ns() - time.monotonic_ns()
    limit_ns = round((period_s + threshold_s) * 1e9)
    stalls: list[list[int]] = []
    wakeups = 0
    last_ns = time.monotonic_ns()
    while True:
        time.sleep(period_s)
        now_ns = time.monotonic_ns()
        if now_ns - last_ns > limit_ns:
            stalls.append([last_ns + offset_ns, now_ns + offset_ns])
        wakeups += 1
        if wakeups % _POLL_EVERY == 0 and select.select([sys.stdin], [], [], 0)[0]:
            break
        last_ns = time.monotonic_ns()  # the check above is not part of the next sleep
    return {"cpu": cpu, "realtime": realtime, "wakeups": wakeups, "stalls_ns": stalls}


@dataclass
class StallProbe:
    """One probe process per CPU of this process's affinity set; ``start`` then ``stop``."""

    period_s: float = PROBE_PERIOD_S  # sleep per iteration [s]
    threshold_s: float = STALL_THRESHOLD_S  # lateness that counts as a stall [s]
    priority: int = PROBE_PRIORITY  # SCHED_FIFO priority of the probes
    _children: list[subprocess.Popen] = field(default_factory=list)

    def start(self) -> None:
        """Start the probes (a no-op when they run)."""
        if self._children:
            return
        for cpu in sorted(os.sched_getaffinity(0)):
            command = [
                sys.executable, "-m", "vnd_tools.hoststall", str(cpu),
                str(self.period_s), str(self.threshold_s), str(self.priority),
            ]  # fmt: skip
            self._children.append(
                subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            )

    def stop(self, timeout_s: float = 5.0) -> list[CpuStalls]:
        """Stop the probes; what each saw, by CPU."""
        results = []
        for child in self._children:
            try:
                out, _ = child.communicate("stop\n", timeout=timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                raise RuntimeError(f"stall probe (pid {child.pid}) did not answer stop") from None
            if child.returncode != 0:
                raise RuntimeError(f"stall probe (pid {child.pid}) exited {child.returncode}")
            data = json.loads(out)
            rows = np.array(data["stalls_ns"], dtype=np.int64).reshape(-1, 2)
            start_s, end_s = rows[:, 0] / 1e9, rows[:, 1] / 1e9
            results.append(
                CpuStalls(data["cpu"], data["realtime"], data["wakeups"], start_s, end_s)
            )
        self._children = []
        return results


def save_stalls(path: Path, probes: list[CpuStalls]) -> None:
    """Write what the probes saw as a numpy archive (no pickle): ``cpus``, ``realtime``,
    ``wakeups``, ``period_s`` (C,) and ``cpu<N>`` (K, 2) wall start / end [s] per CPU."""
    arrays = {
        "cpus": np.array([p.cpu for p in probes], dtype=np.int64),
        "realtime": np.array([p.realtime for p in probes], dtype=bool),
        "wakeups": np.array([p.wakeups for p in probes], dtype=np.int64),
        "period_s": np.array([p.period_s for p in probes], dtype=float),
    }
    arrays |= {f"cpu{p.cpu}": np.stack([p.start_wall_s, p.end_wall_s], axis=1) for p in probes}
    np.savez(path, allow_pickle=False, **arrays)


def load_stalls(path: Path) -> list[CpuStalls]:
    """The probes saved by :func:`save_stalls`."""
    with np.load(path, allow_pickle=False) as data:
        return [
            CpuStalls(
                int(cpu),
                bool(data["realtime"][i]),
                int(data["wakeups"][i]),
                data[f"cpu{cpu}"][:, 0],
                data[f"cpu{cpu}"][:, 1],
                float(data["period_s"][i]),
            )
            for i, cpu in enumerate(data["cpus"])
        ]


def late_gaps(event_wall_s: np.ndarray, period_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end wall times [s] of the gaps longer than 1.5 ``period_s`` between
    consecutive events of ``event_wall_s`` (N,) (sorted here); each is one late tick."""
    times = np.sort(np.asarray(event_wall_s, dtype=float))
    gaps = np.diff(times)
    late = np.flatnonzero(gaps > 1.5 * period_s)
    return times[late], times[late + 1]


def attribute_late_ticks(
    tick_wall_s: np.ndarray,
    period_s: float,
    probes: list[CpuStalls],
    upstream_wall_s: np.ndarray | None = None,
    realtime: RealtimeUse | None = None,
) -> dict:
    """Split the late ticks of ``tick_wall_s`` (N,) into those the host explains and the rest.

    A late tick is a gap of more than 1.5 ``period_s`` between consecutive ticks, late by the
    gap minus one period. Each CPU's lost time in the gap is the part of its probe's stalls
    (from the asked wake-up to the real one) inside the gap. The tick counts as the host's when
    one CPU lost at least half as much time as the tick was late (a short stall does not
    explain a long delay; the host often takes a vCPU in several bursts, so they add up).
    ``upstream_wall_s`` (M,), the publication times of the input the ticks answer, gives each
    late tick the longest input gap around it (a late input points upstream). ``realtime``,
    the census of other processes' real-time threads (:mod:`vnd_tools.rtcensus`), gives each
    the CPU time they took during it; a tick the host does not explain counts as theirs when
    they took at least half as much as it was late. The rest are the stack's own
    (``late_ticks_stack``). Returns the counts and one row per late tick.
    """
    starts, ends = late_gaps(tick_wall_s, period_s)
    upstream = None if upstream_wall_s is None else np.sort(np.asarray(upstream_wall_s, float))
    rows: list[dict[str, Any]] = []
    for t0, t1 in zip(starts, ends, strict=True):
        lost = {str(probe.cpu): round(cpu_lost_s(probe, t0, t1) * 1e3, 2) for probe in probes}
        lateness_ms = float(t1 - t0 - period_s) * 1e3
        row: dict[str, Any] = {
            "start_wall_s": round(float(t0), 4),
            "gap_ms": round(float(t1 - t0) * 1e3, 2),
            "cpu_lost_ms": lost,
            "host": bool(lost) and max(lost.values()) >= 0.5 * lateness_ms,
        }
        if realtime is not None:
            foreign_ms = realtime.cpu_in_gap_ms(float(t0), float(t1))
            row["foreign_realtime_ms"] = round(foreign_ms, 1)
            row["foreign_realtime"] = not row["host"] and foreign_ms >= 0.5 * lateness_ms
        if upstream is not None:
            row["input_gap_ms"] = _longest_gap_ms(upstream, t0, t1)
        rows.append(row)
    host = sum(1 for row in rows if row["host"])
    foreign = sum(1 for row in rows if row.get("foreign_realtime"))
    return {
        "late_ticks": len(rows),
        "late_ticks_with_host_stall": host,
        "late_ticks_without_host_stall": len(rows) - host,
        "late_ticks_with_foreign_realtime": foreign,
        "late_ticks_stack": len(rows) - host - foreign,
        "late": rows,
    }


def cpu_lost_s(probe: CpuStalls, t0_s: float, t1_s: float) -> float:
    """Time [s] inside (t0_s, t1_s) that the probe's CPU was taken away: the stalled wake-ups,
    each from the time it was asked for to the time it came, clipped to the span."""
    asked = probe.start_wall_s + probe.period_s
    overlap = np.minimum(probe.end_wall_s, t1_s) - np.maximum(asked, t0_s)
    return float(np.clip(overlap, 0.0, None).sum())


def _longest_gap_ms(times: np.ndarray, t0: float, t1: float) -> float | None:
    """Longest gap [ms] between consecutive ``times`` from the last one at or before ``t0`` to
    the first one after ``t1`` (the input the tick was waiting for)."""
    lo = max(int(np.searchsorted(times, t0, side="right")) - 1, 0)
    hi = int(np.searchsorted(times, t1, side="right")) + 1
    inside = times[lo:hi]
    if len(inside) < 2:
        return None
    return round(float(np.diff(inside).max()) * 1e3, 2)


def probe_summary(probes: list[CpuStalls], start_wall_s: float, end_wall_s: float) -> dict:
    """Per CPU: realtime or not, wake-ups, stalls and their total and longest lateness [ms]
    between the two wall times (the flight)."""
    out = {}
    for probe in probes:
        inside = (probe.end_wall_s >= start_wall_s) & (probe.start_wall_s <= end_wall_s)
        late_ms = probe.lateness_s[inside] * 1e3
        out[str(probe.cpu)] = {
            "realtime": probe.realtime,
            "wakeups": probe.wakeups,
            "stalls": int(inside.sum()),
            "stall_total_ms": round(float(late_ms.sum()), 1),
            "longest_ms": round(float(late_ms.max()), 2) if late_ms.size else 0.0,
        }
    return out


if __name__ == "__main__":  # one probe process: CPU, period [s], threshold [s], priority
    cpu_arg, period_arg, threshold_arg, priority_arg = sys.argv[1:5]
    print(
        json.dumps(
            _probe_cpu(int(cpu_arg), float(period_arg), float(threshold_arg), int(priority_arg))
        )
    )


def host_stall_report(
    probes: list[CpuStalls],
    tick_wall_s: np.ndarray,
    input_wall_s: np.ndarray,
    period_s: float,
    realtime: RealtimeUse | None = None,
) -> dict:
    """The flight's probe summary and its late ticks put against it (report.json
    ``host_stalls``): ``tick_wall_s`` (N,) every tick's publication time, ``input_wall_s``
    (M,) the input's (odometry); ``realtime`` the census of other processes' real-time
    threads, whose processes are listed (``foreign_realtime_processes``)."""
    ticks = np.sort(np.asarray(tick_wall_s, dtype=float))
    if len(ticks) < 2:
        return {"probed": True, "late_ticks": 0, "probe": {}}
    split = attribute_late_ticks(ticks, period_s, probes, input_wall_s, realtime)
    report = {"probed": True, "probe": probe_summary(probes, ticks[0], ticks[-1]), **split}
    if realtime is not None:
        report["foreign_realtime_processes"] = realtime.processes
    return report
