"""Repeat one learner update of a demo run offline, with learner settings changed, and fly the
result on the true plant per condition (session 13 study).

    python update_replay.py OUT.jsonl TAG 'OVERRIDES_JSON' RUN_DIR:FROM_VERSION[:DATA_OF] [...]

For each RUN_DIR:FROM_VERSION, the learner starts from that registry bundle (1: the shipped base
bundle), ingests the run's replay up to the start of the update that made DATA_OF (default
FROM_VERSION + 1) in the flight (decided time minus its cycle time) and runs one update with
``LearnerConfig.standard`` plus OVERRIDES (``vnd fly --learner-overrides`` syntax). The gates'
margins are opened so that the candidate is always emitted; what the gates measured is kept. The
candidate is flown by ``bundle_truth.steady_errors`` (calm, wind A, wind B, 20 s each, encoder
in the loop). One JSON line per update: TAG, the update's data, its gate figures, its wall times
and the errors.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from bundle_truth import BASE, steady_errors
from vnd_core.bundle import load_bundle, save_bundle
from vnd_core.config_io import apply_overrides
from vnd_core.evaluation.replay_bag import read_transitions
from vnd_core.learner import ContinualLearner, LearnerConfig

SAVE_DIR = os.environ.get("SAVE_DIR", "")  # keep each candidate bundle there when set
OPEN_GATES = {
    "validation": {"cost_margin_frac": 100.0, "calm_margin_m": 100.0, "hover_max_dev_m": 100.0}
}


def replay_update(
    run: Path, from_version: int, overrides: dict, data_of: int | None = None
) -> dict:
    """One update from ``from_version`` on the run's replay up to the start of the update that
    made version ``data_of`` (default: ``from_version + 1``) in the flight."""
    index = json.loads((run / "learner" / "bundles" / "index.json").read_text())
    data_of = data_of or from_version + 1
    entry = next(b for b in index["bundles"] if b["version"] == data_of)
    active = (
        load_bundle(BASE)
        if from_version == 1
        else load_bundle(run / "learner" / "bundles" / f"v{from_version:04d}.safetensors")
    )
    cutoff_wall_s = entry["decided_wall_s"] - entry["metrics"]["timing_s"]["total"]
    config = apply_overrides(LearnerConfig.standard(), overrides, "overrides")
    config = apply_overrides(config, OPEN_GATES, "open gates")
    learner = ContinualLearner(active.vehicle, config, active)
    records = read_transitions(run / "learner" / "replay")
    learner.ingest(records.take(np.flatnonzero(records.stamp_ns < cutoff_wall_s * 1e9)))
    start = time.perf_counter()
    result = learner.update()
    wall_s = time.perf_counter() - start
    assert result.bundle is not None, result.reason
    if SAVE_DIR:
        Path(SAVE_DIR).mkdir(parents=True, exist_ok=True)
        save_bundle(result.bundle, Path(SAVE_DIR) / f"{run.name}_from{from_version}.safetensors")
    meta = json.loads((run / "flight_meta.json").read_text())
    return {
        "run": run.name,
        "from": from_version,
        "data_of": data_of,
        "cutoff_s": round(cutoff_wall_s - meta["wall_start_s"], 1),
        "wall_s": round(wall_s, 1),
        "validation": result.metrics.get("validation"),
        "train": result.metrics.get("train"),
        "truth": steady_errors(result.bundle),
    }


def main() -> None:
    torch.set_num_threads(1)
    out_path, tag, overrides = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    for item in sys.argv[4:]:
        run, from_version, *data_of = item.split(":")
        data = int(data_of[0]) if data_of else None
        row = {"tag": tag, "overrides": overrides,
               **replay_update(Path(run), int(from_version), overrides, data)}  # fmt: skip
        with out_path.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
