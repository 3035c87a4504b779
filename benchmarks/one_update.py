"""One learner update on a recorded flight, the candidate then flown in simulated time.

Reads the replay store of a ``vnd fly`` run folder (``<run>/learner/replay``), keeps the ticks of
its first ``--until-s`` seconds, runs one update of the learner preset from ``--bundle`` (the
shipped base bundle by default; pass a bundle of the run's registry, ``<run>/learner/bundles/``,
to continue from it) and flies the candidate for 20 s on the true plant along recurring_wind's
figure-eight, in calm air and in steady 4 m/s winds along +x (wind A) and +y (wind B). RMSE after
the first 3 s (the encoder's warm-up). This is how a learner setting is judged on real flight data
without flying: e.g. how much of a new wind one update learns from its first 10 s.

With ``--improve-rounds N`` the accepted candidate's policy is then trained further in up to N
policy improvement rounds (as the flight learner does between updates), and every version a
round emits is flown the same way.

Prints one JSON object last: ``accepted``, ``reason``, ``timing_s`` (fit, train, validate,
total, CPU), ``rmse_m`` (calm, wind_a, wind_b; only for an accepted candidate), ``rounds``
(per improvement round: accepted, learned-model cost, CPU time, and ``rmse_m`` of a new version).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from vnd_core.bundle import Bundle, load_bundle, save_bundle, shipped_bundle_path
from vnd_core.learner import ContinualLearner, SimulatedFlight
from vnd_core.learner.records import TickRecords
from vnd_core.learner.settings import (
    LEARNER_PRESETS,
    learner_preset,
    parse_assignments,
    with_overrides,
)
from vnd_core.scenario import Phase, Scenario, WindEvent, load_scenario
from vnd_flight.learner_store.replay_store import ReplayStore, StoreTopic
from vnd_learner.records import TRANSITION_TYPE, key_of_cdr, records_from_cdr
from vnd_ros.messages import message_definition, type_hash

FLIGHT_S = 20.0  # simulated flight per condition
SETTLE_TICKS = 150  # ticks left out of the RMSE (3 s: encoder warm-up, first transient)
WINDS_MPS = {"calm": None, "wind_a": (4.0, 0.0, 0.0), "wind_b": (0.0, 4.0, 0.0)}


def replay_records(run: Path, until_s: float) -> TickRecords:
    """The stored ticks of ``run`` stamped within ``until_s`` of its first one (stamp order).
    The store is read from a copy: opening a store may repair its index."""
    source = run / "learner" / "replay"
    if not source.is_dir():
        raise SystemExit(f"{source}: no replay store (is {run} a vnd fly run folder?)")
    copy = Path(tempfile.mkdtemp(prefix="vnd-one-update-")) / "replay"
    shutil.copytree(source, copy)
    definition, _ = message_definition(TRANSITION_TYPE)
    topic = StoreTopic("/vnd1/vnd/replay", TRANSITION_TYPE, definition, type_hash(TRANSITION_TYPE))
    messages, _ = ReplayStore(copy, topic, key_of_cdr).open()
    shutil.rmtree(copy.parent, ignore_errors=True)
    records = records_from_cdr([m.data for m in messages])
    records = records.take(np.argsort(records.stamp_ns))
    age_s = (records.stamp_ns - records.stamp_ns[0]) / 1e9
    return records.take(age_s < until_s)


def steady_wind(velocity_mps: tuple[float, float, float] | None) -> Scenario:
    """recurring_wind's figure-eight in one steady condition from the start."""
    reference = load_scenario("recurring_wind").reference
    events = (
        (WindEvent(type="wind", at_s=0.0, kind="constant", velocity_mps=velocity_mps),)
        if velocity_mps
        else ()
    )
    return Scenario("steady", FLIGHT_S + 1.0, reference, (Phase("steady", 0.0),), events)


def fly_rmse_m(bundle: Bundle, velocity_mps: tuple[float, float, float] | None) -> float:
    """RMSE [m] of ``bundle`` over the flight after its first SETTLE_TICKS ticks."""
    chunk = SimulatedFlight(steady_wind(velocity_mps), bundle, seed=0).fly(FLIGHT_S)
    return float(np.sqrt(np.mean(chunk.error_m[SETTLE_TICKS:] ** 2)))


def main() -> None:
    """Run the update, fly the candidate, print the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="vnd fly run folder (runs/<stamp>)")
    parser.add_argument("--until-s", type=float, required=True, help="seconds of flight to use")
    parser.add_argument("--bundle", type=Path, default=None, help="active bundle to start from")
    parser.add_argument("--preset", default="standard", choices=tuple(LEARNER_PRESETS))
    parser.add_argument(
        "--learner-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a LearnerConfig field to replace, as the learner node's parameter "
        "(e.g. trainer.iterations=60; repeatable)",
    )
    parser.add_argument("--save", type=Path, default=None, help="write the candidate here")
    parser.add_argument(
        "--improve-rounds", type=int, default=0, help="policy improvement rounds afterwards"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    changes = parse_assignments(args.learner_param)
    config = with_overrides(learner_preset(args.preset), changes, "--learner-param")
    start = load_bundle(args.bundle or shipped_bundle_path())
    learner = ContinualLearner(start.vehicle, config, start)
    learner.ingest(replay_records(args.run, args.until_s))
    result = learner.update()
    out = {
        "run": str(args.run),
        "until_s": args.until_s,
        "start_version": start.version,
        "learner_params": changes,
        "ticks": learner.ticks_stored,
        "accepted": result.accepted,
        "reason": result.reason,
        "timing_s": result.metrics.get("timing_s"),
        "unexplained_windows": result.metrics.get("data", {}).get("unexplained_windows"),
    }
    if result.bundle is not None:
        out["rmse_m"] = {
            name: round(fly_rmse_m(result.bundle, v), 4) for name, v in WINDS_MPS.items()
        }
        if args.save:
            save_bundle(result.bundle, args.save)
        out["rounds"] = [improvement_round(learner) for _ in range(args.improve_rounds)]
    print(json.dumps(out))


def improvement_round(learner: ContinualLearner) -> dict:
    """One improvement round (improvement switched on), its figures, and the new version flown."""
    if not learner.config.improvement.enabled:
        improvement = dataclasses.replace(learner.config.improvement, enabled=True)
        learner.config = dataclasses.replace(learner.config, improvement=improvement)
    cpu_start = time.process_time()
    result = learner.improve()
    row = {
        "accepted": result.accepted,
        "cost_m": (result.metrics.get("validation") or {}).get("cost_m"),
        "cpu_s": round(time.process_time() - cpu_start, 2),
        "reason": result.reason[:100],
    }
    if result.accepted:
        row["rmse_m"] = {
            name: round(fly_rmse_m(result.bundle, v), 4) for name, v in WINDS_MPS.items()
        }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


if __name__ == "__main__":
    main()
