"""Re-attribute the late ticks of saved control_latency.py runs (``--out`` folders holding
control_latency.npz and host_stalls.npz) with the final rule of vnd_core.flight.hoststall.

    python attribute.py RUN_DIR [RUN_DIR ...]

Prints one JSON line per run: late ticks, how many the host explains, the probe's stalls, and
each late tick's gap, per-CPU lost time and longest odometry gap.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.flight import hoststall


def load_probes(path: Path) -> list[hoststall.CpuStalls]:
    """The probe stalls of a run, one entry per CPU: ``vnd fly``'s archive, or the first one
    control_latency.py wrote this session (``cpu<N>`` arrays only)."""
    with np.load(path, allow_pickle=False) as data:
        if "cpus" in data.files:
            return hoststall.load_stalls(path)
        return [
            hoststall.CpuStalls(int(name[3:]), True, 0, data[name][:, 0], data[name][:, 1])
            for name in sorted(data.files)
        ]


def main() -> None:
    for run in map(Path, sys.argv[1:]):
        with np.load(run / "control_latency.npz", allow_pickle=False) as data:
            ticks_s = np.sort(data["command_source_ns"]) / 1e9
            odom_s = np.sort(data["odom_source_ns"]) / 1e9
        probes = load_probes(run / "host_stalls.npz")
        split = hoststall.attribute_late_ticks(ticks_s, CONTROL_PERIOD_S, probes, odom_s)
        summary = hoststall.probe_summary(probes, float(ticks_s[0]), float(ticks_s[-1]))
        for cpu in summary.values():
            cpu.pop("wakeups"), cpu.pop("realtime")  # not in the first archives
        flight_s = float(ticks_s[-1] - ticks_s[0])
        print(
            json.dumps({"run": run.name, "flight_s": round(flight_s, 1), "probe": summary, **split})
        )


if __name__ == "__main__":
    main()
