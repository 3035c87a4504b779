"""Continual improvement on recurring_wind in simulated time, without the middleware.

Flies ``recurring_wind`` (calm, wind A, calm, wind B, wind A) on the stack's flight runtime (as
``vnd eval`` flies it) with the VND learner of ``make demo`` (preset ``standard``,
``--learner-param`` to change fields) through :func:`run_method`, and the base bundle beside it.
Each update's bundle flies after the compute it took (its CPU time over the learner's core share
beside the stack, as ``vnd eval`` charges it), or ``--update-delay`` seconds after it starts. Per
seed: the RMSE of every phase (whole and settled: its second half), recovery, the first bundle
landing in the phase, how much lower the second wind-A phase is than the first and than the base
bundle's, model updates and policy improvements. Prints one JSON object last: ``improvement_pct``
and ``below_base_pct`` (per seed, with means), ``phases`` and ``base_phases`` (per seed),
``updates`` (per seed).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.evaluation.continual_loop import (
    KIND_MODEL,
    KIND_POLICY,
    LEARNER_CPU_SHARE,
    Method,
    RunResult,
    VNDMethod,
    run_method,
)
from vnd_core.evaluation.report import phase_updates
from vnd_core.learner import LearnerConfig
from vnd_core.learner.settings import parse_assignments, with_overrides
from vnd_core.scenario import Scenario, load_scenario
from vnd_flight.evaluation_flight import fly_runtime
from vnd_tools.flight_report import phase_results


def phase_rows(run: RunResult, scenario: Scenario) -> list[dict]:
    """Per phase of ``run``: the ``vnd fly`` report's figures (RMSE, recovery, settled RMSE
    over the second half) and the bundles that landed in it (``vnd eval``'s phase_updates)."""
    spans, period_s = scenario.phase_spans(), scenario.reference.repeat_period_s()
    phases = phase_results(run.time_s, run.error_m, spans, period_s)
    updates = phase_updates(run, scenario)
    return [
        {**phase.as_json(), **{k: v for k, v in landed.items() if k not in ("phase", "start_s")}}
        for phase, landed in zip(phases, updates, strict=True)
    ]


def main() -> int:
    """Fly every seed, print per-phase RMSE and the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="plant and learner seeds 0..N-1")
    parser.add_argument(
        "--update-delay",
        type=float,
        default=None,
        help="fixed update delay [s] (default: CPU time / the learner's core share)",
    )
    parser.add_argument(
        "--learner-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace a field of the standard learner preset, e.g. improvement.enabled=false",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = with_overrides(
        LearnerConfig.standard(), parse_assignments(args.learner_param), "--learner-param"
    )
    base = load_bundle(shipped_bundle_path())
    scenario = load_scenario("recurring_wind")
    result: dict = {
        "improvement_pct": [],
        "below_base_pct": [],
        "phases": [],
        "base_phases": [],
        "updates": [],
    }
    for seed in range(args.seeds):
        base_phases = phase_rows(
            run_method(Method("base", base), scenario, seed, fly_runtime), scenario
        )
        run = run_method(
            VNDMethod(base, config), scenario, seed, fly_runtime, update_delay_s=args.update_delay
        )
        phases = phase_rows(run, scenario)
        wind_a = [p["rmse_m"] for p in phases if p["name"] == "wind_a"]
        improvement = 100.0 * (1.0 - wind_a[-1] / wind_a[0])
        below_base = 100.0 * (1.0 - wind_a[-1] / base_phases[-1]["rmse_m"])
        updates = _update_counts(run.updates)
        print(
            f"seed {seed}: "
            + "  ".join(
                f"{p['name']} {p['rmse_m']:.3f} (settled {p['steady_rmse_m']:.3f}, base "
                f"{b['rmse_m']:.3f})"
                for p, b in zip(phases, base_phases, strict=True)
            )
            + f"  -> second wind_a {improvement:.0f}% below the first, {below_base:.0f}% below "
            f"base; recovery {phases[-1]['recovery_s']} s; {updates}",
            file=sys.stderr,
        )
        result["improvement_pct"].append(round(improvement, 1))
        result["below_base_pct"].append(round(below_base, 1))
        result["phases"].append(phases)
        result["base_phases"].append(base_phases)
        result["updates"].append(updates)
        result.setdefault("markers", []).append(
            [
                {
                    "kind": u.kind,
                    "requested_s": round(u.requested_s, 2),
                    "applied_s": round(u.applied_s, 2),
                    "cpu_s": round(u.cpu_s, 2),
                    "accepted": u.accepted,
                    "reason": u.reason[:80],
                }
                for u in run.updates
            ]
        )
    for key in ("improvement_pct", "below_base_pct"):
        result[f"{key}_mean"] = round(float(np.mean(result[key])), 1)
    result["update_delay"] = (
        f"CPU time / {LEARNER_CPU_SHARE}" if args.update_delay is None else args.update_delay
    )
    result["learner_params"] = args.learner_param
    print(json.dumps(result))
    return 0


def _update_counts(updates: list) -> dict:
    """Model updates and policy improvement rounds run and accepted, with their CPU time."""
    counts: dict = {}
    for kind in (KIND_MODEL, KIND_POLICY):
        mine = [u for u in updates if u.kind == kind]
        counts[kind] = {
            "run": len(mine),
            "accepted": sum(u.accepted for u in mine),
            "cpu_s": round(sum(u.cpu_s for u in mine), 1),
        }
    return counts


if __name__ == "__main__":
    sys.exit(main())
