"""Stalls the host put on every CPU at once, from the saved probe archives of runs.

    python joint_stalls.py RUN_DIR [RUN_DIR ...]

A stretch during which no CPU runs anything of the guest delays whatever tick falls due in it,
whatever the stack does: one longer than half a control period (10 ms) makes a tick due at its
start more than half a period late, the missed-tick rule. Prints, per run, the joint stalls
of 5, 10 and 20 ms or more, the longest, and the policy's late ticks for comparison.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from attribute import load_probes
from vnd_core.dynamics import CONTROL_PERIOD_S
from vnd_core.flight import hoststall


def lost_spans(probe: hoststall.CpuStalls) -> list[tuple[float, float]]:
    """The probe's stalls as (from the asked wake-up, to the real one) [s], sorted."""
    return sorted(zip(probe.start_wall_s + probe.period_s, probe.end_wall_s, strict=True))


def intersect(a: list, b: list) -> list[tuple[float, float]]:
    """Overlaps of two sorted lists of spans."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def main() -> None:
    for run in map(Path, sys.argv[1:]):
        probes = load_probes(run / "host_stalls.npz")
        joint = lost_spans(probes[0])
        for probe in probes[1:]:
            joint = intersect(joint, lost_spans(probe))
        lengths_ms = np.array([hi - lo for lo, hi in joint]) * 1e3
        with np.load(run / "control_latency.npz", allow_pickle=False) as data:
            ticks_s = np.sort(data["command_source_ns"]) / 1e9
        late = len(hoststall.late_gaps(ticks_s, CONTROL_PERIOD_S)[0])
        print(json.dumps({
            "run": run.name,
            "joint_stalls_ge_5ms": int((lengths_ms >= 5).sum()),
            "joint_stalls_ge_10ms": int((lengths_ms >= 10).sum()),
            "joint_stalls_ge_20ms": int((lengths_ms >= 20).sum()),
            "longest_joint_ms": round(float(lengths_ms.max()), 2) if lengths_ms.size else 0.0,
            "late_ticks": late,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
