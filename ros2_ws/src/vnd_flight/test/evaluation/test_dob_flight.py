"""The disturbance-observer baseline flies end to end on the flight runtime: the policy node's
observer feeds dob's force-conditioned policy and compensates its commands."""

from __future__ import annotations

import numpy as np
import pytest
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.evaluation.baselines import train_baseline_bundle
from vnd_core.evaluation.continual_loop import Method, run_method
from vnd_core.evaluation.dob import dob_method
from vnd_core.scenario import scenario_from_mapping
from vnd_core.trainer import TrainerConfig
from vnd_flight.evaluation_flight import fly_runtime

HOVER_IN_WIND = {
    "name": "hover_wind_5mps",
    "description": "hover; a steady 5 m/s wind along +x from t = 1 s",
    "duration_s": 7.0,
    "reference": {"kind": "hover", "center_m": [0.0, 0.0, 1.2]},
    "phases": [{"name": "calm", "start_s": 0.0}, {"name": "wind", "start_s": 1.0}],
    "events": [{"at_s": 1.0, "type": "wind", "kind": "constant", "velocity_mps": [5, 0, 0]}],
}


@pytest.mark.slow
def test_dob_policy_holds_hover_in_wind_better_than_base():
    """A briefly trained force-conditioned policy fed by the observer holds hover in a 5 m/s
    wind closer than the base policy (the feed-forward path works end to end)."""
    base = load_bundle(shipped_bundle_path())
    trainer = TrainerConfig(num_envs=64, horizon_ticks=32, iterations=10, learning_rate=1e-3)
    dob = dob_method(train_baseline_bundle(base, "dob", trainer))
    assert dob.initial.policy.force_dim == 3  # flown as the stack flies a force-input bundle
    scenario = scenario_from_mapping(HOVER_IN_WIND, "dob test wind")
    errors = {}
    for method in (Method("base", base), dob):
        run = run_method(method, scenario, seed=0, fly=fly_runtime, update_delay_s=0.0)
        late = run.time_s > 4.0  # the wind has blown for 3 s
        errors[method.name] = float(np.sqrt(np.mean(run.error_m[late] ** 2)))
    assert errors["dob"] < 0.8 * errors["base"], errors
