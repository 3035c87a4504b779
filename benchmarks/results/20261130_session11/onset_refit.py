"""Session 10's ``onset_refit.py`` with two extensions (session 11 experiment): the changes may
name LearnerConfig fields (FitConfig fields under "fit", VNDModelConfig fields under "model"),
and INIT_VERSION 0 starts from the shipped base bundle, so a new model is fitted.

    python onset_refit.py RUN_DIR INIT_VERSION UPTO_S ['{"model": {"short_context_len": 8}}']

Everything else (the encoder replay through ``LatentEstimator``, the onset figures) is the
session-10 script's, loaded from ``../20261130_session10/onset_refit.py``.
"""

import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from vnd_core import flight_report as fr
from vnd_core.bundle import load_bundle, save_bundle
from vnd_core.commands.sim import shipped_bundle_path
from vnd_core.evaluation.replay_bag import read_transitions
from vnd_core.learner import ContinualLearner, LearnerConfig
from vnd_ros.commands import fly

_SOURCE = Path(__file__).resolve().parent.parent / "20261130_session10" / "onset_refit.py"
_spec = importlib.util.spec_from_file_location("onset_refit_session10", _SOURCE)
session10 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(session10)


def refit(run: Path, init_version: int, upto_s: float, changes: dict):
    """The update's bundle, the flight's records and their scenario times [s]."""
    meta = json.loads((run / "flight_meta.json").read_text())
    flight = fly.read_flight(run / "bag", meta["vehicle"])
    clock = fr.ScenarioClock(flight.clock_points, meta["real_time_factor"])
    records = read_transitions(run / "learner" / "replay")
    t_s = clock.to_scenario_s(records.stamp_ns)
    if init_version == 0:  # the shipped base bundle (no model yet): a new model is fitted
        init = load_bundle(shipped_bundle_path())
    else:
        init = load_bundle(run / "learner" / "bundles" / f"v{init_version:04d}.safetensors")
    config = LearnerConfig.standard()
    changes = dict(changes)
    fit = dataclasses.replace(config.fit, **changes.pop("fit", {}))
    model = dataclasses.replace(config.model, **changes.pop("model", {}))
    config = dataclasses.replace(config, fit=fit, model=model, **changes)
    learner = ContinualLearner(init.vehicle, config, init)
    learner.ingest(records.take(np.flatnonzero(t_s < upto_s)))
    result = learner.update()
    print("update", result.accepted, result.reason, round(result.total_s, 1), flush=True)
    if result.bundle is None:
        raise SystemExit("the update produced no bundle")
    return result.bundle, records, t_s


def main() -> None:
    torch.set_num_threads(1)
    run, init_version, upto_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    changes = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    bundle, records, t_s = refit(run, init_version, upto_s, changes)
    if os.environ.get("SAVE_BUNDLE"):
        save_bundle(bundle, Path(os.environ["SAVE_BUNDLE"]))
    figures = session10.onset_figures(session10.encode(bundle.model, records), t_s)
    summary = {"run": str(run), "init": init_version, "upto_s": upto_s, "changes": changes}
    print(json.dumps({**summary, "onsets": figures}))


if __name__ == "__main__":
    main()
