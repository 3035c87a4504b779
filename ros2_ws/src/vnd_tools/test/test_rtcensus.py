"""The real-time census of vnd fly's host diagnostics: it counts the CPU time that real-time
threads outside the flight's process tree take (a SCHED_FIFO busy loop of another process
here), not the flight's own real-time nodes nor other processes' normal threads, and a late
tick those took the CPU for is told from the stack's own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from vnd_tools import hoststall, rtcensus

PERIOD_S = 0.02
# A busy loop for argv[1] seconds, under SCHED_FIFO 1 when argv[2] is "rt" (below every
# control-path priority, so a test run beside a flight delays nothing of it), then asleep for
# argv[3] seconds (default none) before it exits.
BUSY = """
import os, sys, time
if sys.argv[2] == "rt":
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
print("BUSY", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
"""
# The flight's stand-in: a process whose child is a real-time busy loop (its own node).
ROOT = """
import subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2], "rt"], check=True)
"""


def _realtime_allowed() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


@pytest.mark.skipif(
    sys.platform != "linux" or not _realtime_allowed(), reason="needs Linux and CAP_SYS_NICE"
)
def test_the_census_counts_other_processes_realtime_cpu_only():
    busy_s = 0.6
    root = subprocess.Popen([sys.executable, "-c", ROOT, BUSY, str(busy_s)])
    time.sleep(0.3)  # the root's own real-time child is running
    period_s = 0.05
    census = rtcensus.RealtimeCensus(root_pid=root.pid, period_s=period_s)
    census.start()
    time.sleep(0.2)
    # The foreign loop stays alive, asleep, for several census periods after its busy time:
    # while two real-time loops hold both CPUs of a small machine the census's own thread may
    # not run, and CPU time a process uses after the last scan before it exits is not counted.
    linger_s = 0.5
    foreign = subprocess.Popen(
        [sys.executable, "-c", BUSY, str(busy_s), "rt", str(linger_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    normal = subprocess.Popen([sys.executable, "-c", BUSY, str(busy_s), "normal"])
    # The kernel's own account of the foreign loop's CPU time is the truth to compare with:
    # the loop runs for busy_s of wall time, but the host may take the vCPU away for part of
    # it, and that part is nobody's CPU time.
    _, status, usage = os.wait4(foreign.pid, 0)
    foreign.returncode = os.waitstatus_to_exitcode(status)
    true_s = usage.ru_utime + usage.ru_stime
    normal.wait(timeout=30)
    root.wait(timeout=30)
    time.sleep(0.2)
    use = census.stop()
    counted_s = float(use.foreign_cpu_s[-1])
    # All of the foreign loop's time but what it used before the scan before it turned real
    # time (part of its interpreter's start-up: tens of milliseconds) and the counters' 10-ms
    # steps; none of the root's child, which ran before.
    assert true_s > 0.2, true_s
    assert true_s - 0.08 <= counted_s <= true_s + 0.02, (counted_s, true_s)
    assert [p["pid"] for p in use.processes] == [foreign.pid]  # not the root's child, not normal
    assert use.processes[0]["priority"] == 1
    assert use.processes[0]["command"].startswith(sys.executable)
    saved = rtcensus.RealtimeUse(use.wall_s, use.foreign_cpu_s, use.processes)
    assert saved.cpu_in_gap_ms(use.wall_s[0], use.wall_s[-1]) == pytest.approx(
        1e3 * counted_s, rel=1e-6
    )


def test_save_and_load_round_trip(tmp_path):
    use = rtcensus.RealtimeUse(
        np.array([1.0, 1.2, 1.4]),
        np.array([0.0, 0.1, 0.3]),
        [{"pid": 7, "priority": 20, "cpu_s": 0.3, "command": "python -m vnd_policy.policy_node"}],
    )
    rtcensus.save_use(tmp_path / "census.npz", use)
    back = rtcensus.load_use(tmp_path / "census.npz")
    np.testing.assert_array_equal(back.wall_s, use.wall_s)
    np.testing.assert_array_equal(back.foreign_cpu_s, use.foreign_cpu_s)
    assert back.processes == use.processes
    empty = rtcensus.RealtimeUse(np.zeros(0), np.zeros(0), [])
    rtcensus.save_use(tmp_path / "empty.npz", empty)
    assert rtcensus.load_use(tmp_path / "empty.npz").processes == []


def test_late_ticks_are_split_into_the_hosts_other_realtime_tasks_and_the_stacks():
    ticks = list(np.arange(100.0, 101.0, PERIOD_S))
    ticks += list(101.3 + np.arange(0.0, 1.0, PERIOD_S))  # 300-ms gap at 101.0 (two hogs)
    ticks += list(102.34 + np.arange(0.0, 1.0, PERIOD_S))  # 60-ms gap at 102.28 (steady 10 %)
    ticks += list(103.38 + np.arange(0.0, 1.0, PERIOD_S))  # 60-ms gap at 103.32 (the host)
    ticks = np.array(ticks)
    wall = np.arange(99.0, 105.0, 0.2)
    rate = np.full(len(wall) - 1, 0.1)  # a steady tenth of a core all flight...
    rate[(wall[:-1] >= 100.95) & (wall[:-1] < 101.35)] = 1.9  # ...and both CPUs for 0.4 s
    cpu_s = np.concatenate([[0.0], np.cumsum(rate * 0.2)])
    use = rtcensus.RealtimeUse(wall, cpu_s, [])
    at = ticks[np.flatnonzero(np.diff(ticks) > 1.5 * PERIOD_S)[2]]
    probes = [hoststall.CpuStalls(0, True, 1000, np.array([at + 0.002]), np.array([at + 0.036]))]
    split = hoststall.attribute_late_ticks(ticks, PERIOD_S, probes, None, use)
    assert split["late_ticks"] == 3
    assert [row["host"] for row in split["late"]] == [False, False, True]
    assert [row["foreign_realtime"] for row in split["late"]] == [True, False, False]
    assert split["late"][0]["foreign_realtime_ms"] > 280
    assert split["late"][1]["foreign_realtime_ms"] == pytest.approx(6.0, abs=0.5)  # 0.1 x 60 ms
    assert split["late_ticks_with_foreign_realtime"] == 1
    assert split["late_ticks_stack"] == 1  # the tick 40 ms late that nobody else explains
