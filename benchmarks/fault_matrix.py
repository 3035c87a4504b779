"""The fault matrix of the safety layer: every odometry fault at every flight state on several
seeds, judged on the simulated vehicle's ground truth, with an ideal cut to a level hover
flown beside it for comparison.

Each flight is ``vnd_flight.fault_flight.fly_fault``: the stack's pose filter and
policy tick (with the safety filter) fly the true plant in simulated time at 1 ms resolution,
the shipped base bundle flying, the fault injected into the odometry at ``warmup_s`` (for the
figure-eight at the next instant of peak reference speed). ``stop_mid_swap`` is odometry
stopping at the very tick a new bundle version goes live. Prints one JSON object last:

``{"flights", "crashes", "crash_rate", "by_fault": {fault: {...}}, "level_hover": {...},
"rows": [...]}`` with, per fault, the worst time to a level attitude, the worst and median
landing error, the worst excursion and the ticks lost.

    python benchmarks/fault_matrix.py [--seeds 0 1 2] [--out runs/fault_matrix.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.vehicle import load_vehicle
from vnd_flight.fault_flight import FLIGHT_STATES, FaultFlight, fly_fault
from vnd_flight.odometry_faults import FAULTS

# (label, fault, swap_at_fault): every odometry fault, and odometry lost during a bundle swap
CASES = [(fault, fault, False) for fault in FAULTS] + [("stop_mid_swap", "stop", True)]


def _worst(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else None


def _summary(rows: list[dict]) -> dict:
    landing = [r["landing_error_m"] for r in rows if r["landed"]]
    return {
        "flights": len(rows),
        "crashes": sum(r["crashed"] for r in rows),
        "landed": sum(r["landed"] for r in rows),
        "holding": sum(r["holding"] for r in rows),
        "time_to_level_s_max": _worst([r["time_to_level_s"] for r in rows]),
        "max_tilt_after_0_5_s_deg": _worst([r["max_tilt_after_0_5_s_deg"] for r in rows]),
        "landing_error_m_max": _worst(landing),
        "landing_error_m_median": float(np.median(landing)) if landing else None,
        "excursion_m_max": _worst([r["excursion_m"] for r in rows]),
        "ticks_lost": sum(r["ticks_lost"] for r in rows),
    }


def main() -> None:
    """Fly the matrix and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    vehicle = load_vehicle("agile")
    bundle = load_bundle(shipped_bundle_path())
    rows, level = [], []
    started = time.perf_counter()
    for seed in args.seeds:
        for state in FLIGHT_STATES:
            for label, fault, swap in CASES:
                flight = FaultFlight(state, fault, seed=seed, swap_at_fault=swap)
                outcome, _ = fly_fault(vehicle, bundle, flight)
                rows.append(
                    {"flight_state": state, "fault": label, "seed": seed, **outcome.as_dict()}
                )
            cut = FaultFlight(state, "stop", seed=seed, response="level_hover")
            outcome, _ = fly_fault(vehicle, bundle, cut)
            level.append({"flight_state": state, "seed": seed, **outcome.as_dict()})
    report = {
        "flights": len(rows),
        "crashes": sum(r["crashed"] for r in rows),
        "crash_rate": sum(r["crashed"] for r in rows) / len(rows),
        "seeds": args.seeds,
        "wall_s": round(time.perf_counter() - started, 1),
        "by_fault": {c[0]: _summary([r for r in rows if r["fault"] == c[0]]) for c in CASES},
        "by_flight_state": {
            s: _summary([r for r in rows if r["flight_state"] == s]) for s in FLIGHT_STATES
        },
        "level_hover": {
            s: {
                "excursion_m_max": _worst(
                    [r["excursion_m"] for r in level if r["flight_state"] == s]
                ),
                "stack_excursion_m_max": _worst(
                    [
                        r["excursion_m"]
                        for r in rows
                        if r["flight_state"] == s and r["fault"] == "stop"
                    ]
                ),
            }
            for s in FLIGHT_STATES
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
