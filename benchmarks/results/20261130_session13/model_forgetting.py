"""Does a learner update's *model* forget a condition it knew? (session 13 study)

    python model_forgetting.py RUN_DIR [RUN_DIR ...]

For each run, the replay's ticks up to 170 s (before wind A returns) are split by the
scenario's phases into calm, wind A and wind B, and every registry model's open-loop position
error after 10 and 25 steps (``vnd_core.vnd.metrics.open_loop_errors``: the window encoded from
its context, the logged actions rolled out) is printed per condition, with the prior's.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from vnd_core import flight_report as fr
from vnd_core.bundle import load_bundle
from vnd_core.evaluation.replay_bag import read_transitions
from vnd_core.learner import LearnerConfig
from vnd_core.learner.segmenter import to_segments
from vnd_core.scenario import load_scenario
from vnd_core.vnd.data import TransitionDataset
from vnd_core.vnd.metrics import open_loop_errors
from vnd_ros.commands import fly

HORIZONS = (10, 25)


def condition_of(t_s: np.ndarray, scenario) -> np.ndarray:
    """Phase name (N,) of every scenario time (before the start: the first phase)."""
    starts = np.array([p.start_s for p in scenario.phases])
    index = np.clip(np.searchsorted(starts, t_s, side="right") - 1, 0, None)
    return np.array([scenario.phases[i].name for i in index])


def labelled_replay(run: Path):
    """A demo run's replay store (TickRecords, N ticks), each tick's scenario time (N,) [s] and
    its scenario phase name (N,) (from the run's bag and flight_meta.json)."""
    meta = json.loads((run / "flight_meta.json").read_text())
    flight = fly.read_flight(run / "bag", meta["vehicle"])
    clock = fr.ScenarioClock(flight.clock_points, meta["real_time_factor"])
    records = read_transitions(run / "learner" / "replay")
    t_s = clock.to_scenario_s(records.stamp_ns)
    return records, t_s, condition_of(t_s, load_scenario(meta["scenario"]))


def main() -> None:
    torch.set_num_threads(1)
    config = LearnerConfig.standard()
    for run in map(Path, sys.argv[1:]):
        records, t_s, conditions = labelled_replay(run)
        bundles = sorted((run / "learner" / "bundles").glob("v*.safetensors"))
        models = {load_bundle(p).version: load_bundle(p).model for p in bundles}
        row: dict = {"run": run.name}
        for name in ("calm", "wind_a", "wind_b"):
            keep = np.flatnonzero((conditions == name) & (t_s > 2.0) & (t_s < 170.0))
            segments = to_segments(
                records.take(keep),
                config.control_period_s,
                config.gap_factor,
                velocity_half_window=config.velocity_half_window,
            )
            for version, model in models.items():
                dataset = TransitionDataset(model.prior, segments, model.config.action_delay_ticks)
                errors = open_loop_errors(model, dataset, HORIZONS, 1000)
                row.setdefault(name, {})["prior"] = {
                    h: round(e * 100, 2) for h, e in errors["prior_err_m"].items()
                }
                row[name][f"v{version}"] = {
                    h: round(e * 100, 2) for h, e in errors["model_err_m"].items()
                }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
