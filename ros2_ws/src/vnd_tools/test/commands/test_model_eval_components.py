"""``vnd model-eval`` scores the residual a bundle's policy trains on, with every error kind.

A short simulated flight (calm, then a 4 m/s wind) flown by the shipped base bundle is written
as a real MCAP replay bag; a VND model is fitted on it and saved in real bundles that record
(or do not record) the residual components of their policy. By default the model is scored as
the policy uses it (translational residual, the prior's attitude and rates), with position,
velocity, tilt and attitude errors at 1, 10 and 50 steps, per segment and overall, in the
table, the JSON and the PNG; ``--components full`` scores every component instead.
"""

from __future__ import annotations

import json

import pytest
import torch
from vnd_core.bundle import Bundle, load_bundle, save_bundle, shipped_bundle_path
from vnd_core.evaluation.replay_bag import read_transitions, write_transitions
from vnd_core.learner import SimulatedFlight
from vnd_core.scenario import Phase, Scenario, WindEvent
from vnd_core.vnd import FitConfig, VNDModel, fit_vnd
from vnd_core.vnd.components import SUMMARY_KEY
from vnd_core.vnd.metrics import ERROR_KINDS
from vnd_tools.cli import main as vnd_main
from vnd_tools.commands import model_eval

HORIZONS = ("1", "10", "50")
ANGLES = ("tilt_rad", "attitude_rad")
CALM_THEN_WIND = Scenario(
    name="calm_then_wind",
    duration_s=12.0,
    phases=(Phase("calm", 0.0), Phase("wind", 4.0)),
    events=(WindEvent(type="wind", at_s=4.0, kind="constant", velocity_mps=(4.0, 0.0, 0.0)),),
)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """(bag path, model fitted on it, base bundle): 10 s of hover flown by the base bundle."""
    base = load_bundle(shipped_bundle_path())
    records = SimulatedFlight(CALM_THEN_WIND, base, seed=1).fly(10.0).records
    bag = write_transitions(tmp_path_factory.mktemp("bags") / "flight", records)
    torch.manual_seed(0)
    model = VNDModel(base.vehicle)
    dataset, _ = model_eval.replay_dataset(model, read_transitions(bag))
    fit_vnd(model, dataset, FitConfig.quick(steps=80), warm_start=False)
    return bag, model.eval(), base


def _bundle(replay, path, summary: dict) -> str:
    _, model, base = replay
    bundle = Bundle(2, 1, base.policy, base.vehicle, model=model, summary=summary)
    return str(save_bundle(bundle, path))


def _evaluate(replay, bundle: str, out, *extra: str) -> dict:
    bag = replay[0]
    argv = ["model-eval", "--bag", str(bag), "--bundle", bundle, "--json", str(out), *extra]
    assert vnd_main(argv) == 0
    return json.loads(out.read_text())


def test_a_bundle_without_a_record_is_scored_translational_with_every_error_kind(
    replay, tmp_path, capsys
):
    bundle = _bundle(replay, tmp_path / "v2.safetensors", {})  # no record: an older bundle
    png = tmp_path / "errors.png"
    report = _evaluate(replay, bundle, tmp_path / "eval.json", "--png", str(png))
    assert report["components"] == report["recorded_components"] == "translational"
    assert set(report["errors"]) == set(HORIZONS)
    for horizon in HORIZONS:
        errors = report["errors"][horizon]
        for kind in ERROR_KINDS:
            assert errors["prior"][kind] >= 0.0 and errors["model"][kind] >= 0.0
        # attitude and rates come from the prior: the model's angle errors are the prior's
        for kind in ANGLES:
            assert errors["model"][kind] == pytest.approx(errors["prior"][kind], abs=1e-6)
        assert errors["model"]["position_m"] == report["model_err_m"][horizon]
    # the wind is learned: velocity and position predictions beat the prior's
    for kind in ("position_m", "velocity_mps"):
        assert report["errors"]["10"]["model"][kind] < report["errors"]["10"]["prior"][kind]
    (segment,) = report["per_segment"]
    assert set(segment["50"]["model"]) == set(ERROR_KINDS)
    assert segment["50"]["model"]["velocity_mps"] == pytest.approx(
        report["errors"]["50"]["model"]["velocity_mps"], rel=0.05
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "residual components translational" in table
    for head in ("position_m", "velocity_mps", "tilt_deg", "attitude_deg"):
        assert head in table
    assert sum(line.split()[0] == "all" for line in table.splitlines() if line.strip()) == 3


def test_full_components_are_scored_when_asked_or_recorded(replay, tmp_path):
    plain = _bundle(replay, tmp_path / "plain.safetensors", {})
    asked = _evaluate(replay, plain, tmp_path / "asked.json", "--components", "full")
    assert asked["components"] == "full" and asked["recorded_components"] == "translational"
    # the rotational residual now acts: the model's attitude differs from the prior's
    assert asked["errors"]["50"]["model"]["attitude_rad"] != pytest.approx(
        asked["errors"]["50"]["prior"]["attitude_rad"], abs=1e-6
    )
    recorded = _bundle(replay, tmp_path / "full.safetensors", {SUMMARY_KEY: "full"})
    default = _evaluate(replay, recorded, tmp_path / "default.json")
    assert default["components"] == default["recorded_components"] == "full"
    assert default["errors"] == asked["errors"]
    alias = _evaluate(replay, plain, tmp_path / "alias.json", "--components", "all")
    assert alias["errors"] == asked["errors"]


def test_an_unknown_recorded_set_is_refused_by_name(replay, tmp_path, capsys):
    bundle = _bundle(replay, tmp_path / "odd.safetensors", {SUMMARY_KEY: "rotational"})
    bag = replay[0]
    argv = ["model-eval", "--bag", str(bag), "--bundle", bundle, "--json", str(tmp_path / "x")]
    assert vnd_main(argv) == 2
    assert "'rotational'" in capsys.readouterr().out
