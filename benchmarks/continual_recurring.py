"""Continual improvement on recurring_wind in simulated time, without the middleware.

Flies ``recurring_wind`` (calm, wind A, calm, wind B, wind A) on the true plant with the VND
learner of ``make demo`` (preset ``standard``) through :func:`run_method`: each update's bundle
flies ``--update-delay`` seconds after the update starts (45 s: what an update takes beside the
running stack on a 2-core machine), so the timing matches the demo while the figures do not
depend on the machine's load. Per seed: the RMSE and recovery of every phase and how much lower
the second wind-A phase is than the first. Prints one JSON object last: ``improvement_pct``
(per seed), ``improvement_pct_mean``, ``phases`` (per seed), ``updates`` (accepted / run, per
seed).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.evaluation.continual_loop import VNDMethod, run_method
from vnd_core.learner import LearnerConfig
from vnd_core.recovery import recovery
from vnd_core.scenario import load_scenario


def phase_rmse(
    time_s: np.ndarray,
    error_m: np.ndarray,
    spans: list[tuple[str, float, float]],
    period_s: float | None,
) -> list[dict]:
    """RMSE and recovery (:mod:`vnd_core.recovery`, as in ``vnd fly`` reports) of ``error_m``
    over each (name, start_s, end_s) span; ``period_s`` is the reference's period."""
    rows = []
    for name, start_s, end_s in spans:
        inside = (time_s > start_s) & (time_s <= end_s)
        rmse = float(np.sqrt(np.mean(error_m[inside] ** 2)))
        rec = recovery(time_s[inside], error_m[inside], start_s, end_s, period_s)
        rows.append(
            {
                "name": name,
                "start_s": start_s,
                "end_s": end_s,
                "rmse_m": round(rmse, 4),
                "recovery_s": round(rec.recovery_s, 2) if rec is not None else None,
            }
        )
    return rows


def main() -> int:
    """Fly every seed, print per-phase RMSE and the JSON figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="plant and learner seeds 0..N-1")
    parser.add_argument("--update-delay", type=float, default=45.0, help="update delay [s]")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = load_bundle(shipped_bundle_path())
    scenario = load_scenario("recurring_wind")
    spans = scenario.phase_spans()
    result: dict = {"improvement_pct": [], "phases": [], "updates": []}
    for seed in range(args.seeds):
        method = VNDMethod(base, LearnerConfig.standard())
        run = run_method(method, scenario, seed, update_delay_s=args.update_delay)
        phases = phase_rmse(run.time_s, run.error_m, spans, scenario.reference.repeat_period_s())
        wind_a = [p["rmse_m"] for p in phases if p["name"] == "wind_a"]
        improvement = 100.0 * (1.0 - wind_a[-1] / wind_a[0])
        accepted = sum(u.accepted for u in run.updates)
        print(
            f"seed {seed}: "
            + "  ".join(f"{p['name']} {p['rmse_m']:.3f}" for p in phases)
            + f"  -> second wind_a {improvement:.0f}% lower, "
            + f"recovery {phases[-1]['recovery_s']} s; {accepted}/{len(run.updates)} "
            "updates accepted",
            file=sys.stderr,
        )
        result["improvement_pct"].append(round(improvement, 1))
        result["phases"].append(phases)
        result["updates"].append({"accepted": accepted, "run": len(run.updates)})
    result["improvement_pct_mean"] = round(float(np.mean(result["improvement_pct"])), 1)
    result["update_delay_s"] = args.update_delay
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
