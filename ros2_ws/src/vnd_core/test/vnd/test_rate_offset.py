"""The residual's body-rate offset: a function of the latent alone, fitted as each condition's
mean rate residual, and what the policy trains against by default.

Data: synthetic flight of the prior's own physics (so calm flight is explained exactly) in two
conditions, calm and one whose body rates gain a constant kick every step, the mark a constant
torque leaves under the rate loop (an offset centre of mass, a weak rotor). The fit must give
the torque condition its kick and calm flight none: an offset left in calm flight integrates
into degrees of tilt within a second of open-loop prediction, which the rotation gate refuses.
"""

from __future__ import annotations

import copy

import pytest
import torch
from vnd_core.bundle import load_bundle, shipped_bundle_path
from vnd_core.learner import LearnerConfig
from vnd_core.learner.model_update import start_model
from vnd_core.learner.validation import ValidationConfig, rotation_worse_than_prior
from vnd_core.vehicle import load_vehicle
from vnd_core.vnd import TransitionDataset, VNDModel, VNDModelConfig
from vnd_core.vnd.components import DEFAULT_COMPONENTS, compose
from vnd_core.vnd.features import RES_OMEGA, RES_ROT, RES_VEL
from vnd_core.vnd.fit import FitConfig, fit_vnd
from vnd_core.vnd.synthetic import simulate_with_forces

VEHICLE = load_vehicle("agile")
KICK_RADPS = 0.2  # pitch rate gained per 20 ms step in the torque condition


@pytest.fixture(scope="module")
def fitted():
    """(model fitted on calm + torque flight, its dataset, the fit report)."""
    torch.manual_seed(0)
    model = VNDModel(VEHICLE, VNDModelConfig(action_delay_ticks=0))
    kicks = torch.tensor([[0.0, 0.0, 0.0], [0.0, KICK_RADPS, 0.0]]).repeat(4, 1)
    segments = simulate_with_forces(
        model.prior,
        torch.zeros(8, 3),
        200,
        torch.Generator().manual_seed(0),
        labels=[0, 1] * 4,
        rate_kicks_radps=kicks,
    )
    dataset = TransitionDataset(model.prior, segments)
    report = fit_vnd(model, dataset, FitConfig(steps=300, batch_size=64), warm_start=False)
    return model, dataset, report


def _rate_offsets(model: VNDModel, z: torch.Tensor) -> torch.Tensor:
    """The body-rate residual (B, 3) of latents ``z`` (B, nz) at arbitrary states."""
    states = torch.randn(len(z), 13)
    return model.residual_correction(states, torch.randn(len(z), 4), z)[:, RES_OMEGA]


def test_the_rate_residual_depends_on_the_latent_alone(fitted):
    model, _, report = fitted
    z = report.latents.z[:4]
    with torch.no_grad():
        at_one_state = model.residual_correction(torch.zeros(4, 13), torch.zeros(4, 4), z)
        at_another = model.residual_correction(torch.randn(4, 13), torch.randn(4, 4), z)
    torch.testing.assert_close(at_one_state[:, RES_OMEGA], at_another[:, RES_OMEGA])
    assert not torch.allclose(at_one_state[:, RES_VEL], at_another[:, RES_VEL])


def test_the_fit_gives_each_condition_its_mean_rate_offset(fitted):
    model, _, report = fitted
    with torch.no_grad():
        offsets = _rate_offsets(model, report.latents.z)
    calm, torque = offsets[report.latents.labels == 0], offsets[report.latents.labels == 1]
    assert torque[:, 1].mean() == pytest.approx(KICK_RADPS, abs=0.002)
    assert torque[:, [0, 2]].abs().mean() < 0.001
    # calm flight gets no offset: a few mrad/s per step would tilt an open-loop second by
    # degrees (the optimiser alone leaves about 10 mrad/s of batch noise in the mean)
    assert calm.abs().mean() < 0.001, calm.abs().mean(0)


def test_the_default_components_pass_the_rotation_gate_on_calm_flight(fitted):
    model, dataset, _ = fitted
    assert DEFAULT_COMPONENTS == "translational_rates"
    reason, figures = rotation_worse_than_prior(model, dataset, ValidationConfig())
    assert reason is None, reason
    assert figures["calm_windows"] > 0
    assert figures["model_tilt_deg"] <= 1.1 * figures["prior_tilt_deg"] + 1e-3, figures


def test_the_rates_set_adds_the_rate_residual_and_keeps_the_prior_attitude():
    predicted = torch.zeros(3, 13)
    predicted[:, 3] = 1.0  # identity attitude
    residual = torch.randn(3, 12)
    composed = compose(predicted, residual, "translational_rates")
    torch.testing.assert_close(composed[:, 3:7], predicted[:, 3:7])  # RES_ROT left out
    torch.testing.assert_close(composed[:, 10:13], residual[:, RES_OMEGA])
    torch.testing.assert_close(composed[:, 7:10], residual[:, RES_VEL])
    assert residual[:, RES_ROT].abs().sum() > 0


def test_a_model_from_before_the_head_loads_as_it_was_and_is_refitted_with_it():
    old = VNDModel(VEHICLE, VNDModelConfig(rate_offset_head=False))
    arch = old.architecture()
    del arch["rate_offset_head"]  # a bundle written before the field existed
    rebuilt = VNDModel.from_architecture(arch, VEHICLE)
    assert not rebuilt.config.rate_offset_head and rebuilt.residual.latent_head is None
    rebuilt.load_state_dict(old.state_dict())  # the same tensors, strictly
    base = load_bundle(shipped_bundle_path())
    active = copy.copy(base)
    active.model = rebuilt
    fresh = start_model(None, active, VEHICLE, LearnerConfig.quick())
    assert fresh.config.rate_offset_head and fresh.residual.latent_head is not None
    same = copy.copy(base)
    same.model = VNDModel(VEHICLE)
    warm = start_model(None, same, VEHICLE, LearnerConfig.quick())
    assert warm is not same.model and warm.config == same.model.config
