"""Host stall probe: late ticks put against the stalls the per-CPU probes saw."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest
from vnd_tools import hoststall

PERIOD_S = 0.02


def stalls(cpu: int, spans_s: list[tuple[float, float]]) -> hoststall.CpuStalls:
    """A probe result with stalled sleeps over ``spans_s`` (start, end) [s]."""
    rows = np.array(spans_s, dtype=float).reshape(-1, 2)
    return hoststall.CpuStalls(cpu, True, 1000, rows[:, 0], rows[:, 1])


def ticks_with_gaps(gaps_at: dict[int, float], n: int = 50) -> np.ndarray:
    """Tick times every PERIOD_S from 100 s, with tick i delayed to ``gaps_at[i]`` s after
    its predecessor (and the grid continuing from there)."""
    times, t = [], 100.0
    for i in range(n):
        t += gaps_at.get(i, PERIOD_S)
        times.append(t)
    return np.array(times)


def test_late_gaps_are_the_intervals_over_one_and_a_half_periods():
    ticks = ticks_with_gaps({10: 0.029, 20: 0.031, 30: 0.045})
    starts, ends = hoststall.late_gaps(ticks[::-1], PERIOD_S)  # order does not matter
    assert np.allclose(ends - starts, [0.031, 0.045])
    assert starts[0] == pytest.approx(ticks[19])


def stall(at_s: float, lost_s: float) -> tuple[float, float]:
    """A probe sleep that began at ``at_s`` and woke ``lost_s`` later than asked."""
    return (at_s, at_s + hoststall.PROBE_PERIOD_S + lost_s)


def test_a_late_tick_is_the_hosts_when_one_cpu_lost_half_its_delay():
    ticks = ticks_with_gaps({10: 0.035, 20: 0.035, 30: 0.035, 40: 0.045})  # late 15/15/15/25 ms
    t = {i: ticks[i - 1] for i in (10, 20, 30, 40)}  # start of each late gap
    probes = [
        # tick 10: 12 ms lost inside the gap; tick 40: two bursts of 7 ms (14 ms in all)
        stalls(
            0,
            [stall(t[10] + 0.005, 0.012), stall(t[40] + 0.002, 0.007), stall(t[40] + 0.02, 0.007)],
        ),
        # tick 20: 5 ms only; tick 40: 11 ms, of which 5 ms before the gap began
        stalls(1, [stall(t[20] + 0.01, 0.005), stall(t[40] - 0.007, 0.011)]),
    ]
    odom = np.arange(99.0, 102.0, 0.01)
    split = hoststall.attribute_late_ticks(ticks, PERIOD_S, probes, odom)
    assert split["late_ticks"] == 4
    assert [row["host"] for row in split["late"]] == [True, False, False, True]
    assert split["late_ticks_with_host_stall"] == 2
    assert split["late_ticks_without_host_stall"] == 2
    lost = [row["cpu_lost_ms"] for row in split["late"]]
    assert lost[0] == {"0": pytest.approx(12.0), "1": 0.0}
    assert lost[1] == {"0": 0.0, "1": pytest.approx(5.0)}
    assert lost[2] == {"0": 0.0, "1": 0.0}  # tick 30: no stall at all
    assert lost[3] == {"0": pytest.approx(14.0), "1": pytest.approx(6.0)}
    assert all(row["input_gap_ms"] == pytest.approx(10.0) for row in split["late"])
    json.dumps(split)  # goes into the benchmark's JSON line as it is


def test_the_input_gap_points_at_a_late_upstream_sample():
    ticks = ticks_with_gaps({10: 0.035})
    odom = np.arange(99.0, 102.0, 0.01)
    inside = (odom > ticks[9] + 0.002) & (odom < ticks[10] - 0.002)
    odom = odom[~inside]  # the odometry stopped for the whole gap
    split = hoststall.attribute_late_ticks(ticks, PERIOD_S, [], odom)
    assert split["late"][0]["input_gap_ms"] > 30.0
    assert split["late_ticks_without_host_stall"] == 1


def test_probe_summary_counts_only_the_stalls_inside_the_flight():
    probe = stalls(0, [(10.0, 10.008), (50.0, 50.012), (99.0, 99.006)])
    summary = hoststall.probe_summary([probe], 20.0, 60.0)
    assert summary["0"]["stalls"] == 1
    assert summary["0"]["longest_ms"] == pytest.approx(10.0)
    assert summary["0"]["realtime"] is True


def test_stalls_round_trip_through_the_archive(tmp_path):
    probes = [stalls(0, [stall(5.0, 0.003)]), stalls(1, [])]
    hoststall.save_stalls(tmp_path / "stalls.npz", probes)
    back = hoststall.load_stalls(tmp_path / "stalls.npz")
    assert [p.cpu for p in back] == [0, 1]
    assert back[0].lateness_s == pytest.approx([0.003])
    assert back[1].start_wall_s.shape == (0,)
    assert back[0].realtime and back[0].wakeups == 1000


@pytest.mark.skipif(sys.platform != "linux", reason="the probe pins to Linux CPUs")
def test_the_probe_processes_run_one_per_cpu_and_report_their_wakeups():
    probe = hoststall.StallProbe()
    probe.start()
    time.sleep(0.5)
    results = probe.stop()
    assert len(results) == len(__import__("os").sched_getaffinity(0))
    for result in results:
        # 0.5 s of 2-ms sleeps; the stop check runs every 0.1 s, so at least 50 wake-ups
        assert result.wakeups >= hoststall._POLL_EVERY
        assert result.start_wall_s.shape == result.end_wall_s.shape
        assert np.all(result.lateness_s >= hoststall.STALL_THRESHOLD_S - 1e-6)
