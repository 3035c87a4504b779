"""A scenario flown by the stack's flight runtime in simulated time (the report's references):
the encoder's latent reaches the policy, and a force-input policy flies with its observer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path, shipped_observer_bundle_path
from vnd_core.scenario import Phase, Scenario, WindEvent
from vnd_flight.runtime_flight import fly_scenario

LEARNED = Path(__file__).parents[2] / "vnd_policy" / "test" / "data" / "replay_bundle.safetensors"
WINDY = Scenario(
    name="windy",
    duration_s=14.0,
    phases=(Phase("calm", 0.0), Phase("wind", 4.0)),
    events=(WindEvent(type="wind", at_s=4.0, kind="constant", velocity_mps=(4.0, 0.0, 0.0)),),
)


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_a_bundle_with_a_model_flies_on_its_encoders_latent():
    """The same bundle with its model (the encoder feeds z) and without (z = 0) flies
    differently, and the latent is valid on nearly every tick once the take-off is done."""
    learned = load_bundle(LEARNED)
    with_encoder = fly_scenario(learned, WINDY)
    blind = fly_scenario(dataclasses.replace(learned, model=None), WINDY)
    assert with_encoder.latent_valid > 0.9
    assert blind.latent_valid == 0.0
    apart_m = np.abs(with_encoder.position_m - blind.position_m).max()
    assert apart_m > 0.002, f"the latent changed the flight by {apart_m * 1000:.2f} mm only"
    assert not with_encoder.crashed


def test_the_observer_start_holds_a_wind_the_base_bundle_is_blown_off_by():
    """Ground truth after the wind's first 3 s: the base bundle (blind) sits centimetres
    downwind, the observer start holds its point."""
    late = {}
    for name, path in (
        ("base", shipped_bundle_path()),
        ("observer", shipped_observer_bundle_path()),
    ):
        flight = fly_scenario(load_bundle(path), WINDY)
        late[name] = float(flight.error_m[flight.time_s > 7.0].mean())
    assert late["base"] > 0.05, late
    assert late["observer"] < 0.02, late
