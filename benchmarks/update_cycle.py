"""Wall time of one continual-learner update cycle (fit + policy training + validation).

Flies the base bundle on the true plant (``figure8_wind_mixed`` by default, 45 s of data), feeds
the tick records to a :class:`ContinualLearner` and times update cycles with one torch thread:
the quick preset (the first update creates the model; the figure is the median of the warm-started
updates after it, the learner's steady state) and the full preset (one update, warm-started from
the model the quick cycles built).
CPU seconds are printed beside wall seconds: on a shared machine the CPU time is what the cycle
would take on an idle core. Prints one JSON object as the last line:
``update_cycle_s``, ``update_cycle_full_s``, ``fit_s``, ``train_s``, ``validate_s`` and more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from vnd_core.bundle import Bundle, load_bundle, shipped_bundle_path
from vnd_core.learner import (
    ContinualLearner,
    LearnerConfig,
    SimulatedFlight,
    TickRecords,
    UpdateResult,
)
from vnd_core.scenario import load_scenario


def fly_base(bundle: Bundle, scenario: str, seconds: float, seed: int) -> tuple[TickRecords, float]:
    """Tick records of ``seconds`` of flight with ``bundle`` (and the wall time it took)."""
    start = time.perf_counter()
    flight = SimulatedFlight(load_scenario(scenario), bundle, seed=seed)
    chunk = flight.fly(seconds)
    return chunk.records, time.perf_counter() - start


def timed_updates(
    base: Bundle, config: LearnerConfig, records: TickRecords, count: int
) -> tuple[list[UpdateResult], Bundle]:
    """``count`` consecutive update cycles on the same replay, starting from ``base``; returns
    their results and the learner's active bundle at the end."""
    learner = ContinualLearner(base.vehicle, config, base)
    learner.warm_up()  # as the worker does before flight: the compiled training is not timed
    learner.ingest(records)
    results = [learner.update() for _ in range(count)]
    return results, learner.active


def summary(result: UpdateResult) -> dict:
    """The figures of one cycle."""
    return {
        "total_s": round(result.total_s, 3),
        "cpu_s": result.metrics["timing_s"]["cpu_total"],
        "fit_s": round(result.fit_s, 3),
        "train_s": round(result.train_s, 3),
        "validate_s": round(result.validate_s, 3),
        "accepted": result.accepted,
        "reason": result.reason,
    }


def main() -> None:
    """Measure and print the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=None, help="base bundle (default: shipped)")
    parser.add_argument("--scenario", default="figure8_wind_mixed", help="scenario of the data")
    parser.add_argument("--flight-s", type=float, default=45.0, help="seconds of flight data")
    parser.add_argument("--quick-updates", type=int, default=3, help="quick cycles (first: cold)")
    parser.add_argument("--skip-full", action="store_true", help="time the quick preset only")
    parser.add_argument("--seed", type=int, default=0, help="seed of the flight and learner")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bundle_path = args.bundle or shipped_bundle_path()
    if not bundle_path.exists():
        raise SystemExit(f"base bundle {bundle_path} not found: train one or pass --bundle")
    base = load_bundle(bundle_path)
    records, flight_s = fly_base(base, args.scenario, args.flight_s, args.seed)

    quick, learned = timed_updates(
        base, LearnerConfig.quick(seed=args.seed), records, args.quick_updates
    )
    steady = quick[1:] or quick
    median = lambda values: round(statistics.median(values), 3)  # noqa: E731
    result = {
        "update_cycle_s": median([r.total_s for r in steady]),
        "update_cycle_cpu_s": median([r.metrics["timing_s"]["cpu_total"] for r in steady]),
        "fit_s": median([r.fit_s for r in steady]),
        "train_s": median([r.train_s for r in steady]),
        "validate_s": median([r.validate_s for r in steady]),
        "first_update": summary(quick[0]),
        "quick_updates": [summary(r) for r in quick],
    }
    if not args.skip_full:
        # Warm start from the model the quick cycles built (the learner's steady state).
        start = learned if learned.model is not None else base
        (full,), _ = timed_updates(start, LearnerConfig.full(seed=args.seed), records, 1)
        result["update_cycle_full_s"] = round(full.total_s, 3)
        result["update_cycle_full_cpu_s"] = full.metrics["timing_s"]["cpu_total"]
        result["full_update"] = summary(full)
    result |= {
        "scenario": args.scenario,
        "flight_s": args.flight_s,
        "ticks": len(records),
        "flight_wall_s": round(flight_s, 2),
        "threads": 1,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
