"""The references a flown scenario is compared with: the shipped base bundle and, when the
flight started from another bundle, that start bundle.

A learning flight is judged against what it would have flown without learning: the report
compares the last occurrence of each condition with the shipped base bundle flying the same
scenario, seed and disturbances, and, when the flight started from another bundle (the
force-observer start ``make demo`` flies, a ``vnd eval`` dr bundle), with that start too.
Each reference is flown frozen by the stack's flight runtime in simulated time
(:func:`vnd_flight.runtime_flight.fly_scenario`: motion capture through the pose filter, the
encoder, the policy node's controller with its observer, at the nodes' timing), so it costs
seconds of CPU instead of a second flight of the stack and measures the state as the stack
does; it has none of the middleware's sub-millisecond transport and none of the host's stalls.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vnd_tools.flight_report import PhaseResult, phase_results


def reference_phases(
    meta: dict[str, Any],
    spans: Sequence[tuple[str, float, float]],
    reference_period_s: float | None,
) -> dict[str, list[PhaseResult]]:
    """Per-phase results of the references of a flight (``meta``: the run's
    flight_meta.json), flown in simulated time: ``"base"`` the shipped base bundle, and
    ``"start"`` the bundle the flight started from when that is another file."""
    import torch
    from vnd_core.bundle import shipped_bundle_path

    torch.set_num_threads(1)
    shipped = shipped_bundle_path()
    start = (meta.get("launch_args") or {}).get("bundle")
    paths = {"base": shipped}
    if start and Path(start).resolve() != shipped.resolve():
        paths["start"] = Path(start)
    return {
        name: _flown_phases(path, meta, spans, reference_period_s) for name, path in paths.items()
    }


def _flown_phases(
    bundle_path: Path,
    meta: dict[str, Any],
    spans: Sequence[tuple[str, float, float]],
    reference_period_s: float | None,
) -> list[PhaseResult]:
    """Per-phase results of ``bundle_path`` flying the flight's scenario and seed."""
    from vnd_core.bundle import load_bundle
    from vnd_core.scenario import load_scenario
    from vnd_flight.runtime_flight import fly_scenario

    flight = fly_scenario(
        load_bundle(bundle_path), load_scenario(meta["scenario_arg"]), int(meta.get("seed", 0))
    )
    return phase_results(flight.time_s, flight.error_m, spans, reference_period_s)


def against_base(
    phases: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """For each condition, its last occurrence in the flight against a reference's error on
    that same span (both as report.json phase rows): ``reduction`` = 1 - flight / base
    (0.6 = 60 % lower)."""
    rows = []
    for name in dict.fromkeys(p["name"] for p in phases):
        last = max(
            (i for i, p in enumerate(phases) if p["name"] == name and p["rmse_m"] is not None),
            default=None,
        )
        if last is None or not base[last]["rmse_m"]:
            continue
        flight, reference = phases[last], base[last]
        rows.append(
            {
                "phase": name,
                "start_s": flight["start_s"],
                "rmse_m": flight["rmse_m"],
                "base_rmse_m": reference["rmse_m"],
                "reduction": round(1.0 - flight["rmse_m"] / reference["rmse_m"], 4),
                "settled_rmse_m": flight["steady_rmse_m"],
                "base_settled_rmse_m": reference["steady_rmse_m"],
            }
        )
    return rows
