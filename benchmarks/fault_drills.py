"""Fault drills on the real-process stack: every odometry fault at every flight state on several
seeds, the simulated vehicle judged on its ground truth (``sim/truth``).

Each drill starts the sim, pose filter, odometry fault injector (``vnd_sim.odom_fault_node``)
and policy as their own OS processes over the dds backend on loopback (the integration tests'
``SimStack`` from ``ros2_ws/src/vnd_policy/test/flight_harness.py``), flies the shipped base
bundle for 3 s after take-off, injects the fault and watches: until the blind landing disarms
for the faults that take the odometry away (``stop``, ``freeze_fresh``, ``freeze_old``, ``nan``),
``--watch-s`` for the others (``jump``, ``half_rate``). Where ``benchmarks/fault_matrix.py``
runs the same faults in simulated time, this one includes what real processes add: scheduling,
DDS transport, the sim slipping against the clock on a loaded machine.

Prints one JSON object last: ``{"drills", "crashes", "crash_rate", "by_fault": {...},
"by_flight_state": {...}, "rows": [...]}``; each row has the time from the fault to a level
attitude, the largest tilt from 0.5 s after it, where the vehicle ended (landed, distance from
the point of the fault, inside the geofence), the final mode and the policy's own late-tick
count over the drill.

    python benchmarks/fault_drills.py [--seeds 1 2 3] [--faults ...] [--states ...]
        [--out runs/fault_drills.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import yaml
from vnd_core.wire import Mode
from vnd_flight.blind import tilt_rad
from vnd_flight.fault_flight import FLIGHT_STATES, LEVEL_DEG, SCENARIO_NAMES, WIND_SCENARIO
from vnd_flight.odometry_faults import FAULTS
from vnd_flight.safety_config import SafetyConfig

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "ros2_ws" / "src" / "vnd_policy" / "test" / "flight_harness.py"
LOSING = ("stop", "freeze_fresh", "freeze_old", "nan")  # these end in a blind landing
LANDING_TIMEOUT_S = 25.0  # a losing fault must have disarmed by then


def load_harness() -> ModuleType:
    """The integration tests' flight harness (test folders are not packages)."""
    os.environ.setdefault("CYCLONEDDS_URI", f"file://{ROOT / 'config' / 'cyclonedds_loopback.xml'}")
    os.environ.setdefault("VND_MIDDLEWARE", "dds")  # the harness's peer is a dds-backend node
    spec = importlib.util.spec_from_file_location("vnd_flight_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def scenario_arg(flight_state: str, folder: Path) -> str:
    """The sim's and the policy's scenario parameter for a flight state."""
    if flight_state in SCENARIO_NAMES:
        return SCENARIO_NAMES[flight_state]
    path = folder / "hover_wind_4mps.yaml"
    path.write_text(yaml.safe_dump(WIND_SCENARIO))
    return str(path)


def drill(
    harness: ModuleType, flight_state: str, fault: str, seed: int, folder: Path, watch_s: float
) -> dict:
    """Fly one drill; returns its row."""
    ns = f"/drill_{flight_state}_{fault}_{seed}"
    # The figure-eight starts moving with its reference: the drill is the fault, not a take-off.
    sim = ("match_start_velocity:=true",) if flight_state == "figure8" else ()
    scenario = scenario_arg(flight_state, folder)
    s = harness.SimStack(ns, scenario, False, odom_faults=True, seed=seed, sim_params=sim)
    try:
        s.fly()
        # A crash before the fault (take-off on a starved machine) is not the fault's doing.
        crashed_before = s.sim_counters().get("crashed", 0) > 0
        missed_before = s.latest_status("policy").missed_ticks
        fault_ns = s.inject(fault)
        if fault in LOSING:
            deadline = time.monotonic() + LANDING_TIMEOUT_S
            while time.monotonic() < deadline and s.commands[-1][1].mode != Mode.DISARMED:
                time.sleep(0.05)
            time.sleep(1.0)
        else:
            time.sleep(watch_s)
        return {
            "flight_state": flight_state,
            "fault": fault,
            "seed": seed,
            "crashed_before_fault": crashed_before,
            **judge(s, fault_ns),
            "policy_late_ticks": int(s.latest_status("policy").missed_ticks - missed_before),
        }
    finally:
        s.close()


def judge(s: Any, fault_ns: int) -> dict:
    """What the vehicle did from the fault on (ground truth)."""
    t_s, truth = s.truth_from_stamp(fault_ns)
    tilts_deg = np.degrees([tilt_rad(q) for q in truth[:, 3:7]])
    level = np.nonzero(tilts_deg < LEVEL_DEG)[0]
    horizontal = np.linalg.norm(truth[:, :2] - truth[0, :2], axis=1)
    final = truth[-1]
    c = SafetyConfig()
    landed = bool(abs(final[2] - c.floor_z_m) < 1e-6 and np.linalg.norm(final[7:10]) == 0.0)
    inside = bool(
        np.all(final[0:3] >= np.array(c.geofence_min_m))
        and np.all(final[0:3] <= np.array(c.geofence_max_m))
    )
    return {
        "crashed": s.sim_counters().get("crashed", 0) > 0,
        "landed": landed,
        "inside_geofence": inside,
        "time_to_level_s": float(t_s[level[0]]) if level.size else math.inf,
        "max_tilt_after_0_5_s_deg": float(tilts_deg[t_s >= 0.5].max()),
        "excursion_m": float(horizontal.max()),
        "landing_error_m": float(horizontal[-1]) if landed else math.nan,
        "final_mode": Mode(s.commands[-1][1].mode).name.lower(),
    }


def summary(rows: list[dict]) -> dict:
    """Worst and median figures of ``rows``."""

    def worst(key: str) -> float | None:
        values = [r[key] for r in rows if math.isfinite(r[key])]
        return max(values) if values else None

    landing = [r["landing_error_m"] for r in rows if r["landed"]]
    return {
        "drills": len(rows),
        "crashes": sum(r["crashed"] for r in rows),
        "landed": sum(r["landed"] for r in rows),
        "outside_geofence": sum(not r["inside_geofence"] for r in rows),
        "time_to_level_s_max": worst("time_to_level_s"),
        "max_tilt_after_0_5_s_deg": worst("max_tilt_after_0_5_s_deg"),
        "landing_error_m_max": max(landing) if landing else None,
        "landing_error_m_median": float(np.median(landing)) if landing else None,
        "policy_late_ticks": sum(r["policy_late_ticks"] for r in rows),
    }


def main() -> None:
    """Fly the drills and print their JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--faults", nargs="+", default=[f for f in FAULTS if f != "none"])
    parser.add_argument("--states", nargs="+", default=list(FLIGHT_STATES))
    parser.add_argument("--watch-s", type=float, default=6.0, help="watch after jump/half_rate")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    for name, allowed in (("faults", FAULTS), ("states", FLIGHT_STATES)):
        unknown = set(getattr(args, name)) - set(allowed)
        if unknown:
            parser.error(f"--{name}: unknown {sorted(unknown)}; choose from {list(allowed)}")
    harness = load_harness()
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for state in args.states:
                for fault in args.faults:
                    row = drill(harness, state, fault, seed, Path(folder), args.watch_s)
                    rows.append(row)
                    print(json.dumps(row, default=float), file=sys.stderr, flush=True)
    report = {
        "drills": len(rows),
        "crashes": sum(r["crashed"] for r in rows),
        "crash_rate": sum(r["crashed"] for r in rows) / max(len(rows), 1),
        "seeds": args.seeds,
        "wall_s": round(time.perf_counter() - started, 1),
        "by_fault": {f: summary([r for r in rows if r["fault"] == f]) for f in args.faults},
        "by_flight_state": {
            s: summary([r for r in rows if r["flight_state"] == s]) for s in args.states
        },
        "rows": rows,
    }
    text = json.dumps(report, indent=1, default=float)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
