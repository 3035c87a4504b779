"""The residual components a model is used with, and the rotation gate of a learner that
would train its policy against the full residual.

The learner's own path: a quick update on a simulated flight (calm, then wind) with
``residual_components: full`` runs the gate on the calm replay windows (measured: tilt
12.6 deg after 50 steps against the prior's 2.7 deg on 152 windows: refused).

Data: synthetic calm flight (the prior's own physics with random smooth commands, so every
window is calm), in which the prior predicts the attitude exactly. A model whose residual is
about zero passes the rotation gate; the same model with a constant rotational correction (a
drift of the kind a rate-loop lag fitted from motion capture gives) is rejected, the reason
naming the model's and the prior's figures. With the translational components the attitude is
the prior's and the gate has nothing to check; with the default's rate offsets it checks them.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.learner import ContinualLearner, LearnerConfig, SimulatedFlight
from vnd_core.learner.outcome import UpdateResult
from vnd_core.learner.validation import ValidationConfig, rotation_worse_than_prior
from vnd_core.scenario import Phase, Scenario, WindEvent, load_scenario
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import TransitionDataset, VNDModel, VNDModelConfig
from vnd_core.vnd.components import SUMMARY_KEY, compose, recorded_components
from vnd_core.vnd.features import RES_ROT, apply_residual
from vnd_core.vnd.metrics import window_errors
from vnd_core.vnd.synthetic import two_condition_segments

VEHICLE = load_vehicle("agile")
CALM = (0.0, 0.0, 0.0)


@pytest.fixture(scope="module")
def calm():
    """(model with ~zero residual and fitted statistics, calm dataset of 8 x 120 ticks)."""
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, VNDModelConfig(action_delay_ticks=0)).eval()
    dataset = TransitionDataset(
        model.prior, two_condition_segments(model.prior, CALM, CALM, 4, 120)
    )
    model.fit_normalizers(dataset)
    return model, dataset


def _drifting(model: VNDModel, rad_per_tick: float) -> VNDModel:
    """``model`` with a constant roll correction of ``rad_per_tick`` each step."""
    drifting = copy.deepcopy(model)
    head = [m for m in drifting.residual.head.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        bias = torch.zeros(head.bias.shape[0])  # the state-dependent outputs, rotation included
        bias[RES_ROT.start] = rad_per_tick
        head.bias.copy_(bias / drifting.residual.target_std[: len(bias)])
    return drifting


def test_a_model_near_the_prior_passes_the_rotation_gate(calm):
    model, dataset = calm
    reason, figures = rotation_worse_than_prior(model, dataset, ValidationConfig(), "full")
    assert reason is None, reason
    assert figures["calm_windows"] > 0 and figures["horizon"] == 50
    assert figures["model_tilt_deg"] == pytest.approx(figures["prior_tilt_deg"], abs=0.5)


def test_a_drifting_rotational_residual_is_rejected_with_its_figures(calm):
    model, dataset = calm
    drifting = _drifting(model, 0.005)  # 0.25 rad of roll over 50 steps
    reason, figures = rotation_worse_than_prior(drifting, dataset, ValidationConfig(), "full")
    assert reason is not None
    assert figures["model_tilt_deg"] > figures["prior_tilt_deg"] + 5.0, figures
    assert f"tilt error {figures['model_tilt_deg']:.2f} deg" in reason
    assert f"(prior {figures['prior_tilt_deg']:.2f} deg)" in reason
    assert f"{figures['calm_windows']} replay windows" in reason
    # a policy trained against forces alone never meets the drift: nothing to check
    assert rotation_worse_than_prior(drifting, dataset, ValidationConfig(), "translational") == (
        None,
        {},
    )
    # nor does one trained against forces and rate offsets (the default): checked, and passed
    reason, figures = rotation_worse_than_prior(drifting, dataset, ValidationConfig())
    assert reason is None and figures["model_tilt_deg"] == pytest.approx(
        figures["prior_tilt_deg"], abs=0.5
    )


def test_the_translational_set_keeps_the_prior_attitude_and_rates(calm):
    model, dataset = calm
    drifting = _drifting(model, 0.005)
    starts = dataset.window_starts(model.context_len, 10)
    translational = window_errors(drifting, dataset, starts, 10, "translational")
    full = window_errors(drifting, dataset, starts, 10, "full")
    assert translational["model"]["tilt_rad"] == pytest.approx(translational["prior"]["tilt_rad"])
    assert full["model"]["tilt_rad"] > 10 * full["prior"]["tilt_rad"] + 1e-3
    predicted, residual = dataset.tensors()["next"][:5], torch.randn(5, 12)
    torch.testing.assert_close(
        compose(predicted, residual, "full"), apply_residual(predicted, residual)
    )


def calm_then_wind_update(config: LearnerConfig) -> UpdateResult:
    """One model update of a learner (``config``) on 10 s of calm, then wind, flown by the
    shipped base bundle."""
    base = load_bundle(shipped_bundle_path())
    reference = load_scenario("recurring_wind").reference
    wind = WindEvent(type="wind", at_s=4.0, kind="constant", velocity_mps=(4.0, 0.0, 0.0))
    phases = (Phase("calm", 0.0), Phase("wind", 4.0))
    scenario = Scenario("calm_then_wind", 20.0, reference, phases, (wind,))
    records = SimulatedFlight(scenario, base, seed=0).fly(10.0).records
    learner = ContinualLearner(base.vehicle, config, base)
    learner.ingest(records)
    return learner.update()


def test_a_model_the_rotation_gate_refuses_trains_no_policy():
    """The model gates run before the policy training: a refused model costs no training."""
    config = LearnerConfig.quick(residual_components="full")
    strict = dataclasses.replace(config.validation, rotation_margin_frac=-0.99)
    result = calm_then_wind_update(dataclasses.replace(config, validation=strict))
    assert not result.accepted
    assert result.reason.startswith("rotational residual worse than the prior"), result.reason
    assert result.train_s == 0.0 and "train" not in result.metrics
    assert result.fit_s > 0.0 and "rotation_check" in result.metrics["validation"]


def test_a_learner_training_on_the_full_residual_gates_its_rotation():
    result = calm_then_wind_update(LearnerConfig.quick(residual_components="full"))
    figures = result.metrics["validation"]["rotation_check"]
    assert figures["calm_windows"] > 0 and figures["horizon"] == 50, figures
    worse = figures["model_tilt_deg"] > 1.1 * figures["prior_tilt_deg"] + 1e-3
    if worse:
        assert not result.accepted
        assert result.reason.startswith("rotational residual worse than the prior")
        assert f"tilt error {figures['model_tilt_deg']:.2f} deg" in result.reason
    else:
        assert not result.reason.startswith("rotational residual"), result.reason
    with pytest.raises(ValueError, match="components must be one of"):
        LearnerConfig.quick(residual_components="all").validate()


def test_a_bundle_records_its_components_or_means_the_set_before_the_record():
    assert recorded_components({}) == "translational"
    assert recorded_components({SUMMARY_KEY: "full"}) == "full"
    with pytest.raises(ValueError, match="'rotational'"):
        recorded_components({SUMMARY_KEY: "rotational"})
