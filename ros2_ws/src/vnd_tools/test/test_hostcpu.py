"""Host CPU sampling (steal time) and the split of the control latency by it."""

from __future__ import annotations

import numpy as np
import pytest
from vnd_tools import hostcpu


def cpu_line(user: int, idle: int, steal: int) -> str:
    return f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"


def test_read_cpu_times_parses_the_aggregate_line(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(cpu_line(100, 900, 7))
    times = hostcpu.read_cpu_times(stat)
    assert times.tolist() == [100, 0, 0, 900, 0, 0, 0, 7]
    assert hostcpu.read_cpu_times(tmp_path / "missing") is None
    stat.write_text("intr 1 2 3\n")
    assert hostcpu.read_cpu_times(stat) is None


def test_sampler_takes_one_sample_per_period_and_saves(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(cpu_line(1, 2, 3))
    sampler = hostcpu.CpuSampler(path=stat)
    sampler.poll()
    sampler.poll()  # within the period: no second sample
    assert len(sampler.times) == 1
    sampler.wall_s[-1] -= hostcpu.SAMPLE_PERIOD_S
    stat.write_text(cpu_line(5, 6, 7))
    sampler.poll()
    sampler.save(tmp_path / "host.npz")
    with np.load(tmp_path / "host.npz", allow_pickle=False) as data:
        assert data["cpu_times"].shape == (2, 8)
        assert data["cpu_times"][1, hostcpu.STEAL] == 7
        assert data["wall_s"][1] > data["wall_s"][0]


def synthetic_flight(steal_per_s: np.ndarray, slow_ms: float = 5.0):
    """One CPU sample per second (200 ticks of CPU time each second), 50 Hz ticks whose
    latency is 1 ms, or ``slow_ms`` in seconds with steal, and one 60-ms gap per second with
    steal."""
    seconds = len(steal_per_s)
    wall_s = 1000.0 + np.arange(seconds + 1, dtype=float)
    per_second = np.zeros((seconds, 8), dtype=np.int64)
    per_second[:, hostcpu.STEAL] = steal_per_s
    per_second[:, hostcpu.IDLE] = 200 - steal_per_s
    cpu_times = np.vstack([np.zeros((1, 8), np.int64), np.cumsum(per_second, axis=0)])
    ticks, latency = [], []
    for second in range(seconds):
        starts = 1000.0 + second + 0.02 * np.arange(50) + 0.001
        if steal_per_s[second]:
            starts = np.delete(starts, [10, 11])  # a 60 ms gap: 2 ticks late
        ticks.extend(starts)
        latency.extend([slow_ms if steal_per_s[second] else 1.0] * len(starts))
    return wall_s, cpu_times, np.array(ticks), np.array(latency)


def test_latency_is_split_by_the_steal_of_each_window():
    steal = np.zeros(40, dtype=np.int64)
    steal[20:30] = 10  # 5 % steal in the third 10-s window
    wall_s, cpu_times, ticks, latency = synthetic_flight(steal)
    quiet_gap = np.searchsorted(ticks, 1005.5)  # one late tick at 5.5 s, no steal around it
    ticks, latency = np.delete(ticks, quiet_gap), np.delete(latency, quiet_gap)
    split = hostcpu.steal_by_window(wall_s, cpu_times, ticks, latency, 0.02)
    assert split["steal_fraction"] == pytest.approx(100 / 8000)
    assert split["quiet"]["windows"] == 3 and split["steal"]["windows"] == 1
    assert split["quiet"]["p99_ms"] == pytest.approx(1.0)
    assert split["steal"]["p99_ms"] == pytest.approx(5.0)
    assert split["quiet"]["late_ticks"] == 1
    assert split["steal"]["late_ticks"] == 10  # one gap per second of steal
    assert split["late_ticks"] == 11 and split["late_ticks_during_steal"] == 10
    # measured between the samples around the window: 100 of 11 s x 200 ticks
    assert split["steal"]["max_steal"] == pytest.approx(round(100 / 2200, 4))


def test_no_split_without_samples_over_the_flight():
    wall_s, cpu_times, ticks, latency = synthetic_flight(np.zeros(5, dtype=np.int64))
    assert hostcpu.steal_by_window(wall_s[:1], cpu_times[:1], ticks, latency, 0.02) is None
    later = wall_s + 100.0  # samples taken after the flight
    assert hostcpu.steal_by_window(later, cpu_times, ticks, latency, 0.02) is None
    split = hostcpu.steal_by_window(wall_s, cpu_times, ticks, latency, 0.02)
    assert split["steal"] == {
        "windows": 0,
        "ticks": 0,
        "p99_ms": None,
        "late_ticks": 0,
        "max_steal": None,
    }
